// fuse-epilogue: element-wise copy nests fold into the single-use mac/max/avg nest producing their
// operand; a residual add written `other + conv` fuses by commutativity; broadcast operands keep their
// maps composed with the producer's out_map; a producer with two uses is left alone.
// RUN: nasir-opt %s -p fuse-epilogue | filecheck %s

func.func @main(%x: tensor<1x4x6x6xf32>, %o: tensor<1x4x6x6xf32>) -> (tensor<1x4x6x6xf32>, tensor<1x4x3x3xf32>, tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) {
  %w = nn.weight {name = "w"} : tensor<4x4x3x3xf32>
  %b = nn.weight {name = "b"} : tensor<4xf32>
  %c = nest.compute %x, %w, %b {name = "conv", domain = #nest.domain<[n = 1, co = 4, oh = 6, ow = 6], [ci = 4, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2"]} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
  %s = nest.compute %o, %c {name = "residual", domain = #nest.domain<[n = 1, c = 4, h = 6, w = 6]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["add 1"]} : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %r = nest.compute %s {name = "relu", domain = #nest.domain<[n = 1, c = 4, h = 6, w = 6]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["relu"]} : (tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %p = nest.compute %r {name = "pool", domain = #nest.domain<[n = 1, c = 4, oh = 3, ow = 3], [kh = 2, kw = 2]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, ((d2 * 2) + d4), ((d3 * 2) + d5))>], out_map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>, combiner = "max", epilogue = []} : (tensor<1x4x6x6xf32>) -> tensor<1x4x3x3xf32>
  %sh = nn.weight {name = "shift"} : tensor<4x1x1xf32>
  %q = nest.compute %p, %sh {name = "sub", domain = #nest.domain<[n = 1, c = 4, h = 3, w = 3]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d1, 0, 0)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["sub 1"]} : (tensor<1x4x3x3xf32>, tensor<4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %q2 = nest.compute %q {name = "clip", domain = #nest.domain<[n = 1, c = 4, h = 3, w = 3]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["clip 0.0 6.0"]} : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  %c2 = nest.compute %x, %w {name = "conv2", domain = #nest.domain<[n = 1, co = 4, oh = 6, ow = 6], [ci = 4, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %r2 = nest.compute %c2 {name = "relu2", domain = #nest.domain<[n = 1, c = 4, h = 6, w = 6]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["relu"]} : (tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  func.return %r, %q2, %c2, %r2 : tensor<1x4x6x6xf32>, tensor<1x4x3x3xf32>, tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>
}

// CHECK-NOT:  name = "residual"
// CHECK-NOT:  name = "relu"
// CHECK:      %r = nest.compute %x, %w, %b, %o {name = "conv",
// CHECK-SAME:   affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>],
// CHECK-SAME:   combiner = "mac", epilogue = ["add 2", "add 3", "relu"]}
// CHECK-SAME:   : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>, tensor<4xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
// CHECK:      %q2 = nest.compute %r, %sh {name = "pool",
// CHECK-SAME:   affine_map<(d0, d1, d2, d3, d4, d5) -> (d1, 0, 0)>],
// CHECK-SAME:   combiner = "max", epilogue = ["sub 1", "clip 0.0 6.0"]}
// CHECK-NOT:  name = "sub"
// CHECK-NOT:  name = "clip"
// CHECK:      %c2 = nest.compute %x, %w {name = "conv2", {{.*}} epilogue = []}
// CHECK:      %r2 = nest.compute %c2 {name = "relu2", {{.*}} combiner = "copy", epilogue = ["relu"]}
// CHECK:      func.return %r, %q2, %c2, %r2
