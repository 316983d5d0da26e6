// Syno's coordinate primitives on a conv's dims: split-dim and merge-dims keep the conv, split-dim twice
// and tie make it grouped, dilate spreads a window, expand and share change what the weight reads.
// RUN: nasir-opt %s -p 'split-dim{dim=co factor=4 layers=conv1}' | filecheck %s --check-prefix=SPLIT
// RUN: nasir-opt %s -p 'split-dim{dim=oh factor=2 layers=conv1},merge-dims{outer=oh_o inner=oh_i layers=conv1}' | filecheck %s --check-prefix=MERGE
// RUN: nasir-opt %s -p 'split-dim{dim=co factor=4 layers=conv1},split-dim{dim=ci factor=4 layers=conv1},tie{dim=ci_o to=co_o layers=conv1}' | filecheck %s --check-prefix=TIE
// RUN: nasir-opt %s -p 'dilate{dim=kw factor=2 layers=conv1}' | filecheck %s --check-prefix=DILATE
// RUN: nasir-opt %s -p 'expand{dim=kh layers=conv1}' | filecheck %s --check-prefix=EXPAND
// RUN: nasir-opt %s -p 'share{dim=oh layers=conv1}' | filecheck %s --check-prefix=SHARE

// SPLIT:      nn.weight {name = "conv1.weight"} : tensor<8x8x3x3xf32>
// SPLIT:      name = "conv1", domain = #nest.domain<[n = 1, co_o = 2, co_i = 4, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>
// SPLIT-SAME: -> (d0, d5, ((d3 + d6) + -1), ((d4 + d7) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (((d1 * 4) + d2), d5, d6, d7)>
// SPLIT-SAME: out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, ((d1 * 4) + d2), d3, d4)>

// MERGE:      name = "conv1", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>
// MERGE-SAME: -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>

// TIE:        nn.weight {name = "conv1.weight{{.*}}"} : tensor<8x4x3x3xf32>
// TIE:        name = "conv1", domain = #nest.domain<[n = 1, co_o = 2, co_i = 4, oh = 8, ow = 8], [ci_i = 4, kh = 3, kw = 3]>
// TIE-SAME:   -> (d0, ((d1 * 4) + d5), ((d3 + d6) + -1), ((d4 + d7) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (((d1 * 4) + d2), d5, d6, d7)>

// DILATE:      name = "conv1", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>
// DILATE-SAME: -> (d0, d4, ((d2 + d5) + -1), ((d3 + (d6 * 2)) + -2))>

// EXPAND:      nn.weight {name = "conv1.weight{{.*}}"} : tensor<8x8x1x3xf32>
// EXPAND:      name = "conv1", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>
// EXPAND-SAME: affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, 0, d6)>

// SHARE:      nn.weight {name = "conv1.weight{{.*}}"} : tensor<8x8x3x3x8xf32>
// SHARE:      affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6, d2)>

builtin.module attributes {nasir.inputs = ["input"], nasir.outputs = ["output"]} {
  func.func @main(%0: tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32> {
    %1 = nn.weight {name = "conv1.weight"} : tensor<8x8x3x3xf32>
    %2 = nn.weight {name = "conv1.bias"} : tensor<8xf32>
    %3 = nest.compute %0, %1, %2 {name = "conv1", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2"]} : (tensor<1x8x8x8xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>) -> tensor<1x8x8x8xf32>
    func.return %3 : tensor<1x8x8x8xf32>
  }
}
