// RUN: nasir-opt %s --cpu=x86-64-v4 -p default-schedule,pack-activations | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v3 -p default-schedule,pack-activations | filecheck %s --check-prefix=AVX2
// RUN: nasir-opt %s --cpu=x86-64-v4 -p default-schedule,pack-activations,pack-weights,nest-bufferize,convert-nest-to-loops | filecheck %s --check-prefix=LOOPS

// A grouped 3x3 conv (2 groups of 64, lanes over its output channels) writing the input of a 1x1
// conv that also runs lanes over its output channels: pack-activations stores the grouped conv's
// output channel-blocked (its channel g * 64 + co splits off the lanes), and the 1x1 conv reads it
// by broadcasts from the blocks, its channel loop ci split by the lanes (ci.o is the block, ci.i
// the channel in it, after kh and kw). The 1x1 conv's own output stays NCHW (returned).

builtin.module {
  func.func @main(%x: tensor<1x128x14x14xf32>) -> tensor<1x256x14x14xf32> {
    %w3 = nn.weight {name = "w3"} : tensor<128x64x3x3xf32>
    %w1 = nn.weight {name = "w1"} : tensor<256x128x1x1xf32>
    %y = nest.compute %x, %w3 {name = "conv3", domain = #nest.domain<[n = 1, g = 2, co = 64, oh = 14, ow = 14], [ci = 64, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, ((d1 * 64) + d5), ((d3 + d6) + -1), ((d4 + d7) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (((d1 * 64) + d2), d5, d6, d7)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, ((d1 * 64) + d2), d3, d4)>, combiner = "mac", epilogue = []} : (tensor<1x128x14x14xf32>, tensor<128x64x3x3xf32>) -> tensor<1x128x14x14xf32>
    %z = nest.compute %y, %w1 {name = "conv1", domain = #nest.domain<[n = 1, co = 256, oh = 14, ow = 14], [ci = 128, kh = 1, kw = 1]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, (d2 + d5), (d3 + d6))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x128x14x14xf32>, tensor<256x128x1x1xf32>) -> tensor<1x256x14x14xf32>
    func.return %z : tensor<1x256x14x14xf32>
  }
}

// At AVX-512 the 1x1 conv's tile is 14 points x 2 channel vectors: with the block of 16 channels
// unrolled that would be 448 FMAs in one body, whose broadcasts LLVM loads first and spills
// (MobileNetV2 imagenet's 1x1 convs on 14 x 14 ran at 46-53% of the 16-lane peak so); over
// MAX_UNROLLED_BODY ci.i stays a loop.
// CHECK: %[[Y:.*]] = nest.compute %x, %w3 {{{.*}}name = "conv3"
// CHECK-SAME: out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, (((d1 * 64) + d2) floordiv 16), d3, d4, (((d1 * 64) + d2) mod 16))>
// CHECK-SAME: vector = "co.i"
// CHECK-SAME: -> tensor<1x8x14x14x16xf32>
// CHECK: nest.compute %[[Y]], %w1 {{{.*}}name = "conv1"
// CHECK-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d4 floordiv 16), (d2 + d5), (d3 + d6), (d4 mod 16))>
// CHECK-SAME: ["ci", 16 : i64]]
// CHECK-SAME: "ci.o", "kh", "kw", "ci.i", "ow", "co.o.i", "co.i"
// CHECK-SAME: unroll = {ow = 14 : i64, co.o.i = 2 : i64, kw = 1 : i64, kh = 1 : i64}
// CHECK-SAME: (tensor<1x8x14x14x16xf32>, tensor<256x128x1x1xf32>) -> tensor<1x256x14x14xf32>

// convert-nest-to-loops reads `ci floordiv 16` and `ci mod 16` off the loops of ci.o and ci.i,
// without division (`Accesses.split_loop`): the broadcast's block is ci.o's value, its channel ci.i's.
// LOOPS: func.func private @conv1(%0: memref<1x8x14x14x16xf32>
// LOOPS: = scf.for %[[CIO:[0-9]+]] = {{.*}} iter_args
// LOOPS: = scf.for %[[CII:[0-9]+]] = {{.*}} iter_args
// LOOPS-NOT: arith.remsi
// LOOPS: memref.load %0[%{{.*}}, %[[CIO]], %{{.*}}, %{{.*}}, %[[CII]]] : memref<1x8x14x14x16xf32>

// AVX2: %[[Y:.*]] = nest.compute %x, %w3 {{{.*}}name = "conv3"
// AVX2-SAME: out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, (((d1 * 64) + d2) floordiv 8), d3, d4, (((d1 * 64) + d2) mod 8))>
// AVX2-SAME: -> tensor<1x16x14x14x8xf32>
// AVX2: nest.compute %[[Y]], %w1 {{{.*}}name = "conv1"
// AVX2-SAME: maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d4 floordiv 8), (d2 + d5), (d3 + d6), (d4 mod 8))>
// AVX2-SAME: ["ci", 8 : i64]]
// AVX2-SAME: "ci.o", "kh", "kw", "ci.i"
// AVX2-SAME: ci.i = 8 : i64
// AVX2-SAME: (tensor<1x16x14x14x8xf32>, tensor<256x128x1x1xf32>) -> tensor<1x256x14x14xf32>
