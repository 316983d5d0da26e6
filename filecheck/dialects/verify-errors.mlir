// The verifiers reject IR whose types disagree with what the ops compute.
// RUN: nasir-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Without --verify-diagnostics the first failure is one error line and exit status 1:
// RUN: not nasir-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=ERR

// A conv result shape that the operands do not give (3x3 kernel, no padding: 6x6, not 8x8).
func.func @main(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  %0 = nn.conv2d %x, %w {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
  func.return %0 : tensor<1x4x8x8xf32>
}
// CHECK: Operation does not verify: nn.conv2d: result shape [1, 4, 8, 8] but operands give [1, 4, 6, 6]
// ERR: nasir-opt: error: nn.conv2d: result shape [1, 4, 8, 8] but operands give [1, 4, 6, 6]
// ERR-NOT: Traceback

// -----

// An element-wise result that changes the channel count.
func.func @main(%x: tensor<1x3x8x8xf32>) -> tensor<1x4x8x8xf32> {
  %0 = nn.relu %x : (tensor<1x3x8x8xf32>) -> tensor<1x4x8x8xf32>
  func.return %0 : tensor<1x4x8x8xf32>
}
// CHECK: Operation does not verify: nn.relu: result shape [1, 4, 8, 8] but operands give [1, 3, 8, 8]

// -----

// An access map with three results for a rank-4 input.
func.func @main(%x: tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32> {
  %0 = nest.compute %x {name = "copy", domain = #nest.domain<[n = 1, c = 4, h = 8, w = 8]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = []} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  func.return %0 : tensor<1x4x8x8xf32>
}
// CHECK: Operation does not verify: nest 'copy': map 0 is 4-d -> 3 but the domain has 4 dims and input 0 has rank 4

// -----

// An access map over fewer dims than the domain has.
func.func @main(%x: tensor<1x4x8x8xf32>, %w: tensor<4x4x1x1xf32>) -> tensor<1x4x8x8xf32> {
  %0 = nest.compute %x, %w {name = "pw", domain = #nest.domain<[n = 1, co = 4, h = 8, w = 8], [ci = 4]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d1, d4, 0, 0)>], out_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x4x8x8xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x8x8xf32>
  func.return %0 : tensor<1x4x8x8xf32>
}
// CHECK: Operation does not verify: nest 'pw': map 0 is 4-d -> 4 but the domain has 5 dims and input 0 has rank 4

// -----

// An out_map that does not fit the result rank.
func.func @main(%x: tensor<1x4x8x8xf32>) -> tensor<1x4x64xf32> {
  %0 = nest.compute %x {name = "bad_out", domain = #nest.domain<[n = 1, c = 4, h = 8, w = 8]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = []} : (tensor<1x4x8x8xf32>) -> tensor<1x4x64xf32>
  func.return %0 : tensor<1x4x64xf32>
}
// CHECK: Operation does not verify: nest 'bad_out': out_map does not fit the domain and the result rank 3
