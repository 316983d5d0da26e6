// RUN: nasir-opt %s -p pad-planes | filecheck %s

// Three 1x1 convs and a 3x3 conv on 16 x 16 images: their planes are 1 KiB, 256 channels of them
// would share 4 of L1's 64 sets. %a and %b get a padding row below each plane (17 x 16 floats) and
// their readers' maps stay as they were: %a is read by a 1x1 conv at rows 0..15, %b by the 3x3 conv
// at rows -1..16, whose row 16 is its zero padding (the lowering bounds the reads by the 16 rows
// the plane holds, not the 17 it stores). %c stays dense: @main returns it. The 14 x 14 planes of
// %d are 784 bytes apart: they stay dense.

builtin.module {
  func.func @main(%x: tensor<1x64x16x16xf32>, %x14: tensor<1x64x14x14xf32>) -> (tensor<1x64x16x16xf32>, tensor<1x64x14x14xf32>) {
    %w = nn.weight {name = "w"} : tensor<64x64x1x1xf32>
    %w3 = nn.weight {name = "w3"} : tensor<64x64x3x3xf32>
    %a = nest.compute %x, %w {name = "conv_a", domain = #nest.domain<[n = 1, co = 64, oh = 16, ow = 16], [ci = 64, kh = 1, kw = 1]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5, d3 + d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x64x16x16xf32>, tensor<64x64x1x1xf32>) -> tensor<1x64x16x16xf32>
    %b = nest.compute %a, %w {name = "conv_b", domain = #nest.domain<[n = 1, co = 64, oh = 16, ow = 16], [ci = 64, kh = 1, kw = 1]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5, d3 + d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x64x16x16xf32>, tensor<64x64x1x1xf32>) -> tensor<1x64x16x16xf32>
    %c = nest.compute %b, %w3 {name = "conv_c", domain = #nest.domain<[n = 1, co = 64, oh = 16, ow = 16], [ci = 64, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x64x16x16xf32>, tensor<64x64x3x3xf32>) -> tensor<1x64x16x16xf32>
    %d = nest.compute %x14, %w {name = "conv_d", domain = #nest.domain<[n = 1, co = 64, oh = 14, ow = 14], [ci = 64, kh = 1, kw = 1]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5, d3 + d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x64x14x14xf32>, tensor<64x64x1x1xf32>) -> tensor<1x64x14x14xf32>
    %e = nest.compute %d, %w {name = "conv_e", domain = #nest.domain<[n = 1, co = 64, oh = 14, ow = 14], [ci = 64, kh = 1, kw = 1]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5, d3 + d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x64x14x14xf32>, tensor<64x64x1x1xf32>) -> tensor<1x64x14x14xf32>
    func.return %c, %e : tensor<1x64x16x16xf32>, tensor<1x64x14x14xf32>
  }
}

// CHECK: %[[A:.*]] = nest.compute %x, %w {nasir.pad_rows = 1 : i64, name = "conv_a"
// CHECK-SAME: -> tensor<1x64x17x16xf32>
// CHECK: %[[B:.*]] = nest.compute %[[A]], %w {nasir.pad_rows = 1 : i64, name = "conv_b"
// CHECK-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, (d2 + d5), (d3 + d6))>
// CHECK-SAME: (tensor<1x64x17x16xf32>, tensor<64x64x1x1xf32>) -> tensor<1x64x17x16xf32>
// CHECK: nest.compute %[[B]], %w3 {name = "conv_c"
// CHECK-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>
// CHECK-SAME: (tensor<1x64x17x16xf32>, tensor<64x64x3x3xf32>) -> tensor<1x64x16x16xf32>
// CHECK: name = "conv_d"
// CHECK-SAME: -> tensor<1x64x14x14xf32>
// CHECK: name = "conv_e"
