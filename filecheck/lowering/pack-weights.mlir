// RUN: nasir-opt %s -p pack-weights | filecheck %s

// The conv's schedule packs its weight in 16-output-channel blocks: the weight becomes a new
// nn.weight of the packed shape, the access map reads it through floordiv/mod of co, and the
// schedule no longer asks for a pack. The unpacked weight is gone.

builtin.module {
  func.func @main(%x: tensor<1x8x7x7xf32>) -> tensor<1x32x7x7xf32> {
    %w = nn.weight {name = "w"} : tensor<32x8x3x3xf32>
    %y = nest.compute %x, %w {name = "conv7", domain = #nest.domain<[n = 1, co = 32, oh = 7, ow = 7], [ci = 8, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = [], schedule = {splits = [["co", 16 : i64]], order = ["n", "oh", "ci", "kh", "kw", "ow", "co.o", "co.i"], vector = "co.i", unroll = {ow = 7 : i64, co.o = 2 : i64, kw = 3 : i64, kh = 3 : i64}, parallel = "oh", pack = {"1" = "OIHW16o"}}} : (tensor<1x8x7x7xf32>, tensor<32x8x3x3xf32>) -> tensor<1x32x7x7xf32>
    func.return %y : tensor<1x32x7x7xf32>
  }
}

// CHECK-NOT: nn.weight {name = "w"}
// CHECK: %[[W:.*]] = nn.weight {name = "w.OIHW16o"} : tensor<2x8x3x3x16xf32>
// CHECK: nest.compute %x, %[[W]]
// CHECK-SAME: affine_map<(d0, d1, d2, d3, d4, d5, d6) -> ((d1 floordiv 16), d4, d5, d6, (d1 mod 16))>
// CHECK-SAME: vector = "co.i"
// CHECK-NOT: pack =
// CHECK-SAME: : (tensor<1x8x7x7xf32>, tensor<2x8x3x3x16xf32>) -> tensor<1x32x7x7xf32>
