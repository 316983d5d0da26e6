// strip-mine splits a loop into .o/.i in place; tile strip-mines several and moves the inner parts
// after the last outer part. A non-dividing factor is legal (lowering guards the tail).
// RUN: nasir-opt %s -p 'strip-mine{dim=co factor=4},interchange{order=ow,"co.i"}' | filecheck %s
// RUN: nasir-opt %s -p 'tile{dims=co,ow factors=4,3}' | filecheck %s --check-prefix=TILE
// RUN: nasir-opt %s -p 'strip-mine{dim=k factor=8},strip-mine{dim="k.i" factor=4}' | filecheck %s --check-prefix=TWICE

// CHECK:      name = "conv1"
// CHECK-SAME: schedule = {splits = [["co", 4 : i64]], order = ["n", "co.o", "ow", "oh", "co.i", "ci", "kh", "kw"]}

// TILE:      name = "conv1"
// TILE-SAME: schedule = {splits = [["co", 4 : i64], ["ow", 3 : i64]], order = ["n", "co.o", "oh", "ow.o", "co.i", "ow.i", "ci", "kh", "kw"]}

// TWICE:      name = "conv1"
// TWICE-NOT:  schedule
// TWICE:      name = "fc"
// TWICE-SAME: schedule = {splits = [["k", 8 : i64], ["k.i", 4 : i64]]}

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
