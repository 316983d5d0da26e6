// RUN: nasir-opt %s --cpu=x86-64-v4 -p convert-nn-to-nest,default-schedule,nest-bufferize,convert-nest-to-loops | filecheck %s
// RUN: nasir-opt %s --cpu=x86-64-v3 -p convert-nn-to-nest,default-schedule,nest-bufferize,convert-nest-to-loops | filecheck %s --check-prefix=AVX2

// A 3x3 stride-2 max pool with lanes over 16 output columns reads 32 input columns a tap. In the
// inner tile of a row (output columns 16..31; the tile is a constant there, see
// convert-nest-to-loops-versions.mlir) every window lies inside the row: one unmasked
// vector<32xf32> load per window, started at the used columns rounded down to the stride, so the
// taps at columns 31 + 2j (kw = 0) read [30, 62) and the taps at 32 + 2j and 33 + 2j (kw = 1, 2)
// share the load of [32, 64) and differ only in the shuffle (the pool's window is unrolled whole:
// rows 1, 2, 3 for output row 1). The max combiner is `x > acc or x is NaN ? x : acc` (a NaN in
// the window makes the max NaN, as in torch), and the inner tile stores without a lane mask. The first tile of the row
// reads column -1 (padding): its kw = 0 tap keeps a masked load.

builtin.module {
  func.func @main(%x: tensor<1x1x4x64xf32>) -> tensor<1x1x2x32xf32> {
    %y = nn.max_pool %x {name = "pool", kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = 0 : i64} : (tensor<1x1x4x64xf32>) -> tensor<1x1x2x32xf32>
    func.return %y : tensor<1x1x2x32xf32>
  }
}

// CHECK:      func.func private @pool(%[[X:[0-9]+]]: memref<1x1x4x64xf32> {llvm.noalias}, %[[Y:[0-9]+]]: memref<1x1x2x32xf32> {llvm.noalias})
// CHECK-DAG:  %[[C32:[0-9]+]] = arith.constant 32 : index
// CHECK-DAG:  %[[C30:[0-9]+]] = arith.constant 30 : index
// CHECK-DAG:  %[[ROW1:[0-9]+]] = arith.constant 1 : index
// CHECK-DAG:  %[[NEGINF:[0-9]+]] = arith.constant dense<0xff800000> : vector<16xf32>
// CHECK:      scf.if
// CHECK:      scf.if
// CHECK-NEXT:   %[[W0:[0-9]+]] = vector.load %[[X]][%{{.*}}, %{{.*}}, %[[ROW1]], %[[C30]]] : memref<1x1x4x64xf32>, vector<32xf32>
// CHECK-NEXT:   %[[T0:[0-9]+]] = vector.shuffle %[[W0]], %[[W0]] [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31]
// CHECK-NEXT:   %[[G0:[0-9]+]] = arith.cmpf ogt, %[[T0]], %[[NEGINF]] : vector<16xf32>
// CHECK-NEXT:   %[[N0:[0-9]+]] = arith.cmpf uno, %[[T0]], %[[T0]] : vector<16xf32>
// CHECK-NEXT:   %[[K0:[0-9]+]] = arith.ori %[[G0]], %[[N0]] : i1
// CHECK-NEXT:   %[[M0:[0-9]+]] = arith.select %[[K0]], %[[T0]], %[[NEGINF]] : vector<16xf32>
// CHECK-NEXT:   %[[W1:[0-9]+]] = vector.load %[[X]][%{{.*}}, %{{.*}}, %[[ROW1]], %[[C32]]] : memref<1x1x4x64xf32>, vector<32xf32>
// CHECK-NEXT:   %[[T1:[0-9]+]] = vector.shuffle %[[W1]], %[[W1]] [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30]
// CHECK-NEXT:   %[[G1:[0-9]+]] = arith.cmpf ogt, %[[T1]], %[[M0]] : vector<16xf32>
// CHECK-NEXT:   %[[N1:[0-9]+]] = arith.cmpf uno, %[[T1]], %[[T1]] : vector<16xf32>
// CHECK-NEXT:   %[[K1:[0-9]+]] = arith.ori %[[G1]], %[[N1]] : i1
// CHECK-NEXT:   %[[M1:[0-9]+]] = arith.select %[[K1]], %[[T1]], %[[M0]] : vector<16xf32>
// CHECK-NEXT:   %[[T2:[0-9]+]] = vector.shuffle %[[W1]], %[[W1]] [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31]
// CHECK-NEXT:   %[[G2:[0-9]+]] = arith.cmpf ogt, %[[T2]], %[[M1]] : vector<16xf32>
// CHECK-NEXT:   %[[N2:[0-9]+]] = arith.cmpf uno, %[[T2]], %[[T2]] : vector<16xf32>
// CHECK-NEXT:   %[[K2:[0-9]+]] = arith.ori %[[G2]], %[[N2]] : i1
// CHECK-NEXT:   arith.select %[[K2]], %[[T2]], %[[M1]] : vector<16xf32>
// CHECK-COUNT-4: vector.load %[[X]]
// CHECK-NOT:    vector.maskedload
// CHECK:        vector.store %{{.*}}, %[[Y]][%{{.*}}] : memref<1x1x2x32xf32>, vector<16xf32>
// CHECK-NEXT: } else {
// CHECK:        vector.maskedload %[[X]]

// AVX2:      func.func private @pool(%[[X:[0-9]+]]: memref<1x1x4x64xf32> {llvm.noalias}, %[[Y:[0-9]+]]: memref<1x1x2x32xf32> {llvm.noalias})
// AVX2:      %[[W0:[0-9]+]] = vector.load %[[X]][{{.*}}] : memref<1x1x4x64xf32>, vector<16xf32>
// AVX2-NEXT: vector.shuffle %[[W0]], %[[W0]] [1, 3, 5, 7, 9, 11, 13, 15] : vector<16xf32>, vector<16xf32>
// AVX2-NOT:  vector.maskedload
// AVX2:      vector.store %{{.*}}, %[[Y]][%{{.*}}] : memref<1x1x2x32xf32>, vector<8xf32>
