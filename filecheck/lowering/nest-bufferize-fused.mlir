// RUN: nasir-opt %s -p nest-bufferize | filecheck %s

// Conv "b" reads "a" and only pool "p" reads "b"; the pool is marked `nasir.fuse_rows`, so its
// kernel computes b's rows as it needs them: b runs when p runs, reading a all along. a's bytes
// (offset 0) therefore live until p, and p's result takes fresh bytes after b's (2048), not a's,
// as it would if a died at b's place in @main.

builtin.module {
  func.func @main(%x: tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32> {
    %w = nn.weight {name = "w"} : tensor<4x4x3x3xf32>
    %a = nest.compute %x {name = "a", domain = #nest.domain<[n = 1, c = 4, h = 8, w = 8]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["relu"]} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
    %b = nest.compute %a, %w {name = "b", domain = #nest.domain<[n = 1, co = 4, oh = 8, ow = 8], [ci = 4, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x8x8xf32>
    %p = nest.compute %b {nasir.fuse_rows, name = "p", domain = #nest.domain<[n = 1, c = 4, oh = 4, ow = 4], [kh = 2, kw = 2]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 * 2 + d4, d3 * 2 + d5)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>, combiner = "max", epilogue = []} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
    %y = nest.compute %p {name = "y", domain = #nest.domain<[n = 1, c = 4, h = 4, w = 4]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["sigmoid"]} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    func.return %y : tensor<1x4x4x4xf32>
  }
}

// CHECK:      builtin.module attributes {nasir.workspace_bytes = 2304 : i64
// CHECK:      func.func @main({{.*}}, %[[WS:.*]]: memref<2304xi8>)
// CHECK:      {nasir.weight = "w"}
// CHECK-NEXT: %[[C0:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[A:.*]] = memref.view %[[WS]][%[[C0]]][] : memref<2304xi8> to memref<1x4x8x8xf32>
// CHECK:      name = "a"
// CHECK-NEXT: bufferization.materialize_in_destination %{{.*}} in writable %[[A]]
// CHECK:      %[[C1:.*]] = arith.constant 1024 : index
// CHECK-NEXT: %[[B:.*]] = memref.view %[[WS]][%[[C1]]][] : memref<2304xi8> to memref<1x4x8x8xf32>
// CHECK:      name = "b"
// CHECK-NEXT: bufferization.materialize_in_destination %{{.*}} in writable %[[B]]
// CHECK:      %[[C2:.*]] = arith.constant 2048 : index
// CHECK-NEXT: %[[P:.*]] = memref.view %[[WS]][%[[C2]]][] : memref<2304xi8> to memref<1x4x4x4xf32>
// CHECK:      name = "p"
// CHECK-NEXT: bufferization.materialize_in_destination %{{.*}} in writable %[[P]]
