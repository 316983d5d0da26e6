// fold-batch-norm folds a batch-norm into the single-use conv feeding it: w' = w * s, b' = (b - mean) * s
// + beta with s = gamma / sqrt(var + eps). Here s = [1, 2], so w' = [1, 4] and b' = [0.5, -2] (new store
// entries: the old arrays are never changed). A batch-norm of a function argument is left for
// lower-batch-norm, which turns it into a `mul 1`, `add 2` copy nest of precomputed scale and shift.
// RUN: nasir-opt %s -p fold-batch-norm --print-weights | filecheck %s
// RUN: nasir-opt %s -p fold-batch-norm,lower-batch-norm --print-weights | filecheck %s --check-prefix=LOWER

builtin.module attributes {nasir.inputs = ["input0", "input1"], nasir.outputs = ["output0", "output1"]} {
  func.func @main(%x: tensor<1x1x2x2xf32>, %y: tensor<1x2x2x2xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) {
    %w = nn.weight {name = "w", value = dense_resource<w> : tensor<2x1x1x1xf32>} : tensor<2x1x1x1xf32>
    %g = nn.weight {name = "gamma", value = dense_resource<gamma> : tensor<2xf32>} : tensor<2xf32>
    %b = nn.weight {name = "beta", value = dense_resource<beta> : tensor<2xf32>} : tensor<2xf32>
    %m = nn.weight {name = "mean", value = dense_resource<mean> : tensor<2xf32>} : tensor<2xf32>
    %v = nn.weight {name = "var", value = dense_resource<var> : tensor<2xf32>} : tensor<2xf32>
    %c = nn.conv2d %x, %w {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, name = "conv"} : (tensor<1x1x2x2xf32>, tensor<2x1x1x1xf32>) -> tensor<1x2x2x2xf32>
    %bn = nn.batch_norm %c, %g, %b, %m, %v {epsilon = 1.000000e+00 : f32, name = "bn"} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
    %bn2 = nn.batch_norm %y, %g, %b, %m, %v {epsilon = 1.000000e+00 : f32, name = "bn2"} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
    func.return %bn, %bn2 : tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      beta: "0x040000000000803f00000000",gamma: "0x040000000000004000008040",mean: "0x040000000000003f0000803f",var: "0x040000000000404000004040",w: "0x040000000000803f00000040"
    }
  }
#-}
// CHECK:      %[[W:.*]] = nn.weight {name = "w.bn", value = dense_resource<w.bn> : tensor<2x1x1x1xf32>}
// CHECK-NEXT: %[[B:.*]] = nn.weight {name = "w.bn_bias", value = dense_resource<w.bn_bias> : tensor<2xf32>}
// CHECK-NEXT: nn.conv2d %x, %[[W]], %[[B]] {{{.*}}name = "conv"}
// CHECK-SAME:   -> tensor<1x2x2x2xf32>
// CHECK-NOT:  name = "bn"
// CHECK:      nn.batch_norm %y, %g, %b, %m, %v {{{.*}}name = "bn2"}
// CHECK:      w.bn: "0x040000000000803f00008040"
// CHECK-SAME: w.bn_bias: "0x040000000000003f000000c0"

// LOWER:      %[[S:.*]] = nn.weight {name = "bn2.scale", {{.*}}} : tensor<2xf32>
// LOWER-NEXT: %[[T:.*]] = nn.weight {name = "bn2.shift", {{.*}}} : tensor<2xf32>
// LOWER-NEXT: nest.compute %y, %[[S]], %[[T]] {name = "bn2", domain = #nest.domain<[n = 1, c = 2, h = 2, w = 2]>,
// LOWER-SAME:   maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d1)>, affine_map<(d0, d1, d2, d3) -> (d1)>],
// LOWER-SAME:   combiner = "copy", epilogue = ["mul 1", "add 2"]}
// LOWER-NOT:  nn.batch_norm
// LOWER:      bn2.scale: "0x040000000000803f00000040"
// LOWER-SAME: bn2.shift: "0x040000000000003f000000c0"
