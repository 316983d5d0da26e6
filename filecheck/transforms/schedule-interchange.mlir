// interchange permutes the named loops among the positions they hold (TVM reorder); the rest stay put.
// Interchanging mac reductions is legal: nasir treats float sums as reassociable, like every DL compiler.
// RUN: nasir-opt %s -p 'interchange{order=ci,co}' | filecheck %s
// RUN: nasir-opt %s -p 'interchange{order=kw,kh,ci,ow,oh,co,n layers=conv1}' | filecheck %s --check-prefix=FULL
// RUN: nasir-opt %s -p 'interchange{order=k,n layers=fc}' | filecheck %s --check-prefix=FC
// RUN: nasir-opt %s -p 'interchange{order=ci,co},interchange{order=co,ci}' | filecheck %s --check-prefix=BACK

// CHECK:      name = "conv1"
// CHECK-SAME: schedule = {order = ["n", "ci", "oh", "ow", "co", "kh", "kw"]}
// CHECK:      name = "fc"
// CHECK-NOT:  schedule

// FULL: name = "conv1"
// FULL-SAME: schedule = {order = ["kw", "kh", "ci", "ow", "oh", "co", "n"]}

// FC:      name = "conv1"
// FC-NOT:  schedule
// FC:      name = "fc"
// FC-SAME: schedule = {order = ["m", "k", "n"]}

// Back to domain order: the schedule attribute disappears.
// BACK:     name = "conv1"
// BACK-NOT: schedule

func.func @main(%x: tensor<1x4x8x8xf32>, %a: tensor<2x16xf32>) -> (tensor<1x8x8x8xf32>, tensor<2x8xf32>) {
  %w = nn.weight {name = "conv1.weight"} : tensor<8x4x3x3xf32>
  %y = nest.compute %x, %w {name = "conv1",
      domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 4, kh = 3, kw = 3]>,
      maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>,
              affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>],
      out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>,
      combiner = "mac", epilogue = []} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x8x8xf32>
  %v = nn.weight {name = "fc.weight"} : tensor<8x16xf32>
  %z = nest.compute %a, %v {name = "fc",
      domain = #nest.domain<[m = 2, n = 8], [k = 16]>,
      maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>],
      out_map = affine_map<(d0, d1, d2) -> (d0, d1)>,
      combiner = "mac", epilogue = []} : (tensor<2x16xf32>, tensor<8x16xf32>) -> tensor<2x8xf32>
  func.return %y, %z : tensor<1x8x8x8xf32>, tensor<2x8xf32>
}
