// Illegal or impossible schedule requests: one message naming nest, loop and reason; exit 1.
// RUN: not nasir-opt %s -p 'parallel{dim=ci}' 2>&1 | filecheck %s --check-prefix=PAR
// RUN: not nasir-opt %s -p 'fuse{dims=co,ow}' 2>&1 | filecheck %s --check-prefix=ADJ
// RUN: not nasir-opt %s -p 'vectorize{dim=co}' 2>&1 | filecheck %s --check-prefix=INNER
// RUN: not nasir-opt %s -p 'interchange{order=kw,ci},fuse{dims=kw,kh},interchange{order=ow,"kw*kh"},fuse{dims=ow,"kw*kh"},interchange{order=ci,"ow*kw*kh"},vectorize{dim="ow*kw*kh"}' 2>&1 | filecheck %s --check-prefix=MIX
// RUN: not nasir-opt %s -p 'vectorize{dim=kw}' 2>&1 | filecheck %s --check-prefix=VRED
// RUN: not nasir-opt %s -p 'interchange{order=kw,ow},vectorize{dim=ow},interchange{order=ow,ci}' 2>&1 | filecheck %s --check-prefix=KEEP
// RUN: not nasir-opt %s -p 'strip-mine{dim=co factor=16}' 2>&1 | filecheck %s --check-prefix=FACTOR
// RUN: not nasir-opt %s -p 'strip-mine{dim=co factor=4 layers=fc}' 2>&1 | filecheck %s --check-prefix=NODIM
// RUN: not nasir-opt %s -p 'unroll{dim=kw layers=conv9}' 2>&1 | filecheck %s --check-prefix=NOLAYER
// RUN: not nasir-opt %s -p 'pack{operand=0 layout=NCHW8c layers=conv1}' 2>&1 | filecheck %s --check-prefix=PACK
// RUN: not nasir-opt %s -p 'parallel{dim=co},strip-mine{dim=co factor=2}' 2>&1 | filecheck %s --check-prefix=MARKED

// PAR: nasir-opt: error: parallel: loop 'ci' of nest 'conv1' carries the 'mac' accumulation over reduction dim(s) ci
// ADJ: nasir-opt: error: fuse: loops 'co' and 'ow' of nest 'conv1' are not adjacent
// INNER: nasir-opt: error: vectorize: loop 'co' of nest 'conv1' is not innermost
// MIX: nasir-opt: error: fuse: loops 'ow' and 'kw*kh' of nest 'conv1' mix parallel and reduction dims
// VRED: nasir-opt: error: vectorize: loop 'kw' of nest 'conv1' carries the 'mac' accumulation
// KEEP: nasir-opt: error: interchange: nest 'conv1' runs loop 'ow' as vector lanes, which must stay innermost
// FACTOR: nasir-opt: error: strip-mine: factor 16 for loop 'co' of nest 'conv1' must be in 1..8
// NODIM: nasir-opt: error: strip-mine: nest 'fc' has no loop 'co' (its loops: m, n, k)
// NOLAYER: nasir-opt: error: unroll: layers='conv9' matches no nest (nests: conv1, fc)
// PACK: nasir-opt: error: pack: block 8c of layout 'NCHW8c' does not divide axis C (extent 4) of operand 0 of nest 'conv1'
// MARKED: nasir-opt: error: strip-mine: loop 'co' of nest 'conv1' is already parallel

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
