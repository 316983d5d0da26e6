"""Analyses the lowering reads and that rewrite nothing: the CPU cost model default-schedule picks
its register tiles by (cost_model.py). They import no pass (tests/test_layering.py).
"""
