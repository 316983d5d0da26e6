// Illegal architecture requests: one message naming layer, dimension and value; exit 1.
// RUN: not nasir-opt %s -p 'group{factor=3 layers=conv1}' 2>&1 | filecheck %s --check-prefix=DIV
// RUN: not nasir-opt %s -p 'bottleneck{dim=kh factor=2}' 2>&1 | filecheck %s --check-prefix=DIM
// RUN: not nasir-opt %s -p 'group{factor=2 layers="layer[0-9]+"}' 2>&1 | filecheck %s --check-prefix=NOLAYER
// RUN: not nasir-opt %s -p 'bottleneck{dim=co factor=2 layers=conv2}' 2>&1 | filecheck %s --check-prefix=OUTPUT
// RUN: not nasir-opt %s -p 'group{factor=2 layers=conv1 init=inherit}' 2>&1 | filecheck %s --check-prefix=INHERIT

// DIV:     group: layer 'conv1': dimension co = 8 is not divisible by factor 3
// DIM:     bottleneck: unknown dim 'kh' (choose from co, ci, oh, ow)
// NOLAYER: group: layers='layer[0-9]+' matches no nest (nests: conv1, relu1, conv2)
// OUTPUT:  bottleneck: layer 'conv2' dimension co = 4 -> 2: the channel change reaches the model output
// INHERIT: group: init=inherit needs the trained value of weight 'conv1.weight' (layer 'conv1')

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
