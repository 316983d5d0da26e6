"""lit configuration of nasir's FileCheck tests: `lit -sv filecheck` (as `make lit` runs it).

Tests are .mlir files with RUN lines. `nasir-opt` and `filecheck` come from the virtual environment
lit runs in (its bin directory goes first on PATH); `%python` is that environment's interpreter,
for RUN lines that generate inputs (e.g. small ONNX files in frontend/). NASIR_CACHE_DIR points at an
empty folder, so the user's tuning database does not change the schedules the tests check.
"""

import atexit
import os
import shutil
import sys
import tempfile

import lit.formats

config.name = "nasir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["Output", "lit.cfg.py"]

venv_bin = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([venv_bin, os.environ.get("PATH", "")])
config.substitutions.append(("%python", sys.executable))
# a cache folder of the run's own: the user's tuning database must not change default-schedule's output
# (removed when lit exits)
config.environment["NASIR_CACHE_DIR"] = tempfile.mkdtemp(prefix="nasir-lit-cache-")
atexit.register(shutil.rmtree, config.environment["NASIR_CACHE_DIR"], ignore_errors=True)
