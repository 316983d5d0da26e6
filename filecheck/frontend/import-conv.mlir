// ONNX Conv + Relu becomes nn.conv2d + nn.relu; the weights become nn.weight ops named after the
// initializers; the printed IR parses back.
// RUN: %python %S/make_onnx.py conv %t.onnx && nasir-opt %t.onnx | nasir-opt | filecheck %s

// CHECK:      builtin.module attributes {nasir.inputs = ["x"], nasir.outputs = ["z"]}
// CHECK:      func.func @main(%[[X:.*]]: tensor<1x3x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-DAG:  %[[W:.*]] = nn.weight {name = "W"} : tensor<4x3x3x3xf32>
// CHECK-DAG:  %[[B:.*]] = nn.weight {name = "B"} : tensor<4xf32>
// CHECK:      %[[C:.*]] = nn.conv2d %[[X]], %[[W]], %[[B]] {
// CHECK-SAME:   pads = array<i64: 1, 1, 1, 1>
// CHECK-SAME:   groups = 1 : i64, name = "conv"}
// CHECK-SAME:   : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
// CHECK:      %[[R:.*]] = nn.relu %[[C]] {name = "relu"} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK:      func.return %[[R]] : tensor<1x4x8x8xf32>
