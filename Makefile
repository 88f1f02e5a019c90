# Two commands: `make demo` and `make test`. Both create .venv and install on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned: the CPU build of exactly this version installs offline here.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test]"
	# torchvision's stock models for the real-model tests, kept out of site-packages: the index's
	# wheel is a CUDA build whose operators do not load against CPU torch, and transformers would
	# import it (tests/codegen/torchvision_models.py loads only its Python models from here).
	$(PY) -m pip install -q --no-deps --target $(VENV)/vision torchvision==0.28.0
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m unityc.tools.demo

test: $(STAMP)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/lit -sv tests/filecheck
	# two workers: much of a torchrun test is process start-up and rendezvous, not both cores busy.
	# Whole files to a worker (each module's fixture built once), the torchrun files first
	# (tests/conftest.py orders them; xdist's own reorder would put the largest files first).
	$(PY) -m pytest tests --ignore=tests/filecheck -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder

lint: $(STAMP)
	$(VENV)/bin/ruff check unityc tests benchmarks tools
	$(VENV)/bin/ruff format --check unityc tests benchmarks tools
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) *.egg-info
