// Every nn op parses, verifies, prints in its custom form, and parses again to the same text.
// RUN: nasir-opt %s | nasir-opt | filecheck %s

func.func @main(%x: tensor<1x3x8x8xf32>, %m: tensor<2x4x5xf32>) -> tensor<1x10xf32> {
  %w = nn.weight {name = "conv.weight"} : tensor<4x3x3x3xf32>
  %b = nn.weight {name = "conv.bias"} : tensor<4xf32>
  %c = nn.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, name = "conv"} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %dw = nn.weight {name = "dw.weight"} : tensor<4x1x3x3xf32>
  %d = nn.conv2d %c, %dw {dilations = array<i64: 2, 2>, groups = 4 : i64, pads = array<i64: 2, 2, 2, 2>, strides = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>, tensor<4x1x3x3xf32>) -> tensor<1x4x4x4xf32>
  %s = nn.weight {name = "bn.scale"} : tensor<4xf32>
  %sh = nn.weight {name = "bn.bias"} : tensor<4xf32>
  %mu = nn.weight {name = "bn.mean"} : tensor<4xf32>
  %var = nn.weight {name = "bn.var"} : tensor<4xf32>
  %bn = nn.batch_norm %c, %s, %sh, %mu, %var {epsilon = 1.0e-05 : f32, name = "bn"} : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %r = nn.relu %bn : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %sg = nn.sigmoid %r : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %hs = nn.hard_swish %sg : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %lr = nn.leaky_relu %hs {alpha = 0.1 : f32} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %hg = nn.hard_sigmoid %lr {alpha = 0.2 : f32, beta = 0.5 : f32} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %cl = nn.clip %hg {min = 0.0 : f32, max = 6.0 : f32} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %ln = nn.lrn %cl {size = 3 : i64, alpha = 1.0e-04 : f32, beta = 0.75 : f32, bias = 1.0 : f32} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %a = nn.add %ln, %r : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %b4 = nn.reshape %b : (tensor<4xf32>) -> tensor<1x4x1x1xf32>
  %sb = nn.sub %a, %b4 : (tensor<1x4x8x8xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x8x8xf32>
  %ml = nn.mul %sb, %a : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %dv = nn.div %ml, %a : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %mp = nn.max_pool %dv {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = 1 : i64} : (tensor<1x4x8x8xf32>) -> tensor<1x4x5x5xf32>
  %ap = nn.avg_pool %dv {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, ceil_mode = 0 : i64, count_include_pad = 0 : i64} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  %cc = nn.concat %ap, %d {axis = 1 : i64} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x8x4x4xf32>
  %pd = nn.pad %cc {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>, value = 0.0 : f32} : (tensor<1x8x4x4xf32>) -> tensor<1x8x6x6xf32>
  %gm = nn.global_max_pool %mp : (tensor<1x4x5x5xf32>) -> tensor<1x4x1x1xf32>
  %ga = nn.global_avg_pool %pd : (tensor<1x8x6x6xf32>) -> tensor<1x8x1x1xf32>
  %t = nn.transpose %ga {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x8x1x1xf32>) -> tensor<1x1x1x8xf32>
  %f = nn.reshape %t : (tensor<1x1x1x8xf32>) -> tensor<1x8xf32>
  %fw = nn.weight {name = "fc.weight"} : tensor<10x8xf32>
  %fb = nn.weight {name = "fc.bias"} : tensor<10xf32>
  %g = nn.gemm %f, %fw, %fb {alpha = 1.0 : f32, beta = 1.0 : f32, trans_a = 0 : i64, trans_b = 1 : i64, name = "fc"} : (tensor<1x8xf32>, tensor<10x8xf32>, tensor<10xf32>) -> tensor<1x10xf32>
  %mw = nn.weight {name = "mm.weight"} : tensor<5x3xf32>
  %mm = nn.matmul %m, %mw : (tensor<2x4x5xf32>, tensor<5x3xf32>) -> tensor<2x4x3xf32>
  %sm = nn.softmax %g {axis = 1 : i64} : (tensor<1x10xf32>) -> tensor<1x10xf32>
  func.return %sm : tensor<1x10xf32>
}

