"""The command line, the top of the house: `nasir` (main.py), `nasir-opt` (nasir_opt.py), the pass
reference they print (passdoc.py), `nasir check --bisect` (bisect.py) and `python -m nasir.cli.demo`.
Nothing else in nasir imports this package; what the libraries share with it (terminal output,
the ONNX Runtime oracle) lives below it, in nasir/console.py and nasir/reference.py.
"""
