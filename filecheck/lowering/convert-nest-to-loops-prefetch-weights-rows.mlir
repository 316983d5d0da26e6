// RUN: nasir-opt %s --cpu=x86-64-v3 -p convert-nn-to-nest,default-schedule,pack-weights,nest-bufferize,convert-nest-to-loops | filecheck %s

// ResNet-18 cifar10's layer4 conv (512 -> 512 channels on 4 x 4) at AVX2: 2 x 4 tiles run 32 blocks
// of 16 output channels (two packed blocks of 8), each block's 4 rows re-reading its 295 KB of
// weights. One line of the next block a channel step would prefetch 4 x 512 = 2048 of its 4608
// lines; three a step (the (oh * 512 + ci)-th three, each at most the block's last: 73712 =
// 16 * 512 * 9 - 16 floats) bring all of them in the first three of this block's four rows.
// AVX2's 8 lanes: pinned.

builtin.module {
  func.func @main(%x: tensor<1x512x4x4xf32>) -> tensor<1x512x4x4xf32> {
    %w = nn.weight {name = "w"} : tensor<512x512x3x3xf32>
    %y = nn.conv2d %x, %w {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, name = "conv"} : (tensor<1x512x4x4xf32>, tensor<512x512x3x3xf32>) -> tensor<1x512x4x4xf32>
    func.return %y : tensor<1x512x4x4xf32>
  }
}

// CHECK:      func.func private @conv(%{{[0-9]+}}: memref<1x512x4x4xf32> {llvm.noalias}, %[[W:[0-9]+]]: memref<64x512x3x3x8xf32>
// CHECK-DAG:  %[[LAST:[0-9]+]] = arith.constant 73712 : index
// CHECK-DAG:  %[[C48:[0-9]+]] = arith.constant 48 : index
// CHECK-DAG:  %[[C32:[0-9]+]] = arith.constant 32 : index
// CHECK-DAG:  %[[C16:[0-9]+]] = arith.constant 16 : index
// CHECK-DAG:  %[[C512:[0-9]+]] = arith.constant 512 : index
// CHECK-DAG:  %[[C2:[0-9]+]] = arith.constant 2 : index
// CHECK-DAG:  %[[C1:[0-9]+]] = arith.constant 1 : index
// CHECK-DAG:  %[[C0:[0-9]+]] = arith.constant 0 : index
// CHECK:      ^bb0(%[[BLOCK:[0-9]+]]: index):
// CHECK-NEXT:   scf.for %[[OH:[0-9]+]] = %[[C0]] to
// CHECK:        scf.for %[[CI:[0-9]+]] = %[[C0]] to %[[C512]] step %[[C1]]
// CHECK-NEXT:     %[[ROWS:[0-9]+]] = arith.muli %[[OH]], %[[C512]] : index
// CHECK-NEXT:     %[[STEP:[0-9]+]] = arith.addi %[[ROWS]], %[[CI]] : index
// CHECK-NEXT:     %[[FLOATS:[0-9]+]] = arith.muli %[[STEP]], %[[C48]] : index
// CHECK-NEXT:     %[[AT0:[0-9]+]] = arith.minsi %[[FLOATS]], %[[LAST]] : index
// CHECK-NEXT:     %[[SECOND:[0-9]+]] = arith.addi %[[FLOATS]], %[[C16]] : index
// CHECK-NEXT:     %[[AT1:[0-9]+]] = arith.minsi %[[SECOND]], %[[LAST]] : index
// CHECK-NEXT:     %[[THIRD:[0-9]+]] = arith.addi %[[FLOATS]], %[[C32]] : index
// CHECK-NEXT:     %[[AT2:[0-9]+]] = arith.minsi %[[THIRD]], %[[LAST]] : index
// CHECK-NEXT:     %[[NEXT:[0-9]+]] = arith.addi %[[BLOCK]], %[[C1]] : index
// CHECK-NEXT:     %[[PACKED:[0-9]+]] = arith.muli %[[NEXT]], %[[C2]] : index
// CHECK-NEXT:     "nasir.prefetch"(%[[W]], %[[PACKED]], %[[C0]], %[[C0]], %[[C0]], %[[AT0]]) <{level = 2 : i32}>
// CHECK-NEXT:     "nasir.prefetch"(%[[W]], %[[PACKED]], %[[C0]], %[[C0]], %[[C0]], %[[AT1]]) <{level = 2 : i32}>
// CHECK-NEXT:     "nasir.prefetch"(%[[W]], %[[PACKED]], %[[C0]], %[[C0]], %[[C0]], %[[AT2]]) <{level = 2 : i32}>
// CHECK-NOT:    nasir.prefetch
// CHECK:        vector.load %[[W]]
