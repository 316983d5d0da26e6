// RUN: nasir-opt %s --cpu=x86-64-v4 -p default-schedule | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v3 -p default-schedule | filecheck %s --check-prefix=AVX2

// The conv keeps a 2-row x 8-channel register tile (oh.i and co fully unrolled inside the reduction
// loops, kh and kw unrolled too); ow is the vector loop; the 288-wide sigmoid is split by the
// target's vector width. The 32-channel conv on a 7x7 image would fill 7 of 16 lanes over ow: it is
// vectorised over output channels instead, from weights packed in blocks of the vector width, with a
// register tile of every ow x both channel blocks. With AVX2 (8 lanes, 16 registers) the 8 channels
// of the first conv are one vector, and its 6-point rows one tile; the second conv's tile is one
// channel vector at all 7 points of a row: 7 accumulators, one weight vector and the 3 broadcasts
// of a kw window live in 11 of the 16 registers (2 channel vectors at 4 points would leave a tail
// of 1 point in 8 idle; 4 vectors at one point would leave half of the FMA units' slots idle).

builtin.module {
  func.func @main(%x: tensor<1x4x6x6xf32>, %v: tensor<1x288xf32>, %x7: tensor<1x8x7x7xf32>) -> tensor<1x8x6x6xf32> {
    %w = nn.weight {name = "w"} : tensor<8x4x3x3xf32>
    %y = nest.compute %x, %w {name = "conv", domain = #nest.domain<[n = 1, co = 8, oh = 6, ow = 6], [ci = 4, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
    %s = nest.compute %v {name = "sig", domain = #nest.domain<[i0 = 1, i1 = 288]>, maps = [affine_map<(d0, d1) -> (d0, d1)>], out_map = affine_map<(d0, d1) -> (d0, d1)>, combiner = "copy", epilogue = ["sigmoid"]} : (tensor<1x288xf32>) -> tensor<1x288xf32>
    %w7 = nn.weight {name = "w7"} : tensor<32x8x3x3xf32>
    %c7 = nest.compute %x7, %w7 {name = "conv7", domain = #nest.domain<[n = 1, co = 32, oh = 7, ow = 7], [ci = 8, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x8x7x7xf32>, tensor<32x8x3x3xf32>) -> tensor<1x32x7x7xf32>
    func.return %y : tensor<1x8x6x6xf32>
  }
}

// CHECK: name = "conv"
// CHECK-SAME: schedule = {splits = {{\[}}["oh", 2 : i64]], order = ["n", "oh.o", "ci", "kh", "kw", "oh.i", "co", "ow"], vector = "ow", unroll = {oh.i = 2 : i64, co = 8 : i64, kw = 3 : i64, kh = 3 : i64}, parallel = "oh.o"}
// CHECK: name = "sig"
// CHECK-SAME: schedule = {splits = [["i1", [[W:[0-9]+]] : i64]], order = ["i0", "i1.o", "i1.i"], vector = "i1.i", parallel = "i1.o"}
// CHECK: name = "conv7"
// CHECK-SAME: schedule = {splits = {{\[}}["co", [[W]] : i64]], order = ["n", "oh", "ci", "kh", "kw", "ow", "co.o", "co.i"], vector = "co.i", unroll = {ow = 7 : i64, co.o = 2 : i64, kw = 3 : i64, kh = 3 : i64}, parallel = "oh", pack = {"1" = "OIHW[[W]]o"}}

// AVX2: name = "conv"
// AVX2-SAME: schedule = {splits = {{\[}}["co", 8 : i64]], order = ["n", "oh", "ci", "kh", "kw", "ow", "co.o", "co.i"], vector = "co.i", unroll = {ow = 6 : i64, co.o = 1 : i64, kw = 3 : i64, kh = 3 : i64, ci = 4 : i64}, parallel = "oh", pack = {"1" = "OIHW8o"}}
// AVX2: name = "sig"
// AVX2-SAME: schedule = {splits = {{\[}}["i1", 8 : i64]]
// AVX2: name = "conv7"
// AVX2-SAME: schedule = {splits = {{\[}}["co", 8 : i64]], order = ["n", "co.o", "oh", "ci", "kh", "kw", "ow", "co.i"], vector = "co.i", unroll = {ow = 7 : i64, kw = 3 : i64, kh = 3 : i64}, parallel = "co.o", pack = {"1" = "OIHW8o"}}
