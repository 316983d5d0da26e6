// MaxPool / AveragePool / GlobalAveragePool with their windows, strides and pads [t, l, b, r].
// RUN: %python %S/make_onnx.py pool %t.onnx && nasir-opt %t.onnx | nasir-opt | filecheck %s

// CHECK:      nn.max_pool %{{.*}} {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>
// CHECK-SAME:   name = "maxpool"} : (tensor<1x4x16x16xf32>) -> tensor<1x4x8x8xf32>
// CHECK:      nn.avg_pool %{{.*}} {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>
// CHECK-SAME:   count_include_pad = 0 : i64, name = "avgpool"} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
// CHECK:      nn.global_avg_pool %{{.*}} {name = "gap"} : (tensor<1x4x4x4xf32>) -> tensor<1x4x1x1xf32>