// CHECK:      builtin.module {
// CHECK-NEXT:   func.func @main(%x: tensor<1x3x8x8xf32>, %m: tensor<2x4x5xf32>) -> tensor<1x10xf32> {
// CHECK-NEXT:     %w = nn.weight {name = "conv.weight"} : tensor<4x3x3x3xf32>
// CHECK-NEXT:     %b = nn.weight {name = "conv.bias"} : tensor<4xf32>
// CHECK-NEXT:     %c = nn.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, name = "conv"} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %dw = nn.weight {name = "dw.weight"} : tensor<4x1x3x3xf32>
// CHECK-NEXT:     %d = nn.conv2d %c, %dw {dilations = array<i64: 2, 2>, groups = 4 : i64, pads = array<i64: 2, 2, 2, 2>, strides = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>, tensor<4x1x3x3xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT:     %s = nn.weight {name = "bn.scale"} : tensor<4xf32>
// CHECK-NEXT:     %sh = nn.weight {name = "bn.bias"} : tensor<4xf32>
// CHECK-NEXT:     %mu = nn.weight {name = "bn.mean"} : tensor<4xf32>
// CHECK-NEXT:     %var = nn.weight {name = "bn.var"} : tensor<4xf32>
// CHECK-NEXT:     %bn = nn.batch_norm %c, %s, %sh, %mu, %var {epsilon = 1.000000e-05 : f32, name = "bn"} : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %r = nn.relu %bn : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %sg = nn.sigmoid %r : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %hs = nn.hard_swish %sg : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %lr = nn.leaky_relu %hs {alpha = 1.000000e-01 : f32} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %hg = nn.hard_sigmoid %lr {alpha = 2.000000e-01 : f32, beta = 5.000000e-01 : f32} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %cl = nn.clip %hg {min = 0.000000e+00 : f32, max = 6.000000e+00 : f32} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %ln = nn.lrn %cl {size = 3 : i64, alpha = 1.000000e-04 : f32, beta = 7.500000e-01 : f32, bias = 1.000000e+00 : f32} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %a = nn.add %ln, %r : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %b4 = nn.reshape %b : (tensor<4xf32>) -> tensor<1x4x1x1xf32>
// CHECK-NEXT:     %sb = nn.sub %a, %b4 : (tensor<1x4x8x8xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %ml = nn.mul %sb, %a : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %dv = nn.div %ml, %a : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT:     %mp = nn.max_pool %dv {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = 1 : i64} : (tensor<1x4x8x8xf32>) -> tensor<1x4x5x5xf32>
// CHECK-NEXT:     %ap = nn.avg_pool %dv {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, ceil_mode = 0 : i64, count_include_pad = 0 : i64} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT:     %cc = nn.concat %ap, %d {axis = 1 : i64} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x8x4x4xf32>
// CHECK-NEXT:     %pd = nn.pad %cc {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>, value = 0.000000e+00 : f32} : (tensor<1x8x4x4xf32>) -> tensor<1x8x6x6xf32>
// CHECK-NEXT:     %gm = nn.global_max_pool %mp : (tensor<1x4x5x5xf32>) -> tensor<1x4x1x1xf32>
// CHECK-NEXT:     %ga = nn.global_avg_pool %pd : (tensor<1x8x6x6xf32>) -> tensor<1x8x1x1xf32>
// CHECK-NEXT:     %t = nn.transpose %ga {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x8x1x1xf32>) -> tensor<1x1x1x8xf32>
// CHECK-NEXT:     %f = nn.reshape %t : (tensor<1x1x1x8xf32>) -> tensor<1x8xf32>
// CHECK-NEXT:     %fw = nn.weight {name = "fc.weight"} : tensor<10x8xf32>
// CHECK-NEXT:     %fb = nn.weight {name = "fc.bias"} : tensor<10xf32>
// CHECK-NEXT:     %g = nn.gemm %f, %fw, %fb {alpha = 1.000000e+00 : f32, beta = 1.000000e+00 : f32, trans_a = 0 : i64, trans_b = 1 : i64, name = "fc"} : (tensor<1x8xf32>, tensor<10x8xf32>, tensor<10xf32>) -> tensor<1x10xf32>
// CHECK-NEXT:     %mw = nn.weight {name = "mm.weight"} : tensor<5x3xf32>
// CHECK-NEXT:     %mm = nn.matmul %m, %mw : (tensor<2x4x5xf32>, tensor<5x3xf32>) -> tensor<2x4x3xf32>
// CHECK-NEXT:     %sm = nn.softmax %g {axis = 1 : i64} : (tensor<1x10xf32>) -> tensor<1x10xf32>
// CHECK-NEXT:     func.return %sm : tensor<1x10xf32>
// CHECK-NEXT:   }
// CHECK-NEXT: }
