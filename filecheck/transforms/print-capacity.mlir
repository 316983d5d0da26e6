// print-capacity: the alphaNAS mixing matrix of each nest (rows: input axes n, c, h, w; columns:
// output axes) and the network's composed mixing and depth; the IR itself is unchanged.
// A dense conv mixes all channels (a) and a spatial window (m); a depthwise conv maps channels
// one-to-one (o); ReLU is element-wise (o) and non-linear (N).
// The table goes to stderr, the IR to stdout.
// RUN: nasir-opt %s -p convert-nn-to-nest,print-capacity 2>&1 >/dev/null | filecheck %s
// RUN: nasir-opt %s -p convert-nn-to-nest,print-capacity 2>/dev/null | filecheck %s --check-prefix=IR

func.func @main(%x: tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32> {
  %w = nn.weight {name = "w"} : tensor<4x4x3x3xf32>
  %d = nn.weight {name = "d"} : tensor<4x1x3x3xf32>
  %c = nn.conv2d %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, name = "dense"} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x8x8xf32>
  %r = nn.relu %c {name = "act"} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %e = nn.conv2d %r, %d {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 4 : i64, name = "dw"} : (tensor<1x4x8x8xf32>, tensor<4x1x3x3xf32>) -> tensor<1x4x8x8xf32>
  func.return %e : tensor<1x4x8x8xf32>
}

// CHECK:      layer {{.*}} mixing
// CHECK-NEXT: dense {{ +}}nest.compute {{ +}}oxxx/xaxx/xxmx/xxxm {{ +}}L
// CHECK-NEXT: act {{ +}}nest.compute {{ +}}oxxx/xoxx/xxox/xxxo {{ +}}N
// CHECK-NEXT: dw {{ +}}nest.compute {{ +}}oxxx/xoxx/xxmx/xxxm {{ +}}L
// CHECK-NEXT: network mixing oxxx/xaxx/xxmx/xxxm depth 3

// IR-NOT:     mixing
// IR:         name = "dense"
// IR:         name = "act"
// IR:         name = "dw"
