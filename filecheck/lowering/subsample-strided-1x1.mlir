// RUN: nasir-opt %s --cpu=x86-64-v3 -p subsample-strided-1x1 | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v3 -p subsample-strided-1x1,default-schedule,pack-activations | filecheck %s --check-prefix=AVX2
// RUN: nasir-opt %s --cpu=x86-64-v4 -p subsample-strided-1x1 | filecheck %s --check-prefix=AVX512

// ResNet's downsample, a 1x1 conv of stride 2 (64 -> 128 onto 7 x 7), reads a copy of the points
// it uses, then runs at stride 1; the block's 3x3 stride-2 conv (a window of 9 taps) and a 1x1
// conv with padding (its taps read before the row) keep their input. At AVX2 the copy transposes
// its tiles into a channel-blocked result, which the 1x1 conv broadcasts its channels from; at
// AVX-512 the downsample stays strided. The copy and the conv keep the layer's class
// (nasir.layer_class: profiles count both as the strided 1x1 conv they compute).

builtin.module {
  func.func @main(%x: tensor<1x64x14x14xf32>) -> tensor<1x128x7x7xf32> {
    %w = nn.weight {name = "w"} : tensor<128x64x1x1xf32>
    %b = nn.weight {name = "b"} : tensor<128xf32>
    %w3 = nn.weight {name = "w3"} : tensor<128x64x3x3xf32>
    %ds = nest.compute %x, %w, %b {name = "ds", domain = #nest.domain<[n = 1, co = 128, oh = 7, ow = 7], [ci = 64, kh = 1, kw = 1]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 * 2) + d5), ((d3 * 2) + d6))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2"]} : (tensor<1x64x14x14xf32>, tensor<128x64x1x1xf32>, tensor<128xf32>) -> tensor<1x128x7x7xf32>
    %c3 = nest.compute %x, %w3, %ds {name = "c3", domain = #nest.domain<[n = 1, co = 128, oh = 7, ow = 7], [ci = 64, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, (((d2 * 2) + d5) + -1), (((d3 * 2) + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2"]} : (tensor<1x64x14x14xf32>, tensor<128x64x3x3xf32>, tensor<1x128x7x7xf32>) -> tensor<1x128x7x7xf32>
    %pd = nest.compute %x, %w, %c3 {name = "padded", domain = #nest.domain<[n = 1, co = 128, oh = 7, ow = 7], [ci = 64, kh = 1, kw = 1]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, (((d2 * 2) + d5) + -1), (((d3 * 2) + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2"]} : (tensor<1x64x14x14xf32>, tensor<128x64x1x1xf32>, tensor<1x128x7x7xf32>) -> tensor<1x128x7x7xf32>
    func.return %pd : tensor<1x128x7x7xf32>
  }
}

// CHECK:      %[[Z:.*]] = nest.compute %x {nasir.layer_class = "conv 1x1 s2", name = "ds.subsample", domain = #nest.domain<[n = 1, c = 64, h = 7, w = 7]>
// CHECK-SAME: maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, (d2 * 2), (d3 * 2))>]
// CHECK-SAME: combiner = "copy"
// CHECK-SAME: -> tensor<1x64x7x7xf32>
// CHECK-NEXT: nest.compute %[[Z]], %w, %b {nasir.layer_class = "conv 1x1 s2", name = "ds", domain = #nest.domain<[n = 1, co = 128, oh = 7, ow = 7], [ci = 64, kh = 1, kw = 1]>
// CHECK-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, (d2 + d5), (d3 + d6))>
// CHECK-SAME: epilogue = ["add 2"]
// CHECK-NOT:  subsample
// CHECK:      nest.compute %x, %w3, %{{.*}} {name = "c3"
// CHECK:      nest.compute %x, %w, %{{.*}} {name = "padded"

// AVX2:      %[[Z:.*]] = nest.compute %x {{{.*}}name = "ds.subsample"
// AVX2-SAME: out_map = affine_map<(d0, d1, d2, d3) -> (d0, (d1 floordiv 8), d2, d3, (d1 mod 8))>
// AVX2-SAME: vector = "w.i", unroll = {c.i = 8 : i64}
// AVX2-SAME: -> tensor<1x8x7x7x8xf32>
// AVX2:      nest.compute %[[Z]], %w, %b {{{.*}}name = "ds"
// AVX2-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d4 floordiv 8), (d2 + d5), (d3 + d6), (d4 mod 8))>

// AVX512-NOT: subsample
// AVX512-NOT: nasir.layer_class
// AVX512:     name = "ds"
// AVX512-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 * 2) + d5), ((d3 * 2) + d6))>
