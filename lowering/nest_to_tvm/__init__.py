"""nest -> TVM: where the GPU backend's conversion goes (issue 27); nothing is here yet."""
