// RUN: nasir-opt %s -p nest-bufferize,convert-nest-to-loops | filecheck %s

// A stride-2 window of 5 taps along a register tile of 2 points (lanes over 16 output channels,
// kw unrolled whole): the taps are emitted by the input phase they read, kw = 0, 2, 4 (even
// columns), then kw = 1, 3 (odd columns). Each broadcast input is loaded once, where the first
// tap that reads it comes, so the loads run over the even columns 0..6, then the odd ones 1..5:
// the even columns' broadcasts are dead before the odd ones are loaded (ResNet's 7x7 stride-2
// stem keeps 11 broadcasts live instead of 21).

builtin.module {
  func.func @main(%x: tensor<7xf32>) -> tensor<16x2xf32> {
    %w = nn.weight {name = "w"} : tensor<5x16xf32>
    %y = nest.compute %x, %w {name = "conv", domain = #nest.domain<[co = 16, ow = 2], [kw = 5]>, maps = [affine_map<(d0, d1, d2) -> (d1 * 2 + d2)>, affine_map<(d0, d1, d2) -> (d2, d0)>], out_map = affine_map<(d0, d1, d2) -> (d0, d1)>, combiner = "mac", epilogue = [], schedule = {order = ["kw", "ow", "co"], vector = "co", unroll = {ow = 2, kw = 5}}} : (tensor<7xf32>, tensor<5x16xf32>) -> tensor<16x2xf32>
    func.return %y : tensor<16x2xf32>
  }
}

// CHECK:      func.func private @conv(%[[X:[0-9]+]]: memref<7xf32> {llvm.noalias}, %[[W:[0-9]+]]: memref<5x16xf32> {llvm.noalias}
// CHECK-DAG:  %[[C0:[0-9]+]] = arith.constant 0 : index
// CHECK-DAG:  %[[C1:[0-9]+]] = arith.constant 1 : index
// CHECK-DAG:  %[[C2:[0-9]+]] = arith.constant 2 : index
// CHECK-DAG:  %[[C3:[0-9]+]] = arith.constant 3 : index
// CHECK-DAG:  %[[C4:[0-9]+]] = arith.constant 4 : index
// CHECK-DAG:  %[[C5:[0-9]+]] = arith.constant 5 : index
// CHECK-DAG:  %[[C6:[0-9]+]] = arith.constant 6 : index
// CHECK:      memref.load %[[X]][%[[C0]]]
// CHECK:      vector.load %[[W]][%[[C0]], %[[C0]]]
// CHECK:      memref.load %[[X]][%[[C2]]]
// CHECK:      vector.load %[[W]][%[[C2]], %[[C0]]]
// CHECK:      memref.load %[[X]][%[[C4]]]
// CHECK:      vector.load %[[W]][%[[C4]], %[[C0]]]
// CHECK:      memref.load %[[X]][%[[C6]]]
// CHECK:      memref.load %[[X]][%[[C1]]]
// CHECK:      vector.load %[[W]][%[[C1]], %[[C0]]]
// CHECK:      memref.load %[[X]][%[[C3]]]
// CHECK:      vector.load %[[W]][%[[C3]], %[[C0]]]
// CHECK:      memref.load %[[X]][%[[C5]]]
// CHECK-NOT:  memref.load %[[X]]
// CHECK:      vector.shuffle
