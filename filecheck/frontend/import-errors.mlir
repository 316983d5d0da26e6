// Bad inputs give one error line and exit status 1, never a traceback.
// RUN: %python %S/make_onnx.py unsupported %t.onnx && not nasir-opt %t.onnx 2>&1 | filecheck %s --check-prefix=UNKNOWN-OP
// RUN: %python -c "open('%t.bad.onnx', 'wb').write(b'not a protobuf')" && not nasir-opt %t.bad.onnx 2>&1 | filecheck %s --check-prefix=MALFORMED
// RUN: not nasir-opt %t.missing.onnx 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: %python %S/make_onnx.py conv %t.onnx && not nasir-opt %t.onnx -p no-such-pass 2>&1 | filecheck %s --check-prefix=PASS

// UNKNOWN-OP: nasir-opt: error: {{.*}}unsupported ONNX op 'Einsum' (node 'the_einsum')
// UNKNOWN-OP-NOT: Traceback
// MALFORMED: nasir-opt: error: {{.*}}.bad.onnx: not a valid ONNX model
// MALFORMED-NOT: Traceback
// MISSING: nasir-opt: error: {{.*}}.missing.onnx: no such file
// PASS: nasir-opt: error: bad pass pipeline 'no-such-pass': Unrecognized passes: ['no-such-pass']
