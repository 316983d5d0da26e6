"""Analyses of nest and nn IR that rewrite nothing: the dependences that make a schedule transform
legal (dependences.py) and the properties an architecture transform keeps or changes (properties.py).
Passes read them; they import no pass (tests/test_layering.py).
"""
