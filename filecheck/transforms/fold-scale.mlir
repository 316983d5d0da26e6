// fold-scale moves a contraction's leading `mul` by a weight read at an index of its weight's own
// (an unfolded batch norm's scale, s[g + co] beside w[g + co, 0, kh, kw]) into a new weight w * s:
// here w = [1, 2] and s = [3, 0.5], so w.scaled = [3, 1]; the step goes, its input too, and the
// steps after it are renumbered. A `mul` by a weight read per output row (not an axis of the
// weight) stays, and so does one whose nest has no weights in the store.
// RUN: nasir-opt %s -p fold-scale --print-weights | filecheck %s

builtin.module attributes {nasir.inputs = ["input0"], nasir.outputs = ["output0", "output1"]} {
  func.func @main(%x: tensor<1x2x2x2xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) {
    %w = nn.weight {name = "w", value = dense_resource<w> : tensor<2x1x1x1xf32>} : tensor<2x1x1x1xf32>
    %s = nn.weight {name = "s", value = dense_resource<s> : tensor<2xf32>} : tensor<2xf32>
    %t = nn.weight {name = "t", value = dense_resource<t> : tensor<2xf32>} : tensor<2xf32>
    %a = nest.compute %x, %w, %s, %t {name = "dw", domain = #nest.domain<[n = 1, g = 2, co = 1, oh = 2, ow = 2], [kh = 1, kw = 1]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, (d3 + d5), (d4 + d6))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> ((d1 + d2), 0, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> ((d1 + d2))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> ((d1 + d2))>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d1 + d2), d3, d4)>, combiner = "mac", epilogue = ["mul 2", "add 3", "relu"]} : (tensor<1x2x2x2xf32>, tensor<2x1x1x1xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
    %b = nest.compute %x, %w, %s {name = "rows", domain = #nest.domain<[n = 1, g = 2, co = 1, oh = 2, ow = 2], [kh = 1, kw = 1]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, (d3 + d5), (d4 + d6))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> ((d1 + d2), 0, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d3)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d1 + d2), d3, d4)>, combiner = "mac", epilogue = ["mul 2"]} : (tensor<1x2x2x2xf32>, tensor<2x1x1x1xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
    func.return %a, %b : tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      s: "0x04000000000040400000003f",t: "0x040000000000803f00000040",w: "0x040000000000803f00000040"
    }
  }
#-}

// CHECK:      %[[W:.*]] = nn.weight {name = "w.scaled", value = dense_resource<w.scaled> : tensor<2x1x1x1xf32>}
// CHECK:      nest.compute %{{.*}}, %[[W]], %{{.*}} {name = "dw"
// CHECK-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, (d3 + d5), (d4 + d6))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> ((d1 + d2), 0, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> ((d1 + d2))>]
// CHECK-SAME: epilogue = ["add 2", "relu"]
// CHECK:      nest.compute %{{.*}}, %{{.*}}, %{{.*}} {name = "rows"
// CHECK-SAME: epilogue = ["mul 2"]
// CHECK:      w.scaled: "0x04000000000040400000803f"
