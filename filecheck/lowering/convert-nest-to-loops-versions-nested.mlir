// RUN: nasir-opt %s -p nest-bufferize,convert-nest-to-loops | filecheck %s

// The padded 3x3 conv of convert-nest-to-loops-versions.mlir over 20 rows of 40: its first and
// last rows are under an eighth of the rows (EDGE_SHARE), so their versions version the tiles of
// the row too. The first row's inner tiles read two rows (kh = 0 is padding) without masks, its
// first tile masks kw = 0 with a constant lane mask: no compares, as in the inner rows.



builtin.module {
  func.func @main(%x: tensor<1x2x20x40xf32>) -> tensor<1x1x20x40xf32> {
    %w = nn.weight {name = "w"} : tensor<1x2x3x3xf32>
    %y = nest.compute %x, %w {name = "conv", domain = #nest.domain<[n = 1, co = 1, oh = 20, ow = 40], [ci = 2, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = [], schedule = {splits = [["ow", 8]], order = ["n", "co", "oh", "ow.o", "ci", "kh", "kw", "ow.i"], vector = "ow.i", unroll = {kh = 3, kw = 3}}} : (tensor<1x2x20x40xf32>, tensor<1x2x3x3xf32>) -> tensor<1x1x20x40xf32>
    func.return %y : tensor<1x1x20x40xf32>
  }
}


// CHECK: %[[LAST_OFF:.*]] = arith.constant dense<[true, true, true, true, true, true, true, false]> : vector<8xi1>
// CHECK: %[[FIRST_OFF:.*]] = arith.constant dense<[false, true, true, true, true, true, true, true]> : vector<8xi1>
// inner rows, inner tiles
// CHECK: scf.if
// CHECK: scf.if
// CHECK-COUNT-9: vector.load %{{.*}} : memref<1x2x20x40xf32>, vector<8xf32>
// CHECK-COUNT-3: vector.maskedload %{{.*}}, %[[LAST_OFF]], %{{.*}} : memref<1x2x20x40xf32>
// the first row: its inner tiles, then its first tile
// CHECK: } else {
// CHECK-NEXT: arith.cmpi ult
// CHECK-NEXT: scf.if
// CHECK-NOT: llvm.icmp
// CHECK: scf.if
// CHECK-NOT: vector.maskedload
// CHECK-NOT: llvm.icmp
// CHECK-COUNT-6: vector.load %{{.*}} : memref<1x2x20x40xf32>, vector<8xf32>
// CHECK-NOT: memref<1x2x20x40xf32>
// CHECK: } else {
// CHECK-NOT: llvm.icmp
// CHECK: vector.maskedload %{{.*}}, %[[FIRST_OFF]], %{{.*}} : memref<1x2x20x40xf32>
// CHECK: func.return
