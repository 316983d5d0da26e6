// RUN: nasir-opt %s --cpu=x86-64-v3 -p convert-nn-to-nest,default-schedule,pack-weights,nest-bufferize,convert-nest-to-loops | filecheck %s

// A grouped 3x3 conv (8 groups of 64 -> 64 channels on 4 x 4, ResNet-34 group8's layer4) whose
// packed weights (1.2 MB, `OIHW8o`: the groups' blocks one after another, 8 a group) do not fit in
// L1, at AVX2: threads take the groups, each runs 4 steps of 2 blocks of 8 output channels, each
// step's 4 rows re-reading its 36 KB of weights. Each channel step prefetches into L2 (level 2)
// three lines of the next step's weights, at packed block g * 8 + (co.o + 1) * 2: after a group's
// last step, the next group's first (as convert-nest-to-loops-prefetch-weights.mlir does for a
// dense conv). AVX2's 8 lanes: pinned.

builtin.module {
  func.func @main(%x: tensor<1x512x4x4xf32>) -> tensor<1x512x4x4xf32> {
    %w = nn.weight {name = "grouped.weight"} : tensor<512x64x3x3xf32>
    %y = nn.conv2d %x, %w {dilations = array<i64: 1, 1>, groups = 8 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, name = "grouped"} : (tensor<1x512x4x4xf32>, tensor<512x64x3x3xf32>) -> tensor<1x512x4x4xf32>
    func.return %y : tensor<1x512x4x4xf32>
  }
}

// CHECK:      func.func private @grouped(%{{[0-9]+}}: memref<1x512x4x4xf32> {llvm.noalias}, %[[W:[0-9]+]]: memref<64x64x3x3x8xf32>
// CHECK-DAG:  %[[LAST:[0-9]+]] = arith.constant 9200 : index
// CHECK-DAG:  %[[C48:[0-9]+]] = arith.constant 48 : index
// CHECK-DAG:  %[[C64:[0-9]+]] = arith.constant 64 : index
// CHECK-DAG:  %[[C8:[0-9]+]] = arith.constant 8 : index
// CHECK-DAG:  %[[C4:[0-9]+]] = arith.constant 4 : index
// CHECK-DAG:  %[[C2:[0-9]+]] = arith.constant 2 : index
// CHECK-DAG:  %[[C1:[0-9]+]] = arith.constant 1 : index
// CHECK-DAG:  %[[C0:[0-9]+]] = arith.constant 0 : index
// CHECK:      "scf.parallel"(%[[C0]], %[[C8]], %[[C1]])
// CHECK-NEXT: ^bb0(%[[G:[0-9]+]]: index):
// CHECK-NEXT:   scf.for %[[BLOCK:[0-9]+]] = %[[C0]] to %[[C4]] step %[[C1]]
// CHECK-NEXT:     scf.for %[[OH:[0-9]+]] = %[[C0]] to %[[C4]] step %[[C1]]
// CHECK:            scf.for %[[CI:[0-9]+]] = %[[C0]] to %[[C64]] step %[[C1]]
// CHECK-NEXT:         %[[ROWS:[0-9]+]] = arith.muli %[[OH]], %[[C64]] : index
// CHECK-NEXT:         %[[STEP:[0-9]+]] = arith.addi %[[ROWS]], %[[CI]] : index
// CHECK-NEXT:         %[[FLOATS:[0-9]+]] = arith.muli %[[STEP]], %[[C48]] : index
// CHECK-NEXT:         %[[AT0:[0-9]+]] = arith.minsi %[[FLOATS]], %[[LAST]] : index
// CHECK:              %[[AFTER:[0-9]+]] = arith.addi %[[BLOCK]], %[[C1]] : index
// CHECK-NEXT:         %[[BLOCKS:[0-9]+]] = arith.muli %[[AFTER]], %[[C2]] : index
// CHECK-NEXT:         %[[GROUP:[0-9]+]] = arith.muli %[[G]], %[[C8]] : index
// CHECK-NEXT:         %[[NEXT:[0-9]+]] = arith.addi %[[BLOCKS]], %[[GROUP]] : index
// CHECK-NEXT:         "nasir.prefetch"(%[[W]], %[[NEXT]], %[[C0]], %[[C0]], %[[C0]], %[[AT0]]) <{level = 2 : i32}>
// CHECK-NEXT:         "nasir.prefetch"(%[[W]], %[[NEXT]], %[[C0]], %[[C0]], %[[C0]], %{{[0-9]+}}) <{level = 2 : i32}>
// CHECK-NEXT:         "nasir.prefetch"(%[[W]], %[[NEXT]], %[[C0]], %[[C0]], %[[C0]], %{{[0-9]+}}) <{level = 2 : i32}>
// CHECK-NOT:          nasir.prefetch
// CHECK:              vector.load %[[W]]
