// RUN: nasir-opt %s -p convert-loops-to-llvm | filecheck %s

// A kernel whose parallel loop sits in a serial loop (3 channel tiles around the rows the threads
// share) is one that each thread of @main's team calls: each runs every serial iteration, its
// chunk of the rows in it and a barrier after them. Only a kernel that does more than run parallel
// loops (@scale_first's store) is left to the first thread.

builtin.module {
  func.func @main(%x: memref<3x4x16xf32>, %y: memref<3x4x16xf32>, %w: memref<0xi8>, %ws: memref<0xi8>) {
    func.call @tiles(%x, %y) : (memref<3x4x16xf32>, memref<3x4x16xf32>) -> ()
    func.call @scale_first(%y) : (memref<3x4x16xf32>) -> ()
    func.return
  }
  func.func private @tiles(%x: memref<3x4x16xf32> {llvm.noalias}, %y: memref<3x4x16xf32> {llvm.noalias}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c4 = arith.constant 4 : index
    scf.for %t = %c0 to %c3 step %c1 {
      "scf.parallel"(%c0, %c4, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
      ^bb0(%i: index):
        %v = vector.load %x[%t, %i, %c0] : memref<3x4x16xf32>, vector<16xf32>
        vector.store %v, %y[%t, %i, %c0] : memref<3x4x16xf32>, vector<16xf32>
        scf.reduce
      }) : (index, index, index) -> ()
    }
    func.return
  }
  func.func private @scale_first(%y: memref<3x4x16xf32> {llvm.noalias}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    scf.for %t = %c0 to %c3 step %c1 {
      %v = vector.load %y[%t, %c0, %c0] : memref<3x4x16xf32>, vector<16xf32>
      %d = arith.addf %v, %v : vector<16xf32>
      vector.store %d, %y[%t, %c0, %c0] : memref<3x4x16xf32>, vector<16xf32>
    }
    func.return
  }
}

// @main.body: each thread calls @tiles (its loops end with barriers); the first calls @scale_first.
// CHECK: llvm.func internal @main.body(
// CHECK: llvm.call @tiles
// CHECK-NEXT: llvm.cond_br %{{.*}}, ^[[FIRST:.*]], ^[[AFTER:[a-z0-9]*]]
// CHECK: ^[[FIRST]]:
// CHECK-NEXT: llvm.call @scale_first
// CHECK: ^[[AFTER]]:
// CHECK-NEXT: llvm.call @GOMP_barrier()

// @tiles: in a team, each serial iteration runs this thread's chunk directly and waits after it.
// CHECK: llvm.func internal @tiles(
// CHECK: ^[[HEAD:.*]](%[[T:.*]]: i64):
// CHECK: %[[IN:.*]] = llvm.call @omp_in_parallel()
// CHECK: %[[TEAM:.*]] = llvm.icmp "ne" %[[IN]]
// CHECK: llvm.call @tiles.par0(
// CHECK-NEXT: llvm.cond_br %[[TEAM]], ^[[WAIT:.*]], ^[[NEXT:[a-z0-9]*]]
// CHECK: llvm.call @nasir_parallel(
// CHECK: ^[[NEXT]]:
// CHECK-NEXT: %[[T1:.*]] = llvm.add %[[T]]
// CHECK-NEXT: llvm.br ^[[HEAD]](%[[T1]] : i64)
// CHECK: ^[[WAIT]]:
// CHECK-NEXT: llvm.call @GOMP_barrier()
// CHECK-NEXT: llvm.br ^[[NEXT]]
