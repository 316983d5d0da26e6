// RUN: nasir-opt %s -p "convert-loops-to-llvm{profile=true}" | filecheck %s
// RUN: nasir-opt %s -p convert-loops-to-llvm | filecheck %s --check-prefix=PLAIN

// A profile build: @main reads the time-stamp counter at its start, around each kernel call and
// at its return, and adds the ticks to one i64 counter per call in the workspace, after the
// 100-byte arena rounded up to 64 bytes: call 0 at byte 128, call 1 at 136, @main's own at 144
// (the workspace grows to 152). The calls' layers, kernels, MACs and classes go to `nasir.profile`
// ("other" for a call without a class).

builtin.module attributes {nasir.workspace_bytes = 100 : i64} {
  func.func @main(%x: memref<16xf32>, %y: memref<16xf32>, %w: memref<0xi8>, %ws: memref<100xi8>) {
    func.call @k(%x, %y) {nasir.layer = "first", nasir.macs = 7 : i64, nasir.layer_class = "conv 3x3"} : (memref<16xf32>, memref<16xf32>) -> ()
    func.call @k(%y, %x) {nasir.layer = "second", nasir.macs = 9 : i64} : (memref<16xf32>, memref<16xf32>) -> ()
    func.return
  }
  func.func private @k(%a: memref<16xf32> {llvm.noalias}, %b: memref<16xf32> {llvm.noalias}) {
    %c0 = arith.constant 0 : index
    %v = vector.load %a[%c0] : memref<16xf32>, vector<16xf32>
    vector.store %v, %b[%c0] : memref<16xf32>, vector<16xf32>
    func.return
  }
}

// CHECK:      builtin.module attributes {nasir.workspace_bytes = 152 : i64, nasir.profile = [{layer = "first", kernel = "k", macs = 7 : i64, class = "conv 3x3"}, {layer = "second", kernel = "k", macs = 9 : i64, class = "other"}], nasir.profile_offset = 128 : i64}
// The counters are added by the first thread alone (with more threads @main's body runs on each
// thread of one team), and @k, a kernel without a parallel loop, is called by it alone too, the
// others waiting at the barrier after it:
// CHECK:      llvm.func internal @main.body(%{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %[[WS:.*]]: !llvm.ptr {{.*}})
// CHECK-NEXT:   %[[TID:.*]] = llvm.call @omp_get_thread_num() : () -> i32
// CHECK-NEXT:   %[[ZERO:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT:   %[[FIRST:.*]] = llvm.icmp "eq" %[[TID]], %[[ZERO]] : i32
// CHECK-NEXT:   %[[START:.*]] = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
// CHECK-NEXT:   %[[T0:.*]] = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
// CHECK-NEXT:   llvm.cond_br %[[FIRST]], ^[[CALL:.*]], ^[[WAIT:.*]]
// CHECK-NEXT: ^[[CALL]]:
// CHECK-NEXT:   llvm.call @k(
// CHECK-NEXT:   llvm.br ^[[WAIT]]
// CHECK-NEXT: ^[[WAIT]]:
// CHECK-NEXT:   llvm.call @GOMP_barrier()
// CHECK-NEXT:   %[[T1:.*]] = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
// CHECK-NEXT:   %[[D0:.*]] = llvm.sub %[[T1]], %[[T0]]
// CHECK-NEXT:   %[[P0:.*]] = llvm.getelementptr %[[WS]][128] : (!llvm.ptr) -> !llvm.ptr, i8
// CHECK-NEXT:   llvm.cond_br %[[FIRST]], ^[[ADD:.*]], ^{{.*}}
// CHECK-NEXT: ^[[ADD]]:
// CHECK-NEXT:   %[[OLD0:.*]] = llvm.load %[[P0]] {{.*}} -> i64
// CHECK-NEXT:   %[[NEW0:.*]] = llvm.add %[[OLD0]], %[[D0]]
// CHECK-NEXT:   llvm.store %[[NEW0]], %[[P0]]
// CHECK:        llvm.call @k(
// CHECK:        llvm.getelementptr %[[WS]][136] : (!llvm.ptr) -> !llvm.ptr, i8
// CHECK:        %[[END:.*]] = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
// CHECK-NEXT:   llvm.sub %[[END]], %[[START]]
// CHECK-NEXT:   llvm.getelementptr %[[WS]][144] : (!llvm.ptr) -> !llvm.ptr, i8
// CHECK:        llvm.return

// PLAIN:     builtin.module attributes {nasir.workspace_bytes = 100 : i64}
// PLAIN-NOT: readcyclecounter
