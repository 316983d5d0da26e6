// bottleneck shrinks one conv loop by B. co: fewer filters, carried through relu1 into conv2's ci.
// ci: conv2 reads the first half of its input channels. oh/ow: conv2 computes every 2nd row and
// column (stride x2) and conv2.expand repeats each value 2x2 so consumers keep their shape.
// RUN: nasir-opt %s -p 'bottleneck{dim=co factor=2 layers=conv1}' | filecheck %s
// RUN: nasir-opt %s -p 'bottleneck{dim=ci factor=2 layers=conv2}' | filecheck %s --check-prefix=CI
// RUN: nasir-opt %s -p 'bottleneck{dim=oh factor=2 layers=conv2},bottleneck{dim=ow factor=2 layers=conv2}' | filecheck %s --check-prefix=HW

// CHECK:      nn.weight {name = "conv1.weight{{.*}}"} : tensor<4x8x3x3xf32>
// CHECK:      nn.weight {name = "conv1.bias{{.*}}"} : tensor<4xf32>
// CHECK:      name = "conv1", domain = #nest.domain<[n = 1, co = 4, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>
// CHECK-SAME: -> tensor<1x4x8x8xf32>
// CHECK:      name = "relu1", domain = #nest.domain<[n = 1, c = 4, h = 8, w = 8]>
// CHECK:      nn.weight {name = "conv2.weight{{.*}}"} : tensor<4x4x3x3xf32>
// CHECK:      name = "conv2", domain = #nest.domain<[n = 1, co = 4, oh = 8, ow = 8], [ci = 4, kh = 3, kw = 3]>
// CHECK-SAME: (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x8x8xf32>

// CI:      name = "conv1", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>
// CI:      name = "conv2", domain = #nest.domain<[n = 1, co = 4, oh = 8, ow = 8], [ci = 4, kh = 3, kw = 3]>
// CI-SAME: (tensor<1x8x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x8x8xf32>

// HW:      name = "conv2", domain = #nest.domain<[n = 1, co = 4, oh = 4, ow = 4], [ci = 8, kh = 3, kw = 3]>
// HW-SAME: -> (d0, d4, (((d2 * 2) + d5) + -1), (((d3 * 2) + d6) + -1))>
// HW-SAME: -> tensor<1x4x4x4xf32>
// HW-NEXT: nest.compute %{{.*}} {name = "conv2.expand", domain = #nest.domain<[n = 1, c = 4, h = 4, sh = 2, w = 4, sw = 2]>
// HW-SAME: maps = [affine_map<{{.*}} -> (d0, d1, d2, d4)>], out_map = affine_map<{{.*}} -> (d0, d1, ((d2 * 2) + d3), ((d4 * 2) + d5))>
// HW-SAME: combiner = "copy"
// HW-SAME: (tensor<1x4x4x4xf32>) -> tensor<1x4x8x8xf32>

builtin.module attributes {nasir.inputs = ["input"], nasir.outputs = ["output"]} {
  func.func @main(%0: tensor<1x8x8x8xf32>) -> tensor<1x4x8x8xf32> {
    %1 = nn.weight {name = "conv1.weight"} : tensor<8x8x3x3xf32>
    %2 = nn.weight {name = "conv1.bias"} : tensor<8xf32>
    %3 = nest.compute %0, %1, %2 {name = "conv1", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2"]} : (tensor<1x8x8x8xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>) -> tensor<1x8x8x8xf32>
    %4 = nest.compute %3 {name = "relu1", domain = #nest.domain<[n = 1, c = 8, h = 8, w = 8]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["relu"]} : (tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %5 = nn.weight {name = "conv2.weight"} : tensor<4x8x3x3xf32>
    %6 = nest.compute %4, %5 {name = "conv2", domain = #nest.domain<[n = 1, co = 4, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x8x8x8xf32>, tensor<4x8x3x3xf32>) -> tensor<1x4x8x8xf32>
    func.return %6 : tensor<1x4x8x8xf32>
  }
}
