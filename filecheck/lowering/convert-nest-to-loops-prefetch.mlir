// RUN: nasir-opt %s --cpu=x86-64-v4 -p convert-nn-to-nest,default-schedule,pack-weights,nest-bufferize,convert-nest-to-loops | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v4 -p convert-nn-to-nest,default-schedule,pack-weights,nest-bufferize,convert-nest-to-loops,convert-loops-to-llvm | filecheck %s --check-prefix=LLVM

// A 1x1 stride-2 conv's channel tile (14 points of row 2 * oh, columns 0, 2, ..., 26) walks its
// 16 input channels one 28x28 plane (3136 bytes) apart: each iteration prefetches the lines it
// will read 4 channels ahead, one per 16 floats of the row and the last (columns 0, 16, 26). The
// 3x3 conv after it walks 14x14 planes (784 bytes apart), a stride the hardware follows: no
// prefetch of its input (its 36 KB of weights, beyond L1, are prefetched a channel block ahead
// into L2, `{level = 2}`: convert-nest-to-loops-prefetch-weights.mlir). The schedules are
// AVX-512's (16 lanes): the width is pinned.

builtin.module {
  func.func @main(%x: tensor<1x16x28x28xf32>) -> tensor<1x32x14x14xf32> {
    %w = nn.weight {name = "down.weight"} : tensor<32x16x1x1xf32>
    %d = nn.conv2d %x, %w {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>, name = "down"} : (tensor<1x16x28x28xf32>, tensor<32x16x1x1xf32>) -> tensor<1x32x14x14xf32>
    %w3 = nn.weight {name = "conv3.weight"} : tensor<32x32x3x3xf32>
    %y = nn.conv2d %d, %w3 {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, name = "conv3"} : (tensor<1x32x14x14xf32>, tensor<32x32x3x3xf32>) -> tensor<1x32x14x14xf32>
    func.return %y : tensor<1x32x14x14xf32>
  }
}

// CHECK:      func.func private @down(%[[X:[0-9]+]]: memref<1x16x28x28xf32> {llvm.noalias},
// CHECK-DAG:  %[[C26:[0-9]+]] = arith.constant 26 : index
// CHECK-DAG:  %[[C16:[0-9]+]] = arith.constant 16 : index
// CHECK-DAG:  %[[C4:[0-9]+]] = arith.constant 4 : index
// CHECK-DAG:  %[[C2:[0-9]+]] = arith.constant 2 : index
// CHECK-DAG:  %[[C0:[0-9]+]] = arith.constant 0 : index
// CHECK:      ^bb0(%[[OH:[0-9]+]]: index):
// CHECK:      scf.for %[[CI:[0-9]+]] = %[[C0]] to %{{[0-9]+}} step
// CHECK-NEXT:   %[[ROW:[0-9]+]] = arith.muli %[[OH]], %[[C2]] : index
// CHECK-NEXT:   %[[AHEAD:[0-9]+]] = arith.addi %[[CI]], %[[C4]] : index
// CHECK-NEXT:   "nasir.prefetch"(%[[X]], %[[C0]], %[[AHEAD]], %[[ROW]], %[[C0]])
// CHECK-NEXT:   "nasir.prefetch"(%[[X]], %[[C0]], %[[AHEAD]], %[[ROW]], %[[C16]])
// CHECK-NEXT:   "nasir.prefetch"(%[[X]], %[[C0]], %[[AHEAD]], %[[ROW]], %[[C26]])
// CHECK-NEXT:   memref.load %[[X]][%[[C0]], %[[CI]], %[[ROW]], %[[C0]]]
// CHECK-NOT:  nasir.prefetch
// CHECK:      func.func private @conv3(
// CHECK-NOT:  "nasir.prefetch"({{[^)]*}}) :

// llvm.prefetch(address, read = 0, locality = 3 (keep in all caches), data cache = 1):
// LLVM:         llvm.func internal @down.par0(
// LLVM-DAG:     %[[DATA:[0-9]+]] = llvm.mlir.constant(1 : i32) : i32
// LLVM-DAG:     %[[LOCALITY:[0-9]+]] = llvm.mlir.constant(3 : i32) : i32
// LLVM-DAG:     %[[READ:[0-9]+]] = llvm.mlir.constant(0 : i32) : i32
// LLVM-COUNT-3: llvm.call_intrinsic "llvm.prefetch.p0"(%{{[0-9]+}}, %[[READ]], %[[LOCALITY]], %[[DATA]]) : (!llvm.ptr, i32, i32, i32) -> ()
// LLVM-NOT:     llvm.prefetch
// LLVM:         llvm.func internal @conv3.par0(
