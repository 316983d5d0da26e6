// group tiles co and ci by G and drops cross-group work; depthwise is group with G = ci (ci dropped).
// Weights are absent from this IR: the default init=kaiming makes fresh ones of the new shapes.
// RUN: nasir-opt %s -p 'group{factor=2 layers=conv1}' | filecheck %s
// RUN: nasir-opt %s -p 'group{factor=2 layers=conv1},group{factor=2 layers=conv1}' | filecheck %s --check-prefix=TWICE
// RUN: nasir-opt %s -p 'depthwise{layers=conv1}' | filecheck %s --check-prefix=DW

// CHECK:      nn.weight {name = "conv1.weight{{.*}}"} : tensor<8x4x3x3xf32>
// CHECK:      name = "conv1", domain = #nest.domain<[n = 1, g = 2, co = 4, oh = 8, ow = 8], [ci = 4, kh = 3, kw = 3]>
// CHECK-SAME: -> (d0, ((d1 * 4) + d5), ((d3 + d6) + -1), ((d4 + d7) + -1))>
// CHECK-SAME: -> (((d1 * 4) + d2), d5, d6, d7)>, affine_map<{{.*}} -> (((d1 * 4) + d2))>]
// CHECK-SAME: out_map = affine_map<{{.*}} -> (d0, ((d1 * 4) + d2), d3, d4)>
// CHECK:      name = "conv2", domain = #nest.domain<[n = 1, co = 4, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>

// TWICE:      name = "conv1", domain = #nest.domain<[n = 1, g = 4, co = 2, oh = 8, ow = 8], [ci = 2, kh = 3, kw = 3]>
// TWICE-SAME: -> (d0, ((d1 * 2) + d5), {{.*}} -> (((d1 * 2) + d2), d5, d6, d7)>
// TWICE-SAME: (tensor<1x8x8x8xf32>, tensor<8x2x3x3xf32>, tensor<8xf32>)

// DW:      name = "conv1", domain = #nest.domain<[n = 1, g = 8, co = 1, oh = 8, ow = 8], [kh = 3, kw = 3]>
// DW-SAME: -> (d0, d1, ((d3 + d5) + -1), ((d4 + d6) + -1))>, affine_map<{{.*}} -> ((d1 + d2), 0, d5, d6)>
// DW-SAME: (tensor<1x8x8x8xf32>, tensor<8x1x3x3xf32>, tensor<8xf32>)

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
