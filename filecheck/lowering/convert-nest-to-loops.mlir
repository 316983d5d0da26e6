// RUN: nasir-opt %s -p nest-bufferize,convert-nest-to-loops | filecheck %s

// A padded 3x3 conv with a bias epilogue and the schedule spelled out: the reductions carry a vector
// accumulator (ow is the vector loop, 6 lanes), the input reads at the border are masked loads
// yielding 0. (A `parallel` loop becomes scf.parallel: see convert-loops-to-llvm.mlir.) The call in
// @main names its layer and its MACs (8*6*6 outputs x 4*3*3 taps = 10368), for profiles.

builtin.module {
  func.func @main(%x: tensor<1x4x6x6xf32>) -> tensor<1x8x6x6xf32> {
    %w = nn.weight {name = "w"} : tensor<8x4x3x3xf32>
    %b = nn.weight {name = "b"} : tensor<8xf32>
    %y = nest.compute %x, %w, %b {name = "conv", domain = #nest.domain<[n = 1, co = 8, oh = 6, ow = 6], [ci = 4, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2"], schedule = {order = ["n", "co", "oh", "ci", "kh", "kw", "ow"], vector = "ow"}} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
    func.return %y : tensor<1x8x6x6xf32>
  }
}

// CHECK: func.func @main(%[[X:.*]]: memref<1x4x6x6xf32>, %[[OUT:.*]]: memref<1x8x6x6xf32>, %{{.*}}: memref<{{.*}}xi8>, %{{.*}}: memref<0xi8>)
// CHECK: func.call @conv(%[[X]], %{{.*}}, %{{.*}}, %[[OUT]]) {nasir.layer = "conv", nasir.macs = 10368 : i64, nasir.layer_class = "conv 3x3"}
// CHECK: func.func private @conv(%{{.*}}: memref<1x4x6x6xf32> {llvm.noalias}, %{{.*}}: memref<8x4x3x3xf32> {llvm.noalias}, %{{.*}}: memref<8xf32> {llvm.noalias}, %{{.*}}: memref<1x8x6x6xf32> {llvm.noalias})
// CHECK: scf.for %[[CO:.*]] =
// CHECK: scf.for %[[OH:.*]] =
// CHECK: scf.for %{{.*}} = {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<6xf32>)
// CHECK: scf.for
// CHECK: scf.for
// CHECK: llvm.icmp "ult" %{{.*}}, %{{.*}} : vector<6xi32>
// CHECK: vector.maskedload {{.*}} : memref<1x4x6x6xf32>, vector<6xi1>, vector<6xf32> into vector<6xf32>
// CHECK: memref.load
// CHECK: vector.broadcast {{.*}} : f32 to vector<6xf32>
// CHECK: math.fma {{.*}} : vector<6xf32>
// CHECK: scf.yield
// CHECK: memref.load %{{.*}}[%[[CO]]] : memref<8xf32>
// CHECK: arith.addf {{.*}} : vector<6xf32>
// CHECK: vector.store {{.*}} : memref<1x8x6x6xf32>, vector<6xf32>
