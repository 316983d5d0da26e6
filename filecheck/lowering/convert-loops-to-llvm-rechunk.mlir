// RUN: nasir-opt %s -p convert-loops-to-llvm | filecheck %s

// @pairs writes the rows of %u two an iteration (2 iterations), @rows reads them one an iteration
// (4). At T threads a thread takes 2 * ceil(2 / T) rows of the first and ceil(4 / T) of the second:
// the same rows at 1, 2 and 3 threads (4, 2, 2), not at 4 (2 and 1). @main compares the two at
// the team's size and waits at a barrier only where they differ.

builtin.module {
  func.func @main(%x: memref<4x16xf32>, %y: memref<4x16xf32>, %w: memref<0xi8>, %ws: memref<256xi8>) {
    %c0 = arith.constant 0 : index
    %u = memref.view %ws[%c0][] : memref<256xi8> to memref<4x16xf32>
    func.call @pairs(%x, %u) : (memref<4x16xf32>, memref<4x16xf32>) -> ()
    func.call @rows(%u, %y) : (memref<4x16xf32>, memref<4x16xf32>) -> ()
    func.return
  }
  func.func private @pairs(%x: memref<4x16xf32> {llvm.noalias}, %y: memref<4x16xf32> {llvm.noalias}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    "scf.parallel"(%c0, %c2, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
    ^bb0(%i: index):
      %r0 = arith.muli %i, %c2 : index
      %r1 = arith.addi %r0, %c1 : index
      %a = vector.load %x[%r0, %c0] : memref<4x16xf32>, vector<16xf32>
      vector.store %a, %y[%r0, %c0] : memref<4x16xf32>, vector<16xf32>
      %b = vector.load %x[%r1, %c0] : memref<4x16xf32>, vector<16xf32>
      vector.store %b, %y[%r1, %c0] : memref<4x16xf32>, vector<16xf32>
      scf.reduce
    }) : (index, index, index) -> ()
    func.return
  }
  func.func private @rows(%x: memref<4x16xf32> {llvm.noalias}, %y: memref<4x16xf32> {llvm.noalias}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    "scf.parallel"(%c0, %c4, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
    ^bb0(%i: index):
      %v = vector.load %x[%i, %c0] : memref<4x16xf32>, vector<16xf32>
      vector.store %v, %y[%i, %c0] : memref<4x16xf32>, vector<16xf32>
      scf.reduce
    }) : (index, index, index) -> ()
    func.return
  }
}

// CHECK: llvm.func internal @main.body(
// CHECK: %[[N:.*]] = llvm.call @omp_get_num_threads() : () -> i32
// CHECK-NEXT: %[[T:.*]] = llvm.sext %[[N]] : i32 to i64
// CHECK-NOT: llvm.call @GOMP_barrier()
// CHECK: llvm.call @pairs
// CHECK: %[[LESS:.*]] = llvm.sub %[[T]], %{{.*}} : i64
// CHECK: %[[A:.*]] = llvm.add %{{.*}}, %[[LESS]] : i64
// CHECK: llvm.sdiv %[[A]], %[[T]] : i64
// CHECK: %[[B:.*]] = llvm.add %{{.*}}, %[[LESS]] : i64
// CHECK: llvm.sdiv %[[B]], %[[T]] : i64
// CHECK: %[[NE:.*]] = llvm.icmp "ne"
// CHECK-NEXT: llvm.cond_br %[[NE]], ^[[WAIT:.*]], ^[[GO:[a-z0-9]*]]
// CHECK: ^[[WAIT]]:
// CHECK-NEXT: llvm.call @GOMP_barrier()
// CHECK-NEXT: llvm.br ^[[GO]]
// CHECK: ^[[GO]]:
// CHECK-NEXT: llvm.call @rows
// CHECK-NEXT: llvm.return
