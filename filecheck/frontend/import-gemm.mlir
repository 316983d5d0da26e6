// Flatten becomes nn.reshape; Gemm keeps trans_b; Softmax keeps its axis.
// RUN: %python %S/make_onnx.py gemm %t.onnx && nasir-opt %t.onnx | nasir-opt | filecheck %s

// CHECK:      func.func @main(%[[X:.*]]: tensor<1x4x2x2xf32>) -> tensor<1x10xf32>
// CHECK:      %[[F:.*]] = nn.reshape %[[X]] {name = "flatten"} : (tensor<1x4x2x2xf32>) -> tensor<1x16xf32>
// CHECK-DAG:  %[[W:.*]] = nn.weight {name = "W"} : tensor<10x16xf32>
// CHECK-DAG:  %[[B:.*]] = nn.weight {name = "B"} : tensor<10xf32>
// CHECK:      %[[G:.*]] = nn.gemm %[[F]], %[[W]], %[[B]] {
// CHECK-SAME:   trans_a = 0 : i64, trans_b = 1 : i64, name = "fc"}
// CHECK-SAME:   -> tensor<1x10xf32>
// CHECK:      nn.softmax %[[G]] {axis = 1 : i64, name = "softmax"} : (tensor<1x10xf32>) -> tensor<1x10xf32>
