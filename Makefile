# One venv per checkout; torch is pinned before anything that depends on it.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# pytest on every core (pytest-xdist), the 30 slowest tests listed; PYTEST_ARGS="-p no:xdist -x" runs in one process
PYTEST_ARGS ?= -n auto --dist worksteal --durations=30

.PHONY: venv test demo bench lit pytest pytest-avx2 fuzz clean

$(STAMP): pyproject.toml constraints.txt
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# the venv alone: then `. .venv/bin/activate` (README, Quick start)
venv: $(STAMP)

test: $(STAMP)
	$(MAKE) pytest pytest-avx2 lit

# the tests share the cores between pytest-xdist's workers: their waiting threads spin libgomp's
# default 300k (~7 ms), not nasir.SPIN_COUNT's ~75 ms, which would take a core from the other worker
pytest pytest-avx2: export GOMP_SPINCOUNT ?= 300000

pytest: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo 'pytest: no tests collected'; rc=0; fi; exit $$rc

# the both-width tests' AVX-512 half again, with this machine treated as an AVX2 CPU (NASIR_HOST_CPU):
# the code is compiled and its kernels' vectors checked, not run, as on an AVX2-only machine. On a
# host without AVX-512 (or one already named by NASIR_HOST_CPU) `make pytest` ran exactly that: not again.
# the tests `make pytest` ran at the width this host runs are deselected there (conftest.py), and the
# generators (test_differential, test_graphs) draw only AVX-512 cases, a sixth as many as in `make pytest`
pytest-avx2: $(STAMP)
	@if [ -z "$$NASIR_HOST_CPU" ] && grep -qw avx512f /proc/cpuinfo; then \
	  echo "NASIR_HOST_CPU=x86-64-v3 pytest -m widths -k 'not avx2'"; \
	  NASIR_HOST_CPU=x86-64-v3 $(BIN)/python -m pytest $(PYTEST_ARGS) -m widths -k 'not avx2'; \
	else echo "pytest-avx2: this host has no AVX-512 (or NASIR_HOST_CPU=$$NASIR_HOST_CPU): make pytest ran the both-width tests as such a host"; fi

lit: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/lit -sv filecheck

# the main job: a short architecture search on ResNet-18 (cifar10): 100 candidates, or what 150 s of
# searching gives (then run it again: it resumes); delete DEMO_OUT to start over
DEMO_OUT ?= demo-search
demo: $(STAMP)
	$(BIN)/nasir search resnet18 --budget 100 --time-limit 150 --workers 2 --out $(DEMO_OUT)

# random CNN graphs against ONNX Runtime with fresh seeds for MINUTES (nasir/fuzz): cases per second
# and per lowering choice; each mismatch saved in FUZZ_OUT as ONNX with a one-line reproduction
MINUTES ?= 30
FUZZ_OUT ?= fuzz-out
fuzz: $(STAMP)
	$(BIN)/python -m nasir.fuzz --minutes $(MINUTES) --out $(FUZZ_OUT)

bench: $(STAMP)
	$(BIN)/python -m nasir.measure.benchmark $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
