// RUN: nasir-opt %s --cpu=x86-64-v4 -p default-schedule,pack-activations | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v3 -p default-schedule,pack-activations | filecheck %s --check-prefix=AVX2

// A stem, its max pool and two depthwise convs, the second adding the pool's output (a ResNet
// stage after `depthwise`). default-schedule gives the pool and both depthwise convs lanes over
// channels, and pack-activations blocks the pool's output (read by the first conv and by the
// second's residual add) and the first conv's output. The second conv's result is returned: it
// stays NCHW, its tile transposed for the stores after adding the blocked residual (`add 2`
// reads one vector per point).

builtin.module {
  func.func @main(%0: tensor<1x3x32x32xf32>) -> tensor<1x32x8x8xf32> {
    %1 = nn.weight {name = "w"} : tensor<32x3x7x7xf32>
    %2 = nn.weight {name = "wa"} : tensor<32x1x3x3xf32>
    %3 = nn.weight {name = "wb"} : tensor<32x1x3x3xf32>
    %4 = nest.compute %0, %1 {name = "stem", domain = #nest.domain<[n = 1, co = 32, oh = 16, ow = 16], [ci = 3, kh = 7, kw = 7]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, (((d2 * 2) + d5) + -3), (((d3 * 2) + d6) + -3))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x3x32x32xf32>, tensor<32x3x7x7xf32>) -> tensor<1x32x16x16xf32>
    %5 = nest.compute %4 {name = "pool", domain = #nest.domain<[n = 1, c = 32, oh = 8, ow = 8], [kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, (((d2 * 2) + d4) + -1), (((d3 * 2) + d5) + -1))>], out_map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>, combiner = "max", epilogue = []} : (tensor<1x32x16x16xf32>) -> tensor<1x32x8x8xf32>
    %6 = nest.compute %5, %2 {name = "dwa", domain = #nest.domain<[n = 1, g = 32, co = 1, oh = 8, ow = 8], [kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, ((d3 + d5) + -1), ((d4 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> ((d1 + d2), 0, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d1 + d2), d3, d4)>, combiner = "mac", epilogue = []} : (tensor<1x32x8x8xf32>, tensor<32x1x3x3xf32>) -> tensor<1x32x8x8xf32>
    %7 = nest.compute %6, %3, %5 {name = "dwb", domain = #nest.domain<[n = 1, g = 32, co = 1, oh = 8, ow = 8], [kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, ((d3 + d5) + -1), ((d4 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> ((d1 + d2), 0, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d1 + d2), d3, d4)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d1 + d2), d3, d4)>, combiner = "mac", epilogue = ["add 2"]} : (tensor<1x32x8x8xf32>, tensor<32x1x3x3xf32>, tensor<1x32x8x8xf32>) -> tensor<1x32x8x8xf32>
    func.return %7 : tensor<1x32x8x8xf32>
  }
}

// CHECK: -> tensor<1x2x16x16x16xf32>
// CHECK: %[[P:.*]] = nest.compute %{{.*}} {{{.*}}name = "pool"
// CHECK-SAME: out_map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, (d1 floordiv 16), d2, d3, (d1 mod 16))>
// CHECK-SAME: vector = "c.i"
// CHECK-SAME: -> tensor<1x2x8x8x16xf32>
// CHECK: %[[A:.*]] = nest.compute %[[P]], %{{.*}} {name = "dwa"
// CHECK-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d1 floordiv 16), ((d3 + d5) + -1), ((d4 + d6) + -1), (d1 mod 16))>
// CHECK-SAME: out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, ((d1 + d2) floordiv 16), d3, d4, ((d1 + d2) mod 16))>
// CHECK-SAME: splits = [["g", 16 : i64]], order = ["n", "g.o", "co", "oh", "kh", "kw", "ow", "g.i"], vector = "g.i"
// CHECK-SAME: pack = {"1" = "OIHW16o"}
// CHECK-SAME: -> tensor<1x2x8x8x16xf32>
// CHECK: nest.compute %[[A]], %{{.*}}, %[[P]] {name = "dwb"
// CHECK-SAME: affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, ((d1 + d2) floordiv 16), d3, d4, ((d1 + d2) mod 16))>]
// CHECK-SAME: out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d1 + d2), d3, d4)>
// CHECK-SAME: vector = "g.i"
// CHECK-SAME: -> tensor<1x32x8x8xf32>

// AVX2: -> tensor<1x4x16x16x8xf32>
// AVX2: %[[P:.*]] = nest.compute %{{.*}} {{{.*}}name = "pool"
// AVX2-SAME: out_map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, (d1 floordiv 8), d2, d3, (d1 mod 8))>
// AVX2-SAME: -> tensor<1x4x8x8x8xf32>
// At 8 lanes too the row's 8 points are one register tile (`depthwise_points`: 8 accumulators
// beside a 3x3 window's weights in AVX2's 16 registers):
// AVX2: %[[A:.*]] = nest.compute %[[P]], %{{.*}} {name = "dwa"
// AVX2-SAME: splits = [["g", 8 : i64]], order = ["n", "g.o", "co", "oh", "kh", "kw", "ow", "g.i"]
// AVX2-SAME: unroll = {ow = 8 : i64
// AVX2-SAME: pack = {"1" = "OIHW8o"}
// AVX2-SAME: -> tensor<1x4x8x8x8xf32>
// AVX2: nest.compute %[[A]], %{{.*}}, %[[P]] {name = "dwb"
// AVX2-SAME: affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, ((d1 + d2) floordiv 8), d3, d4, ((d1 + d2) mod 8))>]
// AVX2-SAME: vector = "g.i"
// AVX2-SAME: -> tensor<1x32x8x8xf32>
