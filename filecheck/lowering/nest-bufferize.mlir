// RUN: nasir-opt %s -p nest-bufferize | filecheck %s

// @main takes (input, output, weights, workspace). conv's result and relu's result are live at the
// same time (two arena slots); the sigmoid reuses conv's slot; the flatten is a view (no copy), the
// final reshape into the output argument is a copy.

builtin.module {
  func.func @main(%x: tensor<1x4x6x6xf32>) -> tensor<1x8x6x6xf32> {
    %w = nn.weight {name = "w"} : tensor<8x4x3x3xf32>
    %y = nest.compute %x, %w {name = "conv", domain = #nest.domain<[n = 1, co = 8, oh = 6, ow = 6], [ci = 4, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
    %r = nest.compute %y {name = "relu", domain = #nest.domain<[n = 1, c = 8, h = 6, w = 6]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["relu"]} : (tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
    %f = nn.reshape %r : (tensor<1x8x6x6xf32>) -> tensor<1x288xf32>
    %s = nest.compute %f {name = "sig", domain = #nest.domain<[i0 = 1, i1 = 288]>, maps = [affine_map<(d0, d1) -> (d0, d1)>], out_map = affine_map<(d0, d1) -> (d0, d1)>, combiner = "copy", epilogue = ["sigmoid"]} : (tensor<1x288xf32>) -> tensor<1x288xf32>
    %g = nn.reshape %s : (tensor<1x288xf32>) -> tensor<1x8x6x6xf32>
    func.return %g : tensor<1x8x6x6xf32>
  }
}

// CHECK: builtin.module attributes {nasir.workspace_bytes = 2304 : i64, nasir.weights_bytes = 1152 : i64, nasir.weight_offsets = {w = 0 : i64}
// CHECK: func.func @main(%[[X:.*]]: memref<1x4x6x6xf32>, %[[OUT:.*]]: memref<1x8x6x6xf32>, %[[W:.*]]: memref<1152xi8>, %[[WS:.*]]: memref<2304xi8>)
// CHECK: memref.view %[[W]][%{{.*}}][] {nasir.weight = "w"} : memref<1152xi8> to memref<8x4x3x3xf32>
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[Y:.*]] = memref.view %[[WS]][%[[C0]]][] : memref<2304xi8> to memref<1x8x6x6xf32>
// CHECK: name = "conv"
// CHECK-NEXT: bufferization.materialize_in_destination %{{.*}} in writable %[[Y]]
// CHECK: %[[C1:.*]] = arith.constant 1152 : index
// CHECK-NEXT: %[[R:.*]] = memref.view %[[WS]][%[[C1]]][]
// CHECK: name = "relu"
// CHECK-NEXT: bufferization.materialize_in_destination %{{.*}} in writable %[[R]]
// CHECK: arith.constant 1152 : index
// CHECK-NEXT: memref.view %[[WS]][%{{.*}}][] : memref<2304xi8> to memref<1x288xf32>
// CHECK-NOT: nn.reshape
// CHECK: name = "sig"
// CHECK: %[[G:.*]] = nn.reshape
// CHECK-NEXT: bufferization.materialize_in_destination %[[G]] in writable %[[OUT]]
// CHECK-NEXT: func.return
