// nest.compute with every combiner (mac, max, avg, copy), every epilogue step and every schedule
// entry: it parses, verifies, prints, and parses again to the same text.
// RUN: nasir-opt %s | nasir-opt | filecheck %s

func.func @main(%x: tensor<1x3x8x8xf32>) -> tensor<1x16x4x4xf32> {
  %w = nn.weight {name = "conv.weight"} : tensor<16x3x3x3xf32>
  %b = nn.weight {name = "conv.bias"} : tensor<16xf32>
  %s = nn.weight {name = "bn.scale"} : tensor<16xf32>
  %conv = nest.compute %x, %w, %b, %s {name = "conv", domain = #nest.domain<[n = 1, co = 16, oh = 8, ow = 8], [ci = 3, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) - 1), ((d3 + d6) - 1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2", "mul 3", "sub 2", "div 3", "scale 0.5", "relu", "clip 0.0 6.0", "leaky_relu 0.1", "hard_sigmoid 0.2 0.5", "sigmoid", "hard_swish"], schedule = {splits = [["co", 8], ["ow", 4]], fusions = [["n", "co.o"]], order = ["n*co.o", "oh", "ci", "kh", "kw", "ow.o", "ow.i", "co.i"], vector = "co.i", unroll = {kw = 3 : i64}, parallel = "n*co.o", pack = {"1" = "OIHW8o"}}} : (tensor<1x3x8x8xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
  %max = nest.compute %conv {name = "pool", domain = #nest.domain<[n = 1, c = 16, oh = 4, ow = 4], [kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, ((d2 * 2) + d4) - 1, ((d3 * 2) + d5) - 1)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>, combiner = "max", epilogue = []} : (tensor<1x16x8x8xf32>) -> tensor<1x16x4x4xf32>
  %avg = nest.compute %max {name = "avg", domain = #nest.domain<[n = 1, c = 16, oh = 4, ow = 4], [kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 + d4 - 1, d3 + d5 - 1)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>, combiner = "avg", epilogue = []} : (tensor<1x16x4x4xf32>) -> tensor<1x16x4x4xf32>
  %copy = nest.compute %avg, %max {name = "residual", domain = #nest.domain<[n = 1, c = 16, h = 4, w = 4]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["add 1", "relu"]} : (tensor<1x16x4x4xf32>, tensor<1x16x4x4xf32>) -> tensor<1x16x4x4xf32>
  func.return %copy : tensor<1x16x4x4xf32>
}

// CHECK:      %conv = nest.compute %x, %w, %b, %s {name = "conv",
// CHECK-SAME:   domain = #nest.domain<[n = 1, co = 16, oh = 8, ow = 8], [ci = 3, kh = 3, kw = 3]>,
// CHECK-SAME:   maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>,
// CHECK-SAME:           affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>,
// CHECK-SAME:   out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac",
// CHECK-SAME:   epilogue = ["add 2", "mul 3", "sub 2", "div 3", "scale 0.5", "relu", "clip 0.0 6.0", "leaky_relu 0.1", "hard_sigmoid 0.2 0.5", "sigmoid", "hard_swish"],
// CHECK-SAME:   schedule = {splits = [["co", 8 : i64], ["ow", 4 : i64]], fusions = [["n", "co.o"]],
// CHECK-SAME:     order = ["n*co.o", "oh", "ci", "kh", "kw", "ow.o", "ow.i", "co.i"], vector = "co.i",
// CHECK-SAME:     unroll = {kw = 3 : i64}, parallel = "n*co.o", pack = {"1" = "OIHW8o"}}}
// CHECK-SAME:   : (tensor<1x3x8x8xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
// CHECK:      %max = nest.compute %conv {name = "pool", domain = #nest.domain<[n = 1, c = 16, oh = 4, ow = 4], [kh = 3, kw = 3]>,
// CHECK-SAME:   maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, (((d2 * 2) + d4) + -1), (((d3 * 2) + d5) + -1))>],
// CHECK-SAME:   combiner = "max", epilogue = []} : (tensor<1x16x8x8xf32>) -> tensor<1x16x4x4xf32>
// CHECK:      %avg = nest.compute %max {name = "avg",
// CHECK-SAME:   combiner = "avg", epilogue = []} : (tensor<1x16x4x4xf32>) -> tensor<1x16x4x4xf32>
// CHECK:      %copy = nest.compute %avg, %max {name = "residual", domain = #nest.domain<[n = 1, c = 16, h = 4, w = 4]>,
// CHECK-SAME:   combiner = "copy", epilogue = ["add 1", "relu"]} : (tensor<1x16x4x4xf32>, tensor<1x16x4x4xf32>) -> tensor<1x16x4x4xf32>
// CHECK:      func.return %copy : tensor<1x16x4x4xf32>
