// RUN: nasir-opt %s --cpu=x86-64-v4 -p convert-nn-to-nest,default-schedule,nest-bufferize,convert-nest-to-loops | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v3 -p convert-nn-to-nest,default-schedule,nest-bufferize,convert-nest-to-loops | filecheck %s

// Two layers with the same nest, schedule and memref types share one kernel (called twice with
// different buffers, each call naming its own layer); a channel concat into the workspace arena needs no kernel: each input is one
// contiguous block of the output. nest-bufferize computes the ones it can in place (the relus write views at the concat's byte
// offsets 0 and 4*4*4*4 = 256); the model's input %x is copied into its block at 512.

builtin.module {
  func.func @main(%x: tensor<1x4x4x4xf32>, %y: tensor<1x4x4x4xf32>) -> tensor<1x12x4x4xf32> {
    %a = nn.relu %x {name = "first"} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %b = nn.relu %y {name = "second"} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %c = nn.concat %a, %b, %x {axis = 1 : i64} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x12x4x4xf32>
    %r = nn.relu %c {name = "last"} : (tensor<1x12x4x4xf32>) -> tensor<1x12x4x4xf32>
    func.return %r : tensor<1x12x4x4xf32>
  }
}

// CHECK:      func.func @main(%[[X:[0-9]+]]: memref<1x4x4x4xf32>, %[[Y:[0-9]+]]: memref<1x4x4x4xf32>, %{{.*}}: memref<1x12x4x4xf32>, %{{.*}}: memref<0xi8>, %[[WS:[0-9]+]]: memref<768xi8>)
// CHECK-NEXT: %[[C0:[0-9]+]] = arith.constant 0 : index
// CHECK-NEXT: %[[A:[0-9]+]] = memref.view %[[WS]][%[[C0]]][] : memref<768xi8> to memref<1x4x4x4xf32>
// CHECK-NEXT: func.call @first(%[[X]], %[[A]]) {nasir.layer = "first", nasir.macs = 0 : i64, nasir.layer_class = "elementwise"} : (memref<1x4x4x4xf32>, memref<1x4x4x4xf32>) -> ()
// CHECK-NEXT: %[[C1:[0-9]+]] = arith.constant 256 : index
// CHECK-NEXT: %[[B:[0-9]+]] = memref.view %[[WS]][%[[C1]]][] : memref<768xi8> to memref<1x4x4x4xf32>
// CHECK-NEXT: func.call @first(%[[Y]], %[[B]]) {nasir.layer = "second", nasir.macs = 0 : i64, nasir.layer_class = "elementwise"} : (memref<1x4x4x4xf32>, memref<1x4x4x4xf32>) -> ()
// CHECK-NEXT: %[[C:[0-9]+]] = arith.constant 0 : index
// CHECK-NEXT: %[[CAT:[0-9]+]] = memref.view %[[WS]][%[[C]]][] : memref<768xi8> to memref<1x12x4x4xf32>
// CHECK-NEXT: %[[S2:[0-9]+]] = arith.constant 512 : index
// CHECK-NEXT: %[[AT2:[0-9]+]] = arith.addi %[[C]], %[[S2]] : index
// CHECK-NEXT: %[[D2:[0-9]+]] = memref.view %[[WS]][%[[AT2]]][] : memref<768xi8> to memref<1x4x4x4xf32>
// CHECK-NEXT: "memref.copy"(%[[X]], %[[D2]])
// CHECK-NEXT: func.call @last(%[[CAT]], %{{.*}})
// CHECK-NOT:  @second
// CHECK:      func.func private @first(
// CHECK-NOT:  @second
// CHECK:      func.func private @last(
// CHECK-NOT:  @second
