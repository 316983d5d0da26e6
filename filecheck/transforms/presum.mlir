// presum: a conv whose weight is one value along kw (expand{dim=kw}) sums its input over kw in a
// nest of its own, then contracts over ci and kh alone; a conv whose weight reads every tap is left.
// RUN: nasir-opt %s -p presum | filecheck %s

// CHECK:      %[[ONES:.*]] = nn.weight {name = "shared.ones"} : tensor<1xf32>
// CHECK-NEXT: %[[Z:.*]] = nest.compute %0, %[[ONES]] {name = "shared.presum", domain = #nest.domain<[n = 1, ci = 8, x2 = 8, x3 = 8], [kw = 3]>
// CHECK-SAME: maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, ((d3 + d4) + -1))>, affine_map<(d0, d1, d2, d3, d4) -> (0)>]
// CHECK-SAME: -> tensor<1x8x8x8xf32>
// CHECK-NEXT: nest.compute %[[Z]], %1, %2 {name = "shared", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3]>
// CHECK-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d4, ((d2 + d5) + -1), d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d1, d4, d5, 0)>
// CHECK-SAME: epilogue = ["add 2"]
// CHECK-NOT:  presum
// CHECK:      name = "full", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>

builtin.module attributes {nasir.inputs = ["input"], nasir.outputs = ["output"]} {
  func.func @main(%0: tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32> {
    %1 = nn.weight {name = "shared.weight"} : tensor<8x8x3x1xf32>
    %2 = nn.weight {name = "shared.bias"} : tensor<8xf32>
    %3 = nest.compute %0, %1, %2 {name = "shared", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, 0)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2"]} : (tensor<1x8x8x8xf32>, tensor<8x8x3x1xf32>, tensor<8xf32>) -> tensor<1x8x8x8xf32>
    %4 = nn.weight {name = "full.weight"} : tensor<8x8x3x3xf32>
    %5 = nest.compute %3, %4 {name = "full", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x8x8x8xf32>, tensor<8x8x3x3xf32>) -> tensor<1x8x8x8xf32>
    func.return %5 : tensor<1x8x8x8xf32>
  }
}
