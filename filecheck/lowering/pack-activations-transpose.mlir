// RUN: nasir-opt %s --cpu=x86-64-v3 -p default-schedule,pack-activations | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v4 -p default-schedule,pack-activations | filecheck %s --check-prefix=AVX512
// RUN: nasir-opt %s --cpu=x86-64-v3 -p default-schedule,pack-activations,pack-weights,nest-bufferize,convert-nest-to-loops | filecheck %s --check-prefix=LOOPS

// DenseNet's batch norm (scale, shift, ReLU) before a 1x1 conv, on 7 x 7: at AVX2 the batch norm
// runs lanes along the row (split by 8 although the row has 7 points) and a tile of 8 channels,
// which its store transposes into 8 points of one channel block each, so pack-activations stores
// its result channel-blocked and the 1x1 conv reads it by broadcasts from the blocks. At AVX-512
// both stay NCHW (channel_transpose_schedule: at 16 lanes the conv ran slower so).

builtin.module {
  func.func @main(%x: tensor<1x64x7x7xf32>) -> tensor<1x32x7x7xf32> {
    %s = nn.weight {name = "s"} : tensor<64xf32>
    %h = nn.weight {name = "h"} : tensor<64xf32>
    %w = nn.weight {name = "w"} : tensor<32x64x1x1xf32>
    %y = nest.compute %x, %s, %h {name = "bn", domain = #nest.domain<[n = 1, c = 64, h = 7, w = 7]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d1)>, affine_map<(d0, d1, d2, d3) -> (d1)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["mul 1", "add 2", "relu"]} : (tensor<1x64x7x7xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<1x64x7x7xf32>
    %z = nest.compute %y, %w {name = "conv1", domain = #nest.domain<[n = 1, co = 32, oh = 7, ow = 7], [ci = 64, kh = 1, kw = 1]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, (d2 + d5), (d3 + d6))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x64x7x7xf32>, tensor<32x64x1x1xf32>) -> tensor<1x32x7x7xf32>
    func.return %z : tensor<1x32x7x7xf32>
  }
}

// CHECK: %[[Y:.*]] = nest.compute %x, %s, %h {{{.*}}name = "bn"
// CHECK-SAME: out_map = affine_map<(d0, d1, d2, d3) -> (d0, (d1 floordiv 8), d2, d3, (d1 mod 8))>
// CHECK-SAME: schedule = {splits = {{\[}}["w", 8 : i64], ["c", 8 : i64]], order = ["n", "c.o", "h", "w.o", "c.i", "w.i"], vector = "w.i", unroll = {c.i = 8 : i64}
// CHECK-SAME: -> tensor<1x8x7x7x8xf32>
// CHECK: nest.compute %[[Y]], %w {{{.*}}name = "conv1"
// CHECK-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d4 floordiv 8), (d2 + d5), (d3 + d6), (d4 mod 8))>
// CHECK-SAME: "ci.o", "kh", "kw", "ci.i"

// AVX512: nest.compute %x, %s, %h {{{.*}}name = "bn"
// AVX512-SAME: out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// AVX512-SAME: vector = "w"
// AVX512-SAME: -> tensor<1x64x7x7xf32>

// The batch norm's kernel: 8 masked row loads (lane 7 off), then the transpose (shuffles), then 7
// whole-vector stores of 8 channels, one a point: none for the eighth lane, which is past the row.
// LOOPS-LABEL: func.func private @bn(
// LOOPS-COUNT-8: vector.maskedload
// LOOPS: vector.shuffle
// LOOPS-COUNT-7: vector.store {{.*}} : memref<1x8x7x7x8xf32>, vector<8xf32>
// LOOPS-NOT: vector.store
// LOOPS: func.return
