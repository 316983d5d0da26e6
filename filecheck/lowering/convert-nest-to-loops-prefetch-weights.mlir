// RUN: nasir-opt %s --cpu=x86-64-v3 -p convert-nn-to-nest,default-schedule,pack-weights,nest-bufferize,convert-nest-to-loops | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v3 -p convert-nn-to-nest,default-schedule,pack-weights,nest-bufferize,convert-nest-to-loops,convert-loops-to-llvm | filecheck %s --check-prefix=LLVM

// A 3x3 conv whose packed weights (256 -> 256 channels, 2.4 MB) do not fit in L1, at AVX2: its
// 1 x 7 tiles run 32 blocks of 8 output channels, each block's 7 rows re-reading the block's 73 KB
// of weights (256 channel steps of 9 vectors). Each channel step prefetches into L2 (level 2) one
// line of the next block's weights, the (oh * 256 + ci)-th, at most the block's last (18416 =
// 8 * 256 * 9 - 16 floats), so the 1152 lines arrive spread over this block's rows. The 1x1 conv
// after it (16 output channels: 16 KB of weights, in L1) prefetches none. AVX2's 8 lanes: pinned.

builtin.module {
  func.func @main(%x: tensor<1x256x7x7xf32>) -> tensor<1x16x7x7xf32> {
    %w = nn.weight {name = "big.weight"} : tensor<256x256x3x3xf32>
    %y = nn.conv2d %x, %w {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, name = "big"} : (tensor<1x256x7x7xf32>, tensor<256x256x3x3xf32>) -> tensor<1x256x7x7xf32>
    %w2 = nn.weight {name = "small.weight"} : tensor<16x256x1x1xf32>
    %z = nn.conv2d %y, %w2 {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, name = "small"} : (tensor<1x256x7x7xf32>, tensor<16x256x1x1xf32>) -> tensor<1x16x7x7xf32>
    func.return %z : tensor<1x16x7x7xf32>
  }
}

// CHECK:      func.func private @big(%{{[0-9]+}}: memref<1x256x7x7xf32> {llvm.noalias}, %[[W:[0-9]+]]: memref<32x256x3x3x8xf32>
// CHECK-DAG:  %[[LAST:[0-9]+]] = arith.constant 18416 : index
// CHECK-DAG:  %[[C16:[0-9]+]] = arith.constant 16 : index
// CHECK-DAG:  %[[C256:[0-9]+]] = arith.constant 256 : index
// CHECK-DAG:  %[[C1:[0-9]+]] = arith.constant 1 : index
// CHECK-DAG:  %[[C0:[0-9]+]] = arith.constant 0 : index
// CHECK:      ^bb0(%[[BLOCK:[0-9]+]]: index):
// CHECK-NEXT:   scf.for %[[OH:[0-9]+]] = %[[C0]] to
// CHECK:        scf.for %[[CI:[0-9]+]] = %[[C0]] to %[[C256]] step %[[C1]]
// CHECK-NEXT:     %[[ROWS:[0-9]+]] = arith.muli %[[OH]], %[[C256]] : index
// CHECK-NEXT:     %[[STEP:[0-9]+]] = arith.addi %[[ROWS]], %[[CI]] : index
// CHECK-NEXT:     %[[FLOATS:[0-9]+]] = arith.muli %[[STEP]], %[[C16]] : index
// CHECK-NEXT:     %[[AT:[0-9]+]] = arith.minsi %[[FLOATS]], %[[LAST]] : index
// CHECK-NEXT:     %[[NEXT:[0-9]+]] = arith.addi %[[BLOCK]], %[[C1]] : index
// CHECK-NEXT:     "nasir.prefetch"(%[[W]], %[[NEXT]], %[[C0]], %[[C0]], %[[C0]], %[[AT]]) <{level = 2 : i32}>
// CHECK-NOT:    nasir.prefetch
// CHECK:        vector.load %[[W]]
// CHECK:      func.func private @small(
// CHECK-NOT:  nasir.prefetch

// llvm.prefetch(address, read = 0, locality = 2 (prefetcht1: L2), data cache = 1):
// LLVM:         llvm.func internal @big.par0(
// LLVM-DAG:     %[[DATA:[0-9]+]] = llvm.mlir.constant(1 : i32) : i32
// LLVM-DAG:     %[[LOCALITY:[0-9]+]] = llvm.mlir.constant(2 : i32) : i32
// LLVM-DAG:     %[[READ:[0-9]+]] = llvm.mlir.constant(0 : i32) : i32
// LLVM:         llvm.call_intrinsic "llvm.prefetch.p0"(%{{[0-9]+}}, %[[READ]], %[[LOCALITY]], %[[DATA]]) : (!llvm.ptr, i32, i32, i32) -> ()
// LLVM:         llvm.func internal @small.par0(
// LLVM-NOT:     llvm.prefetch
