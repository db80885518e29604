# Two entry points for a fresh machine: `make demo` and `make test`; `make check` is the
# developer's inner loop (lint, types, the fast tests; newest stack only); `make stress-test`
# is `make test` beside a CPU hog on every core.
# All install into .venv first; the install is redone only when pyproject.toml changes.
# `make test` also builds .venv-colab, Colab's TPU runtime stack (Python 3.13, IPython 7.34,
# ipywidgets 7.7, Notebook 6.5), redone only when tests/colab-constraints.txt or
# pyproject.toml changes, and runs the kernel and Colab tests there too. It also builds
# .venv-torchtpu, TorchTPU's stack (torch 2.13.0, torch-tpu, libtpu: torch_xla 2.9.0 cannot
# share an environment with them), redone only when pyproject.toml changes, and runs the
# tests marked torchtpu there (no TPU needed: TorchTPU's host path).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-12)
# The graph viewer's renderer (graphviz in WebAssembly, svg-pan-zoom), from the npm registry,
# so that the graph draws offline; redone when its pins in xprof_magic/_viewer/app/graph.py change.
GRAPH_RENDERER := $(VENV)/share/xprof_magic/graph-viewer
GRAPH_PINS := $(shell cat xprof_magic/_viewer/app/graph.py | md5sum | cut -c1-12)
GRAPH_STAMP := $(GRAPH_RENDERER)/.installed-$(GRAPH_PINS)
PJRT_DEVICE ?= $(shell ls /dev/accel* /dev/vfio/[0-9]* >/dev/null 2>&1 && echo TPU || echo CPU)
export PJRT_DEVICE
COLAB_PYTHON ?= $(or $(wildcard $(HOME)/.pyenv/versions/3.13.0/bin/python3),$(shell command -v python3.13),python3.13)
COLAB_VENV := .venv-colab
COLAB_BIN := $(COLAB_VENV)/bin
COLAB_CONSTRAINTS := tests/colab-constraints.txt
COLAB_STAMP := $(COLAB_VENV)/.installed-$(shell cat $(COLAB_CONSTRAINTS) pyproject.toml | md5sum | cut -c1-12)
COLAB_GRAPH_RENDERER := $(COLAB_VENV)/share/xprof_magic/graph-viewer
COLAB_GRAPH_STAMP := $(COLAB_GRAPH_RENDERER)/.installed-$(GRAPH_PINS)
# XProf requires newer ones than Colab has; the docs' Colab page (docs/guide/colab.md) names both.
COLAB_UNPINNED := absl-py|urllib3
COLAB_STACK := ipython ipykernel traitlets ipywidgets jupyter_client jupyter_core tornado pyzmq \
  notebook widgetsnbextension jupyterlab_widgets protobuf matplotlib-inline torch torch_xla \
  jax jaxlib
COLAB_TEST_DEPS := pytest pytest-timeout nbclient nbformat playwright
# Python 3.11: this machine kind keeps torch 2.13.0's CPU wheel for it on disk.
TORCHTPU_PYTHON ?= $(PYTHON)
TORCHTPU_VENV := .venv-torchtpu
TORCHTPU_BIN := $(TORCHTPU_VENV)/bin
TORCHTPU_STAMP := $(TORCHTPU_VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-12)
# torch first, by its version: PyPI's plain torch is a multi-GB CUDA build.
TORCHTPU_TORCH := torch==2.13.0
TORCHTPU_TEST_DEPS := pytest pytest-timeout ipykernel nbclient nbformat
# libtpu asks the cloud metadata server who the machine is unless these say it; no test
# forces the tpu device, and nothing leaves the machine.
TORCHTPU_ENV := TPU_SKIP_MDS_QUERY=1 TPU_ACCELERATOR_TYPE=v6e-1 TPU_WORKER_ID=0 \
  TPU_WORKER_HOSTNAMES=localhost PYTHONWARNINGS="ignore:<TorchTpu/Performance/TcMalloc/"
export PYTHONUNBUFFERED := 1
# TensorFlow/XLA C++ logging would otherwise fill the outputs.
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: install graph-renderer colab-env torchtpu-env demo test stress-test check lint typecheck docs pytest fast-pytest browser-deps bench clean

install: $(STAMP) $(GRAPH_STAMP)

graph-renderer: $(GRAPH_STAMP)

$(GRAPH_STAMP): xprof_magic/_viewer/app/graph.py $(STAMP)
	rm -f $(GRAPH_RENDERER)/.installed-*
	$(BIN)/python -m xprof_magic graph-renderer $(GRAPH_RENDERER) || \
	  $(BIN)/python -m xprof_magic graph-renderer $(GRAPH_RENDERER)
	touch $@

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[torch-xla,jax,tensorboard,dev]'
	rm -f $(VENV)/.installed-*
	touch $@

colab-env: $(COLAB_STAMP) $(COLAB_GRAPH_STAMP)

$(COLAB_GRAPH_STAMP): xprof_magic/_viewer/app/graph.py $(COLAB_STAMP)
	rm -f $(COLAB_GRAPH_RENDERER)/.installed-*
	$(COLAB_BIN)/python -m xprof_magic graph-renderer $(COLAB_GRAPH_RENDERER) || \
	  $(COLAB_BIN)/python -m xprof_magic graph-renderer $(COLAB_GRAPH_RENDERER)
	touch $@

