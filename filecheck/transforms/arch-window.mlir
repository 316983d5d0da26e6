// fold keeps a window's centre tap, unfold adds a centred window, shift offsets a spatial read.
// RUN: nasir-opt %s -p 'fold{dim=kh layers=conv1}' | filecheck %s
// RUN: nasir-opt %s -p 'fold{dim=kw layers=conv1},unfold{dim=ow size=5 layers=conv1}' | filecheck %s --check-prefix=UNFOLD
// RUN: nasir-opt %s -p 'shift{dim=oh offset=-1 layers=conv1}' | filecheck %s --check-prefix=SHIFT

// CHECK:      nn.weight {name = "conv1.weight{{.*}}"} : tensor<8x8x1x3xf32>
// CHECK:      name = "conv1", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 1, kw = 3]>
// CHECK-SAME: -> (d0, d4, (d2 + d5), ((d3 + d6) + -1))>

// UNFOLD:      name = "conv1", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 5]>
// UNFOLD-SAME: -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -2))>
// UNFOLD-SAME: tensor<8x8x3x5xf32>

// SHIFT:      name = "conv1", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>
// SHIFT-SAME: -> (d0, d4, ((d2 + d5) + -2), ((d3 + d6) + -1))>

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
