// Operators built bottom-up from the output's coordinates [n, co, oh, ow] to the input's: four steps
// make the conv itself, seven a grouped conv (its weight one axis per output channel), three a
// depthwise one (the weight in a conv's layout, [Co, 1, Kh, Kw]), and an unweighted window
// (unfold-sum) leaves the weight a size-1 axis there.
// RUN: nasir-opt %s -p 'bottom-up{steps="broadcast 1; reduce c; unfold 1 3; unfold 2 3" layers=conv1}' | filecheck %s --check-prefix=CONV
// RUN: nasir-opt %s -p 'bottom-up{steps="split 1 2; broadcast 2; share 1; reduce c/2; merge 1 4; unfold 2 3; unfold 3 3" layers=conv1}' | filecheck %s --check-prefix=GROUP
// RUN: nasir-opt %s -p 'bottom-up{steps="share 1; unfold 2 3; unfold 3 3" layers=conv1}' | filecheck %s --check-prefix=DEPTH
// RUN: nasir-opt %s -p 'bottom-up{steps="broadcast 1; reduce c; unfold 1 3; unfold-sum 2 3" layers=conv1}' | filecheck %s --check-prefix=SUM
// RUN: not nasir-opt %s -p 'bottom-up{steps="broadcast 1; unfold 1 3" layers=conv1}' 2>&1 | filecheck %s --check-prefix=SHORT

// CONV:      nn.weight {name = "conv1.weight{{.*}}"} : tensor<8x8x3x3xf32>
// CONV:      name = "conv1", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>
// CONV-SAME: -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>

// GROUP:      nn.weight {name = "conv1.weight{{.*}}"} : tensor<8x4x3x3xf32>
// GROUP:      name = "conv1", domain = #nest.domain<[n = 1, co_o = 2, co_i = 4, oh = 8, ow = 8], [ci = 4, kh = 3, kw = 3]>
// GROUP-SAME: -> (d0, ((d1 * 4) + d5), ((d3 + d6) + -1), ((d4 + d7) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (((d1 * 4) + d2), d5, d6, d7)>
// GROUP-SAME: out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, ((d1 * 4) + d2), d3, d4)>

// DEPTH:      nn.weight {name = "conv1.weight{{.*}}"} : tensor<8x1x3x3xf32>
// DEPTH:      domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [kh = 3, kw = 3]>
// DEPTH-SAME: -> (d0, d1, ((d2 + d4) + -1), ((d3 + d5) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d1, 0, d4, d5)>

// SUM:        nn.weight {name = "conv1.weight{{.*}}"} : tensor<8x8x3x1xf32>
// SUM:        affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, 0)>

// SHORT:      the frontier (1 x 8 x 8) has no c coordinate for the input's axis 1 of 8

builtin.module attributes {nasir.inputs = ["input"], nasir.outputs = ["output"]} {
  func.func @main(%0: tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32> {
    %1 = nn.weight {name = "conv1.weight"} : tensor<8x8x3x3xf32>
    %2 = nn.weight {name = "conv1.bias"} : tensor<8xf32>
    %3 = nest.compute %0, %1, %2 {name = "conv1", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2"]} : (tensor<1x8x8x8xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>) -> tensor<1x8x8x8xf32>
    func.return %3 : tensor<1x8x8x8xf32>
  }
}
