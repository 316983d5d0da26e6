// vectorize marks the innermost loop, which must be over parallel dims (lanes own output elements);
// parallel marks a loop over parallel dims. Neither reorders anything.
// RUN: nasir-opt %s -p 'strip-mine{dim=co factor=4 layers=conv1},interchange{order=kw,"co.i"},vectorize{dim="co.i"},parallel{dim="co.o"}' | filecheck %s
// RUN: nasir-opt %s -p 'interchange{order=k,n},vectorize{dim=n layers=fc},parallel{dim=m}' | filecheck %s --check-prefix=RED

// CHECK:      name = "conv1"
// CHECK-SAME: schedule = {splits = [["co", 4 : i64]], order = ["n", "co.o", "kw", "oh", "ow", "ci", "kh", "co.i"], vector = "co.i", parallel = "co.o"}

// RED:      name = "fc"
// RED-SAME: schedule = {order = ["m", "k", "n"], vector = "n", parallel = "m"}

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
