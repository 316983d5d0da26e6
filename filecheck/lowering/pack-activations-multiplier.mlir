// RUN: nasir-opt %s --cpu=x86-64-v3 -p default-schedule,pack-activations,pack-weights | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v3 -p default-schedule,pack-activations,pack-weights,nest-bufferize,convert-nest-to-loops | filecheck %s --check-prefix=LOOPS

// A stem, its max pool, a stride-2 depthwise conv with a channel multiplier of 2 (16 -> 32
// channels: output channel 2g + co) and a depthwise conv after it (a ResNet stage's first block
// after `depthwise`). default-schedule gives the multiplier conv lanes over g with both co in its
// register tile; pack-activations stores its result channel-blocked (`interleaved_block`), so the
// depthwise conv after it keeps lanes over channels; pack-weights reads its weight [32, 1, 3, 3]
// as [16, 2, 3, 3] before packing (`multiplier_rows`), a vector of 8 g of one co a load. Its tile
// interleaves each point's two accumulators into two vectors of 8 consecutive channels.

builtin.module {
  func.func @main(%0: tensor<1x3x32x32xf32>) -> tensor<1x32x4x4xf32> {
    %1 = nn.weight {name = "w"} : tensor<16x3x7x7xf32>
    %2 = nn.weight {name = "wm"} : tensor<32x1x3x3xf32>
    %3 = nn.weight {name = "wd"} : tensor<32x1x3x3xf32>
    %4 = nest.compute %0, %1 {name = "stem", domain = #nest.domain<[n = 1, co = 16, oh = 16, ow = 16], [ci = 3, kh = 7, kw = 7]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, (((d2 * 2) + d5) + -3), (((d3 * 2) + d6) + -3))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x3x32x32xf32>, tensor<16x3x7x7xf32>) -> tensor<1x16x16x16xf32>
    %5 = nest.compute %4 {name = "pool", domain = #nest.domain<[n = 1, c = 16, oh = 8, ow = 8], [kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, (((d2 * 2) + d4) + -1), (((d3 * 2) + d5) + -1))>], out_map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>, combiner = "max", epilogue = []} : (tensor<1x16x16x16xf32>) -> tensor<1x16x8x8xf32>
    %6 = nest.compute %5, %2 {name = "dwm", domain = #nest.domain<[n = 1, g = 16, co = 2, oh = 4, ow = 4], [kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, (((d3 * 2) + d5) + -1), (((d4 * 2) + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (((d1 * 2) + d2), 0, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, ((d1 * 2) + d2), d3, d4)>, combiner = "mac", epilogue = []} : (tensor<1x16x8x8xf32>, tensor<32x1x3x3xf32>) -> tensor<1x32x4x4xf32>
    %7 = nest.compute %6, %3 {name = "dw", domain = #nest.domain<[n = 1, g = 32, co = 1, oh = 4, ow = 4], [kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, ((d3 + d5) + -1), ((d4 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> ((d1 + d2), 0, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d1 + d2), d3, d4)>, combiner = "mac", epilogue = []} : (tensor<1x32x4x4xf32>, tensor<32x1x3x3xf32>) -> tensor<1x32x4x4xf32>
    func.return %7 : tensor<1x32x4x4xf32>
  }
}

// CHECK: %[[W:.*]] = nn.weight {name = "wm.by2.OIHW8o"} : tensor<2x2x3x3x8xf32>
// CHECK: %[[P:.*]] = nest.compute %{{.*}} {{{.*}}name = "pool"
// CHECK-SAME: -> tensor<1x2x8x8x8xf32>
// CHECK: %[[M:.*]] = nest.compute %[[P]], %[[W]] {name = "dwm"
// CHECK-SAME: affine_map<(d0, d1, d2, d3, d4, d5, d6) -> ((d1 floordiv 8), d2, d5, d6, (d1 mod 8))>]
// CHECK-SAME: out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (((d1 * 2) + d2) floordiv 8), d3, d4, (((d1 * 2) + d2) mod 8))>
// CHECK-SAME: order = ["n", "g.o", "oh", "kh", "kw", "ow", "co", "g.i"], vector = "g.i"
// CHECK-SAME: co = 2 : i64
// CHECK-SAME: -> tensor<1x4x4x4x8xf32>
// CHECK: nest.compute %[[M]], %{{.*}} {name = "dw"
// CHECK-SAME: vector = "g.i"
// CHECK-SAME: -> tensor<1x32x4x4xf32>

// The two accumulators of a point (channels 2g and 2g + 1 of 8 g), interleaved, are stored as
// blocks 2 g.o and 2 g.o + 1:
// LOOPS: func.func private @dwm(
// LOOPS: %[[A:.*]] = math.fma
// LOOPS: %[[LO:.*]] = vector.shuffle %[[A0:.*]], %[[A1:.*]] [0, 8, 1, 9, 2, 10, 3, 11] : vector<8xf32>, vector<8xf32>
// LOOPS-NEXT: %[[HI:.*]] = vector.shuffle %[[A0]], %[[A1]] [4, 12, 5, 13, 6, 14, 7, 15] : vector<8xf32>, vector<8xf32>
// LOOPS: vector.store %[[LO]], %{{.*}} : memref<1x4x4x4x8xf32>, vector<8xf32>
// LOOPS: vector.store %[[HI]], %{{.*}} : memref<1x4x4x4x8xf32>, vector<8xf32>
// LOOPS: func.func private @dw(
