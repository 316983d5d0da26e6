// RUN: nasir-opt %s -p convert-loops-to-llvm | filecheck %s
// RUN: nasir-opt %s -p convert-loops-to-llvm -t llvm | filecheck %s --check-prefix=IR

// A vectorised relu kernel with its parallel loop: memrefs become noalias pointers, scf.for becomes
// blocks, scf.parallel is outlined and run through @nasir_parallel (libgomp), or by each thread of
// the team that runs @main. @main's copy (a concat's) is the first thread's alone, the team waiting
// for it before the kernel that reads it. Each thread of the team runs the relus' loop on its own
// rows of %t, %u and %v (chunked kernels): no barrier between the two relus; @first_row reads row 0
// of %v, which the first thread's chunk wrote: a barrier before it.

builtin.module {
  func.func @main(%x: memref<4x16xf32>, %y: memref<4x16xf32>, %w: memref<0xi8>, %ws: memref<768xi8>) {
    %c0 = arith.constant 0 : index
    %c256 = arith.constant 256 : index
    %c512 = arith.constant 512 : index
    %t = memref.view %ws[%c0][] : memref<768xi8> to memref<4x16xf32>
    %u = memref.view %ws[%c256][] : memref<768xi8> to memref<4x16xf32>
    %v = memref.view %ws[%c512][] : memref<768xi8> to memref<4x16xf32>
    "memref.copy"(%x, %t) : (memref<4x16xf32>, memref<4x16xf32>) -> ()
    func.call @relu(%t, %u) : (memref<4x16xf32>, memref<4x16xf32>) -> ()
    func.call @relu(%u, %v) : (memref<4x16xf32>, memref<4x16xf32>) -> ()
    func.call @first_row(%v, %y) : (memref<4x16xf32>, memref<4x16xf32>) -> ()
    func.return
  }
  func.func private @relu(%x: memref<4x16xf32> {llvm.noalias}, %y: memref<4x16xf32> {llvm.noalias}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %zero = arith.constant dense<0.000000e+00> : vector<16xf32>
    "scf.parallel"(%c0, %c4, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
    ^bb0(%i: index):
      %v = vector.load %x[%i, %c0] : memref<4x16xf32>, vector<16xf32>
      %r = arith.maxnumf %v, %zero : vector<16xf32>
      vector.store %r, %y[%i, %c0] : memref<4x16xf32>, vector<16xf32>
      scf.reduce
    }) : (index, index, index) -> ()
    func.return
  }
  func.func private @first_row(%x: memref<4x16xf32> {llvm.noalias}, %y: memref<4x16xf32> {llvm.noalias}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    "scf.parallel"(%c0, %c4, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
    ^bb0(%i: index):
      %v = vector.load %x[%c0, %c0] : memref<4x16xf32>, vector<16xf32>
      vector.store %v, %y[%i, %c0] : memref<4x16xf32>, vector<16xf32>
      scf.reduce
    }) : (index, index, index) -> ()
    func.return
  }
}

// CHECK: llvm.mlir.global weak @nasir_num_threads(1 : i32)
// CHECK: llvm.func @GOMP_parallel(!llvm.ptr, !llvm.ptr, i32, i32)
// CHECK: llvm.func @GOMP_barrier()

// @main's body, run on one thread or by each thread of one team (@main.team):
// CHECK: llvm.func internal @main.body(%{{.*}}: !llvm.ptr {llvm.noalias}
// CHECK: %[[TID:.*]] = llvm.call @omp_get_thread_num()
// CHECK: %[[FIRST:.*]] = llvm.icmp "eq" %[[TID]]
// CHECK: llvm.cond_br %[[FIRST]], ^[[COPY:.*]], ^[[AFTER:[a-z0-9]*]]
// CHECK: ^[[COPY]]:
// CHECK-NEXT: llvm.call_intrinsic "llvm.memcpy.p0.p0.i64"
// CHECK-NEXT: llvm.br ^[[AFTER]]
// CHECK: ^[[AFTER]]:
// CHECK-NEXT: llvm.call @GOMP_barrier()
// CHECK-NEXT: llvm.call @relu
// CHECK-NEXT: llvm.call @relu
// CHECK-NEXT: llvm.call @GOMP_barrier()
// CHECK-NEXT: llvm.call @first_row
// CHECK-NEXT: llvm.return
// @main: one thread, or a team of nasir_num_threads; inside the caller's team, a team of one:
// CHECK: llvm.func @main(%{{.*}}: !llvm.ptr {llvm.noalias}
// CHECK: %[[IN:.*]] = llvm.call @omp_in_parallel()
// CHECK: %[[INSIDE:.*]] = llvm.icmp "ne" %[[IN]]
// CHECK: llvm.call @main.body
// CHECK: %[[SIZE:.*]] = llvm.select %[[INSIDE]]
// CHECK: llvm.mlir.addressof @main.team
// CHECK: llvm.call @GOMP_parallel(%{{.*}}, %{{.*}}, %[[SIZE]]
// CHECK: llvm.func internal @main.team(%{{.*}}: !llvm.ptr)
// CHECK: llvm.call @main.body

// the kernel runs its loop directly on one thread or in the team (a chunked kernel: @main waits
// where needed, not the kernel), else forks a team through @nasir_parallel:
// CHECK: llvm.func internal @relu(%{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias})
// CHECK: llvm.call @omp_in_parallel()
// CHECK: llvm.call @relu.par0
// CHECK-NOT: llvm.call @GOMP_barrier()
// CHECK: llvm.mlir.addressof @relu.par0
// CHECK: llvm.call @nasir_parallel
// CHECK-NOT: llvm.call @GOMP_barrier()
// CHECK: llvm.func internal @relu.par0(%{{.*}}: !llvm.ptr)
// CHECK: llvm.call @omp_get_thread_num()
// CHECK: llvm.load {{.*}} -> vector<16xf32>
// CHECK: llvm.call_intrinsic "llvm.maxnum.v16f32"
// CHECK: llvm.store {{.*}} : vector<16xf32>, !llvm.ptr

// IR: define void @"main"(ptr noalias
// IR: define internal void @"relu.par0"(ptr
// IR: load <16 x float>, ptr
// IR: call <16 x float> @"llvm.maxnum.v16f32"(<16 x float>
