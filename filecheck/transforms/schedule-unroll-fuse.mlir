// unroll marks a loop (default: fully); fuse merges loops that are adjacent in the current order
// (an order equal to the one splits and fusions create is left implicit).
// RUN: nasir-opt %s -p 'unroll{dim=kw},unroll{dim=k factor=4}' | filecheck %s
// RUN: nasir-opt %s -p 'fuse{dims=oh,ow}' | filecheck %s --check-prefix=FUSE
// RUN: nasir-opt %s -p 'interchange{order=ci,co},fuse{dims=oh,ow,co}' | filecheck %s --check-prefix=THREE

// CHECK:      name = "conv1"
// CHECK-SAME: schedule = {unroll = {kw = 3 : i64}}
// CHECK:      name = "fc"
// CHECK-SAME: schedule = {unroll = {k = 4 : i64}}

// FUSE:      name = "conv1"
// FUSE-SAME: schedule = {fusions = [["oh", "ow"]]}

// THREE:      name = "conv1"
// THREE-SAME: schedule = {fusions = [["oh", "ow"], ["oh*ow", "co"]], order = ["n", "ci", "oh*ow*co", "kh", "kw"]}

func.func @main(%x: tensor<1x4x8x8xf32>, %a: tensor<2x16xf32>) -> (tensor<1x8x8x8xf32>, tensor<2x8xf32>) {
  %w = nn.weight {name = "conv1.weight"} : tensor<8x4x3x3xf32>
  %y = nest.compute %x, %w {name = "conv1",
      domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 4, kh = 3, kw = 3]>,
      maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>,
              affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>],
      out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>,
      combiner = "mac", epilogue = []} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x8x8xf32>
  %v = nn.weight {name = "fc.weight"} : tensor<8x16xf32>
  %z = nest.compute %a, %v {name = "fc",
      domain = #nest.domain<[m = 2, n = 8], [k = 16]>,
      maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>],
      out_map = affine_map<(d0, d1, d2) -> (d0, d1)>,
      combiner = "mac", epilogue = []} : (tensor<2x16xf32>, tensor<8x16xf32>) -> tensor<2x8xf32>
  func.return %y, %z : tensor<1x8x8x8xf32>, tensor<2x8xf32>
}
