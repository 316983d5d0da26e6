// RUN: nasir-opt %s -p nest-bufferize,convert-nest-to-loops | filecheck %s

// A padded 3x3 conv over 10 rows of 40 (5 vector tiles of 8): its tile comes in nested versions,
// rows first (8 of 10 inner rows), then tiles (3 of 5 inner tiles). Inner rows and tiles read
// without masks. The edge tiles (2 of 5) and the edge rows (2 of 10), one a side, each get a
// version with the loop a constant: the first and last tile of an inner row mask their kw = 0 /
// kw = 2 reads with constant lane masks (no compares); the top and bottom rows, at least an eighth
// of the rows (EDGE_SHARE), skip the kh = 0 / kh = 2 reads (padding) and mask their columns at
// run time (under an eighth they version their tiles: convert-nest-to-loops-versions-nested.mlir).

builtin.module {
  func.func @main(%x: tensor<1x2x10x40xf32>) -> tensor<1x1x10x40xf32> {
    %w = nn.weight {name = "w"} : tensor<1x2x3x3xf32>
    %y = nest.compute %x, %w {name = "conv", domain = #nest.domain<[n = 1, co = 1, oh = 10, ow = 40], [ci = 2, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = [], schedule = {splits = [["ow", 8]], order = ["n", "co", "oh", "ow.o", "ci", "kh", "kw", "ow.i"], vector = "ow.i", unroll = {kh = 3, kw = 3}}} : (tensor<1x2x10x40xf32>, tensor<1x2x3x3xf32>) -> tensor<1x1x10x40xf32>
    func.return %y : tensor<1x1x10x40xf32>
  }
}

// CHECK: %[[LAST_OFF:.*]] = arith.constant dense<[true, true, true, true, true, true, true, false]> : vector<8xi1>
// CHECK: %[[FIRST_OFF:.*]] = arith.constant dense<[false, true, true, true, true, true, true, true]> : vector<8xi1>
// CHECK: scf.for
// CHECK: scf.for
// CHECK: scf.if
// CHECK: scf.if
// CHECK-COUNT-9: vector.load %{{.*}} : memref<1x2x10x40xf32>, vector<8xf32>
// CHECK-NOT: vector.maskedload
// CHECK: } else {
// CHECK: scf.if
// CHECK-NOT: llvm.icmp
// CHECK: vector.maskedload %{{.*}}, %[[FIRST_OFF]], %{{.*}}
// CHECK: vector.load
// CHECK: vector.load
// CHECK: vector.maskedload %{{.*}}, %[[FIRST_OFF]], %{{.*}}
// CHECK: } else {
// CHECK-NOT: llvm.icmp
// CHECK: vector.load
// CHECK: vector.load
// CHECK: vector.maskedload %{{.*}}, %[[LAST_OFF]], %{{.*}}
// CHECK: } else {
// CHECK: scf.if
// CHECK-COUNT-6: vector.{{(masked)?}}load %{{.*}} : memref<1x2x10x40xf32>
// CHECK-NOT: memref<1x2x10x40xf32>
// CHECK: } else {
// CHECK: llvm.icmp "ult"
// CHECK-COUNT-6: vector.{{(masked)?}}load %{{.*}} : memref<1x2x10x40xf32>
// CHECK-NOT: memref<1x2x10x40xf32>
// CHECK: func.return
