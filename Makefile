# Two entry points for a fresh machine: `make demo` and `make test`.
# Both install into .venv first; the install is redone only when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-12)
PJRT_DEVICE ?= $(shell ls /dev/accel* /dev/vfio/[0-9]* >/dev/null 2>&1 && echo TPU || echo CPU)
export PJRT_DEVICE
export PYTHONUNBUFFERED := 1
# TensorFlow/XLA C++ logging would otherwise fill the outputs.
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: install demo test lint typecheck pytest browser-deps bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[torch-xla,tensorboard,dev]'
	rm -f $(VENV)/.installed-*
	touch $@

browser-deps:
	@command -v chromium >/dev/null 2>&1 || test -x /usr/bin/chromium || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

demo: install
	$(BIN)/python notebooks/demo.py notebooks/quickstart.ipynb

lint: install
	$(BIN)/ruff check xprof_magic tests bench notebooks/demo.py
	$(BIN)/ruff format --check xprof_magic tests bench notebooks/demo.py

typecheck: install
	$(BIN)/mypy

pytest: install browser-deps
	$(BIN)/python -m pytest -q -ra $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

test: lint typecheck pytest

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) xprof_logs .pytest_cache .mypy_cache .ruff_cache