# Every Colab pin but the two XProf forces, so the environment is Colab's after
# `pip install xprof_magic`.
$(COLAB_STAMP): pyproject.toml $(COLAB_CONSTRAINTS)
	@command -v $(COLAB_PYTHON) >/dev/null || { echo "Colab's stack needs Python 3.13: none at $(COLAB_PYTHON);" \
	  "install it (pyenv install 3.13) or set COLAB_PYTHON=/path/to/python3.13"; exit 1; }
	test -x $(COLAB_BIN)/python || $(COLAB_PYTHON) -m venv $(COLAB_VENV)
	grep -vE '^($(COLAB_UNPINNED))==' $(COLAB_CONSTRAINTS) > $(COLAB_VENV)/constraints.txt
	$(COLAB_BIN)/python -m pip install -q -c $(COLAB_VENV)/constraints.txt -e . \
	  $(COLAB_STACK) $(COLAB_TEST_DEPS)
	rm -f $(COLAB_VENV)/.installed-*
	touch $@

torchtpu-env: $(TORCHTPU_STAMP)

$(TORCHTPU_STAMP): pyproject.toml
	test -x $(TORCHTPU_BIN)/python || $(TORCHTPU_PYTHON) -m venv $(TORCHTPU_VENV)
	$(TORCHTPU_BIN)/python -m pip install -q --upgrade pip
	$(TORCHTPU_BIN)/python -m pip install -q $(TORCHTPU_TORCH) -e '.[torch-tpu]' $(TORCHTPU_TEST_DEPS)
	rm -f $(TORCHTPU_VENV)/.installed-*
	touch $@

browser-deps:
	@command -v chromium >/dev/null 2>&1 || test -x /usr/bin/chromium || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

demo: install
	$(BIN)/python notebooks/demo.py notebooks/quickstart.ipynb
	$(BIN)/python notebooks/demo.py notebooks/jax_quickstart.ipynb
	$(BIN)/python notebooks/demo.py notebooks/marimo_quickstart.py

lint: install
	$(BIN)/ruff check xprof_magic tests bench docs notebooks/demo.py
	$(BIN)/ruff format --check xprof_magic tests bench docs notebooks/demo.py

typecheck: install
	$(BIN)/mypy

# The newest stack runs everything but the tests of Colab's pinned stack; the pinned stack
# runs the kernel tests again, and the Colab ones.
# Every test's prerequisite is installed above, so a missing one fails instead of skipping.
pytest: export XPROF_MAGIC_TESTS_STRICT = 1
pytest: install colab-env torchtpu-env browser-deps
	$(BIN)/python -m pytest -q -ra -m "not pinned and not torchtpu" $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; \
	  $(COLAB_BIN)/python -m pytest -q -ra -m "kernel or colab or pinned" $(PYTEST_ARGS); rc2=$$?; \
	  if [ $$rc2 -eq 5 ]; then echo "pytest collected no tests on Colab's stack"; exit 1; fi; \
	  $(TORCHTPU_ENV) $(TORCHTPU_BIN)/python -m pytest -q -ra -m torchtpu tests/test_torchtpu.py \
	    $(PYTEST_ARGS); rc3=$$?; \
	  if [ $$rc3 -eq 5 ]; then echo "pytest collected no tests on TorchTPU's stack"; exit 1; fi; \
	  [ $$rc -eq 0 ] && [ $$rc2 -eq 0 ] && [ $$rc3 -eq 0 ]

# The docs site (mkdocs.yml) into build/site; --strict: a broken link or anchor fails it.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir build/site

test: lint typecheck docs pytest

# `make test` on a busy machine, as on a loaded laptop or CI runner: one CPU hog per core
# runs beside it (stress-ng where installed, else a Python busy loop, each pinned to its
# core with taskset where there is one), started once the environments are installed and
# stopped when the run ends, whatever its result (the exit status is make test's).
CORES := $(shell nproc 2>/dev/null || echo 2)
stress-test: install colab-env torchtpu-env browser-deps
	@hogs=""; trap 'kill $$hogs 2>/dev/null; wait $$hogs 2>/dev/null' EXIT INT TERM; \
	if command -v stress-ng >/dev/null 2>&1; then \
	  stress-ng --cpu $(CORES) --quiet & hogs=$$!; \
	  echo "stress-test: stress-ng --cpu $(CORES) beside make test (pid $$hogs)"; \
	else \
	  pin=""; for core in $$(seq 0 $$(($(CORES) - 1))); do \
	    if command -v taskset >/dev/null 2>&1; then pin="taskset -c $$core"; fi; \
	    $$pin $(PYTHON) -c 'while True: pass' & hogs="$$hogs $$!"; \
	  done; \
	  echo "stress-test: $(CORES) Python busy loops beside make test (pids$$hogs)"; \
	fi; \
	$(MAKE) --no-print-directory test

# The fast tests: in-process and subprocess tests on the newest stack; no kernel, Colab,
# browser or Binder tests, nor the ones marked slow. `make check PYTEST_ARGS="-k name"` runs
# some of them.
FAST_TESTS := not (kernel or colab or pinned or torchtpu or browser or binder or slow)
fast-pytest: export XPROF_MAGIC_TESTS_STRICT = 1
fast-pytest: install
	$(BIN)/python -m pytest -q -ra -m "$(FAST_TESTS)" $(PYTEST_ARGS)

check: lint typecheck docs fast-pytest

# Every benchmark, written to BENCHMARKS.md; `python -m bench load-ext` (and the other
# parts named in bench/__main__.py) runs one alone.
bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(COLAB_VENV) $(TORCHTPU_VENV) xprof_logs notebooks/xprof_logs \
	  .pytest_cache .mypy_cache .ruff_cache
