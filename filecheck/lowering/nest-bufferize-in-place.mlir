// RUN: nasir-opt %s -p nest-bufferize | filecheck %s
// RUN: nasir-opt %s -p nest-bufferize,convert-nest-to-loops | filecheck %s --check-prefix=LOOPS

// A residual add: conv "c" adds %a (operand 2) at its own output index in its epilogue and is
// %a's last reader, so it writes its result over %a's bytes (offset 0) instead of a third slot:
// the arena holds a and b only (2 x 576 bytes, 1728 without). Its kernel drops noalias on that
// operand and on the result, which share the bytes; the others keep it.

builtin.module {
  func.func @main(%x: tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32> {
    %w = nn.weight {name = "w"} : tensor<4x4x3x3xf32>
    %a = nest.compute %x {name = "a", domain = #nest.domain<[n = 1, c = 4, h = 6, w = 6]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["relu"]} : (tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
    %b = nest.compute %a {name = "b", domain = #nest.domain<[n = 1, c = 4, h = 6, w = 6]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["sigmoid"]} : (tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
    %c = nest.compute %b, %w, %a {name = "c", domain = #nest.domain<[n = 1, co = 4, oh = 6, ow = 6], [ci = 4, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2"]} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
    %d = nest.compute %c {name = "d", domain = #nest.domain<[n = 1, c = 4, h = 6, w = 6]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["relu"]} : (tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
    func.return %d : tensor<1x4x6x6xf32>
  }
}

// CHECK:      builtin.module attributes {nasir.workspace_bytes = 1152 : i64
// CHECK:      func.func @main(%{{.*}}: memref<1x4x6x6xf32>, %{{.*}}: memref<1x4x6x6xf32>, %{{.*}}: memref<576xi8>, %[[WS:.*]]: memref<1152xi8>)
// CHECK:      {nasir.weight = "w"}
// CHECK-NEXT: %[[C0:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[A:.*]] = memref.view %[[WS]][%[[C0]]][]
// CHECK:      name = "a"
// CHECK-NEXT: bufferization.materialize_in_destination %{{.*}} in writable %[[A]]
// CHECK:      %[[C576:.*]] = arith.constant 576 : index
// CHECK-NEXT: %[[B:.*]] = memref.view %[[WS]][%[[C576]]][]
// CHECK:      name = "b"
// CHECK:      %[[CC:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[C:.*]] = memref.view %[[WS]][%[[CC]]][]
// CHECK:      bufferization.to_tensor %[[A]]
// CHECK-NEXT: nest.compute {{.*}} {nasir.in_place = 2 : i64, name = "c"
// CHECK-NEXT: bufferization.materialize_in_destination %{{.*}} in writable %[[C]]

// LOOPS:      func.func private @c(%{{.*}}: memref<1x4x6x6xf32> {llvm.noalias}, %{{.*}}: memref<4x4x3x3xf32> {llvm.noalias}, %{{.*}}: memref<1x4x6x6xf32>, %{{.*}}: memref<1x4x6x6xf32>)
