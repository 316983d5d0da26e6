// RUN: nasir-opt %s -p "fold-batch-norm,convert-nn-to-nest,lower-batch-norm,fuse-epilogue,default-schedule,pack-activations,pack-weights,nest-bufferize,convert-nest-to-loops,convert-loops-to-llvm" --cpu=x86-64-v3 | nasir-opt | filecheck %s
// RUN: nasir-opt %s -p "fold-batch-norm,convert-nn-to-nest,lower-batch-norm,fuse-epilogue,default-schedule,pack-activations,pack-weights,nest-bufferize,convert-nest-to-loops,convert-loops-to-llvm" --cpu=x86-64-v3 -t llvm | filecheck %s --check-prefix=IR

// A max pool keeps a running maximum `x > acc or x is NaN ? x : acc` lane by lane (NaN stays): two vectors compare into one
// i1 per lane, which selects lane by lane (nasir.dialects.llvm); the module verifies, prints and
// parses back.

func.func @main(%x: tensor<1x8x9x9xf32>) -> tensor<1x8x4x4xf32> {
  %y = nn.max_pool %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0 : i64, name = "pool"} : (tensor<1x8x9x9xf32>) -> tensor<1x8x4x4xf32>
  func.return %y : tensor<1x8x4x4xf32>
}

// CHECK:      %[[GT:.*]] = llvm.fcmp "ogt" %[[X:.*]], %[[ACC:.*]] : vector<4xf32>
// CHECK-NEXT: %[[NAN:.*]] = llvm.fcmp "uno" %[[X]], %[[X]] : vector<4xf32>
// CHECK-NEXT: %[[KEEP:.*]] = llvm.or %[[GT]], %[[NAN]] : vector<4xi1>
// CHECK-NEXT: %{{.*}} = llvm.select %[[KEEP]], %[[X]], %[[ACC]] : vector<4xi1>, vector<4xf32>

// IR:      %[[GT:.*]] = fcmp ogt <4 x float> %[[X:.*]], %[[ACC:.*]]
// IR-NEXT: %[[NAN:.*]] = fcmp uno <4 x float> %[[X]], %[[X]]
// IR-NEXT: %[[KEEP:.*]] = or <4 x i1> %[[GT]], %[[NAN]]
// IR-NEXT: select <4 x i1> %[[KEEP]], <4 x float> %[[X]], <4 x float> %[[ACC]]
