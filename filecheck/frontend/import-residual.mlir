// A residual tail: BatchNormalization stays nn.batch_norm (5 operands) at the graph level, and the
// skip connection reads the function argument.
// RUN: %python %S/make_onnx.py residual %t.onnx && nasir-opt %t.onnx | nasir-opt | filecheck %s

// CHECK:      func.func @main(%[[X:.*]]: tensor<1x4x8x8xf32>)
// CHECK:      %[[C:.*]] = nn.conv2d %[[X]], %{{.*}} {{.*}}name = "conv"}
// CHECK:      %[[N:.*]] = nn.batch_norm %[[C]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 1.000000e-05 : f32, name = "bn"}
// CHECK:      %[[A:.*]] = nn.add %[[N]], %[[X]] {name = "add"}
// CHECK:      nn.relu %[[A]] {name = "relu"}
