"""Whole-graph differential testing: random CNN graphs (`graphs`), each checked against ONNX Runtime
(`differential`), in the suite (tests/test_graphs.py) and for as long as asked (`python -m
nasir.fuzz`, `make fuzz`)."""
