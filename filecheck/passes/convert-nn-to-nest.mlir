// convert-nn-to-nest: each heavy or element-wise nn op becomes one nest.compute with the documented
// dim names; batch-norm, reshape, concat, softmax and non-zero pads stay nn ops.
// RUN: nasir-opt %s -p convert-nn-to-nest | filecheck %s

func.func @main(%x: tensor<1x4x9x9xf32>, %a: tensor<2x3x5xf32>, %r: tensor<1x4xf32>) -> (tensor<1x4x9x9xf32>, tensor<1x6x5x4xf32>, tensor<1x6x9x9xf32>, tensor<1x8x9x9xf32>, tensor<1x3xf32>, tensor<2x3x7xf32>, tensor<1x4x5x5xf32>, tensor<1x5x4x4xf32>, tensor<1x5x4x4xf32>) {
  %w0 = nn.weight {name = "w0"} : tensor<4xf32>
  %w1 = nn.weight {name = "w1"} : tensor<4xf32>
  %w = nn.weight {name = "w"} : tensor<6x4x3x3xf32>
  %b = nn.weight {name = "b"} : tensor<6xf32>
  %c = nn.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 1, 0, 2, 1>, strides = array<i64: 2, 2>, name = "conv"} : (tensor<1x4x9x9xf32>, tensor<6x4x3x3xf32>, tensor<6xf32>) -> tensor<1x6x5x4xf32>
  %wg = nn.weight {name = "wg"} : tensor<6x2x3x3xf32>
  %g = nn.conv2d %x, %wg {dilations = array<i64: 2, 2>, groups = 2 : i64, pads = array<i64: 2, 2, 2, 2>, strides = array<i64: 1, 1>, name = "grouped"} : (tensor<1x4x9x9xf32>, tensor<6x2x3x3xf32>) -> tensor<1x6x9x9xf32>
  %wd = nn.weight {name = "wd"} : tensor<8x1x3x3xf32>
  %d = nn.conv2d %x, %wd {dilations = array<i64: 1, 1>, groups = 4 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, name = "dw"} : (tensor<1x4x9x9xf32>, tensor<8x1x3x3xf32>) -> tensor<1x8x9x9xf32>
  %wf = nn.weight {name = "wf"} : tensor<3x4xf32>
  %bf = nn.weight {name = "bf"} : tensor<3xf32>
  %f = nn.gemm %r, %wf, %bf {alpha = 0.5 : f32, beta = 1.0 : f32, trans_a = 0 : i64, trans_b = 1 : i64, name = "fc"} : (tensor<1x4xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<1x3xf32>
  %wm = nn.weight {name = "wm"} : tensor<5x7xf32>
  %mm = nn.matmul %a, %wm : (tensor<2x3x5xf32>, tensor<5x7xf32>) -> tensor<2x3x7xf32>
  %p = nn.max_pool %x {ceil_mode = 1 : i64, dilations = array<i64: 1, 1>, kernel = array<i64: 3, 3>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>, name = "pool"} : (tensor<1x4x9x9xf32>) -> tensor<1x4x4x4xf32>
  %ap = nn.avg_pool %x {ceil_mode = 0 : i64, count_include_pad = 1 : i64, kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>, name = "avg"} : (tensor<1x4x9x9xf32>) -> tensor<1x4x5x5xf32>
  %gp = nn.global_avg_pool %x : (tensor<1x4x9x9xf32>) -> tensor<1x4x1x1xf32>
  %s = nn.add %p, %gp {name = "add"} : (tensor<1x4x4x4xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x4x4xf32>
  %y = nn.relu %s : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %t = nn.transpose %y {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %z = nn.pad %t {pads = array<i64: 0, 1, 0, 0, 0, 0, 0, 0>, value = 0.0 : f32} : (tensor<1x4x4x4xf32>) -> tensor<1x5x4x4xf32>
  %q = nn.pad %t {pads = array<i64: 0, 1, 0, 0, 0, 0, 0, 0>, value = 1.0 : f32} : (tensor<1x4x4x4xf32>) -> tensor<1x5x4x4xf32>
  %bn = nn.batch_norm %x, %w0, %w0, %w0, %w1 {epsilon = 1.0e-05 : f32, name = "bn"} : (tensor<1x4x9x9xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x9x9xf32>
  func.return %bn, %c, %g, %d, %f, %mm, %ap, %z, %q : tensor<1x4x9x9xf32>, tensor<1x6x5x4xf32>, tensor<1x6x9x9xf32>, tensor<1x8x9x9xf32>, tensor<1x3xf32>, tensor<2x3x7xf32>, tensor<1x4x5x5xf32>, tensor<1x5x4x4xf32>, tensor<1x5x4x4xf32>
}

// CHECK:      %c = nest.compute %x, %w, %b {name = "conv",
// CHECK-SAME:   domain = #nest.domain<[n = 1, co = 6, oh = 5, ow = 4], [ci = 4, kh = 3, kw = 3]>,
// CHECK-SAME:   maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, (((d2 * 2) + d5) + -1), ((d3 * 2) + d6))>,
// CHECK-SAME:           affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>],
// CHECK-SAME:   out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2"]}
// CHECK:      %g = nest.compute %x, %wg {name = "grouped",
// CHECK-SAME:   domain = #nest.domain<[n = 1, g = 2, co = 3, oh = 9, ow = 9], [ci = 2, kh = 3, kw = 3]>,
// CHECK-SAME:   maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, ((d1 * 2) + d5), ((d3 + (d6 * 2)) + -2), ((d4 + (d7 * 2)) + -2))>,
// CHECK-SAME:           affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (((d1 * 3) + d2), d5, d6, d7)>],
// CHECK-SAME:   out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, ((d1 * 3) + d2), d3, d4)>, combiner = "mac", epilogue = []}
// CHECK:      %d = nest.compute %x, %wd {name = "dw",
// CHECK-SAME:   domain = #nest.domain<[n = 1, g = 4, co = 2, oh = 9, ow = 9], [kh = 3, kw = 3]>,
// CHECK-SAME:   maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, ((d3 + d5) + -1), ((d4 + d6) + -1))>,
// CHECK-SAME:           affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (((d1 * 2) + d2), 0, d5, d6)>],
// CHECK-SAME:   out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, ((d1 * 2) + d2), d3, d4)>
// CHECK:      %f = nest.compute %r, %wf, %bf {name = "fc", domain = #nest.domain<[m = 1, n = 3], [k = 4]>,
// CHECK-SAME:   maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d1)>],
// CHECK-SAME:   combiner = "mac", epilogue = ["scale 0.5", "add 2"]}
// CHECK:      %mm = nest.compute %a, %wm {name = "matmul_0", domain = #nest.domain<[b0 = 2, m = 3, n = 7], [k = 5]>,
// CHECK-SAME:   maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d3, d2)>],
// CHECK-SAME:   out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK:      %p = nest.compute %x {name = "pool", domain = #nest.domain<[n = 1, c = 4, oh = 4, ow = 4], [kh = 3, kw = 3]>,
// CHECK-SAME:   maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, ((d2 * 2) + d4), ((d3 * 2) + d5))>],
// CHECK-SAME:   combiner = "max"
// CHECK:      %[[PAD:.*]] = nest.compute %x {name = "avg.pad", domain = #nest.domain<[n = 1, c = 4, h = 11, w = 11]>,
// CHECK-SAME:   maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, (d2 + -1), (d3 + -1))>], {{.*}} combiner = "copy", epilogue = []}
// CHECK:      nest.compute %[[PAD]] {name = "avg", domain = #nest.domain<[n = 1, c = 4, oh = 5, ow = 5], [kh = 3, kw = 3]>,
// CHECK-SAME:   combiner = "avg"
// CHECK-SAME:   (tensor<1x4x11x11xf32>) -> tensor<1x4x5x5xf32>
// CHECK:      %gp = nest.compute %x {name = "global_avg_pool_0", domain = #nest.domain<[n = 1, c = 4], [kh = 9, kw = 9]>,
// CHECK-SAME:   out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, 0)>, combiner = "avg"
// CHECK:      %s = nest.compute %p, %gp {name = "add", domain = #nest.domain<[n = 1, c = 4, h = 4, w = 4]>,
// CHECK-SAME:   maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, 0)>],
// CHECK-SAME:   combiner = "copy", epilogue = ["add 1"]}
// CHECK:      %y = nest.compute %s {name = "relu_0", {{.*}} combiner = "copy", epilogue = ["relu"]}
// CHECK:      %t = nest.compute %y {name = "transpose_0", {{.*}} maps = [affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>]
// CHECK:      %z = nest.compute %t {name = "pad_0", domain = #nest.domain<[n = 1, c = 5, h = 4, w = 4]>,
// CHECK-SAME:   maps = [affine_map<(d0, d1, d2, d3) -> (d0, (d1 + -1), d2, d3)>]
// CHECK:      %q = nn.pad %t
// CHECK:      %bn = nn.batch_norm %x
