// RUN: nasir-opt %s --cpu=x86-64-v4 -p nest-bufferize,convert-nest-to-loops | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v3 -p nest-bufferize,convert-nest-to-loops | filecheck %s --check-prefix=AVX2

// Lanes over output channels (co, 16 lanes), a register tile of 4 ow points: the tile is
// transposed before its stores. The leading epilogue steps that read only vectors along the lanes
// (the bias, indexed by co; the ReLU) run on the 4 accumulators before the transpose, one vector op
// per point. The transpose is two rounds of shuffles of two 16-lane vectors into one (no longer
// vectors); each of the 16 rows holds its 4 points in its first lanes, and the residual add, which
// reads the output's shape, runs on the rows with the other lanes masked off.
// Without AVX-512's mask registers (x86-64-v3), each row's 4 points, a known prefix of its lanes,
// are stored as one plain 4-lane vector (vmaskmovps, which LLVM emits for a masked store on AVX2,
// is a long micro-op sequence on Zen cores).

builtin.module {
  func.func @main(%x: tensor<1x3x2x4xf32>, %r: tensor<1x16x2x4xf32>) -> tensor<1x16x2x4xf32> {
    %w = nn.weight {name = "w"} : tensor<16x3xf32>
    %b = nn.weight {name = "b"} : tensor<16xf32>
    %y = nest.compute %x, %w, %b, %r {name = "conv", domain = #nest.domain<[n = 1, co = 16, oh = 2, ow = 4], [ci = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d2, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d1, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d1)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2", "relu", "add 3"], schedule = {order = ["n", "oh", "ci", "ow", "co"], vector = "co", unroll = {ow = 4}}} : (tensor<1x3x2x4xf32>, tensor<16x3xf32>, tensor<16xf32>, tensor<1x16x2x4xf32>) -> tensor<1x16x2x4xf32>
    func.return %y : tensor<1x16x2x4xf32>
  }
}

// CHECK: func.func private @conv
// CHECK: scf.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[B:.*]] = vector.load %{{.*}} : memref<16xf32>, vector<16xf32>
// CHECK-NEXT: %[[S:.*]] = arith.addf %{{.*}}, %[[B]] : vector<16xf32>
// CHECK-NEXT: %[[LT:.*]] = arith.cmpf olt, %[[S]], %[[ZERO:.*]] : vector<16xf32>
// CHECK-NEXT: arith.select %[[LT]], %[[ZERO]], %[[S]] : vector<16xf32>
// CHECK-NEXT: %[[S:.*]] = arith.addf %{{.*}}, %[[B]] : vector<16xf32>
// CHECK-NEXT: %[[LT:.*]] = arith.cmpf olt, %[[S]], %[[ZERO:.*]] : vector<16xf32>
// CHECK-NEXT: arith.select %[[LT]], %[[ZERO]], %[[S]] : vector<16xf32>
// CHECK-NEXT: %[[S:.*]] = arith.addf %{{.*}}, %[[B]] : vector<16xf32>
// CHECK-NEXT: %[[LT:.*]] = arith.cmpf olt, %[[S]], %[[ZERO:.*]] : vector<16xf32>
// CHECK-NEXT: arith.select %[[LT]], %[[ZERO]], %[[S]] : vector<16xf32>
// CHECK-NEXT: %[[S:.*]] = arith.addf %{{.*}}, %[[B]] : vector<16xf32>
// CHECK-NEXT: %[[LT:.*]] = arith.cmpf olt, %[[S]], %[[ZERO:.*]] : vector<16xf32>
// CHECK-NEXT: arith.select %[[LT]], %[[ZERO]], %[[S]] : vector<16xf32>
// CHECK-NEXT: vector.shuffle %{{.*}}, %{{.*}} [0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23] : vector<16xf32>, vector<16xf32>
// CHECK-NEXT: vector.shuffle %{{.*}}, %{{.*}} [8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31] : vector<16xf32>, vector<16xf32>
// CHECK-NOT: vector<32xf32>
// CHECK-NOT: arith.select
// CHECK: %[[R:.*]] = vector.maskedload %{{.*}} : memref<1x16x2x4xf32>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK-NEXT: %[[S:.*]] = arith.addf %{{.*}}, %[[R]] : vector<16xf32>
// CHECK-NEXT: vector.maskedstore %{{.*}}, %{{.*}}, %[[S]] : memref<1x16x2x4xf32>, vector<16xi1>, vector<16xf32>
// CHECK-NOT: arith.select
// CHECK: func.return

// AVX2: vector.maskedload %{{.*}} : memref<1x16x2x4xf32>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// AVX2-NEXT: %[[S:.*]] = arith.addf
// AVX2-NEXT: %[[P:.*]] = vector.shuffle %[[S]], %[[S]] [0, 1, 2, 3] : vector<16xf32>, vector<16xf32>
// AVX2-NEXT: vector.store %[[P]], %{{.*}} : memref<1x16x2x4xf32>, vector<4xf32>
// AVX2-NOT: vector.maskedstore
// AVX2: func.return
