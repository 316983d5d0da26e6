// index-split makes one nest per range of a parallel dim, concatenated; unshare gives each band own weights.
// RUN: nasir-opt %s -p 'index-split{dim=co at=2 layers=conv1},group{factor=2 layers="conv1.part1"}' | filecheck %s
// RUN: nasir-opt %s -p 'index-split{dim=oh parts=2 layers=conv2}' | filecheck %s --check-prefix=OH
// RUN: nasir-opt %s -p 'unshare{dim=oh parts=2 layers=conv2}' | filecheck %s --check-prefix=UNSHARE

// CHECK:      nn.weight {name = "conv1.weight_1"} : tensor<2x8x3x3xf32>
// CHECK:      %[[P0:.*]] = nest.compute %0, %{{.*}}, %{{.*}} {name = "conv1.part0", domain = #nest.domain<[n = 1, co = 2, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>
// CHECK:      %[[P1:.*]] = nest.compute %0, %{{.*}}, %{{.*}} {name = "conv1.part1", domain = #nest.domain<[n = 1, g = 2, co = 3, oh = 8, ow = 8], [ci = 4, kh = 3, kw = 3]>
// CHECK-SAME: (tensor<1x8x8x8xf32>, tensor<6x4x3x3xf32>, tensor<6xf32>) -> tensor<1x6x8x8xf32>
// CHECK-NEXT: nn.concat %[[P0]], %[[P1]] {axis = 1 : i64, name = "conv1.concat"} : (tensor<1x2x8x8xf32>, tensor<1x6x8x8xf32>) -> tensor<1x8x8x8xf32>

// OH:      %[[W:.*]] = nn.weight {name = "conv2.weight"}
// OH:      nest.compute %{{.*}}, %[[W]] {name = "conv2.part0", domain = #nest.domain<[n = 1, co = 4, oh = 4, ow = 8]
// OH-SAME: -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>
// OH:      nest.compute %{{.*}}, %[[W]] {name = "conv2.part1", domain = #nest.domain<[n = 1, co = 4, oh = 4, ow = 8]
// OH-SAME: -> (d0, d4, ((d2 + d5) + 3), ((d3 + d6) + -1))>
// OH:      nn.concat {{.*}} {axis = 2 : i64, name = "conv2.concat"}

// UNSHARE:     %[[W0:.*]] = nn.weight {name = "conv2.weight_1"}
// UNSHARE:     %[[W1:.*]] = nn.weight {name = "conv2.weight_2"}
// UNSHARE:     nest.compute %{{.*}}, %[[W0]] {name = "conv2.part0"
// UNSHARE:     nest.compute %{{.*}}, %[[W1]] {name = "conv2.part1"

builtin.module attributes {nasir.inputs = ["input"], nasir.outputs = ["output"]} {
  func.func @main(%0: tensor<1x8x8x8xf32>) -> tensor<1x4x8x8xf32> {
    %1 = nn.weight {name = "conv1.weight"} : tensor<8x8x3x3xf32>
    %2 = nn.weight {name = "conv1.bias"} : tensor<8xf32>
    %3 = nest.compute %0, %1, %2 {name = "conv1", domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = ["add 2"]} : (tensor<1x8x8x8xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>) -> tensor<1x8x8x8xf32>
    %4 = nest.compute %3 {name = "relu1", domain = #nest.domain<[n = 1, c = 8, h = 8, w = 8]>, maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], out_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, combiner = "copy", epilogue = ["relu"]} : (tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %5 = nn.weight {name = "conv2.weight"} : tensor<4x8x3x3xf32>
    %6 = nest.compute %4, %5 {name = "conv2", domain = #nest.domain<[n = 1, co = 4, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>, maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 + d5) + -1), ((d3 + d6) + -1))>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []} : (tensor<1x8x8x8xf32>, tensor<4x8x3x3xf32>) -> tensor<1x4x8x8xf32>
    func.return %6 : tensor<1x4x8x8xf32>
  }
}
