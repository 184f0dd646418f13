# `make train` / `make test` create the virtual environment on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: train test test-all bench clean-venv

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

train: $(VENV)/.installed   ## GPT on tiny Shakespeare (extra Hydra overrides: make train ARGS="model=bert data=wikitext")
	$(PY) train.py $(ARGS)

test: $(VENV)/.installed    ## the default test suite (a few minutes on 2 CPU cores)
	$(PY) -m pytest -q $(ARGS)

test-all: $(VENV)/.installed  ## everything, the slow tests too (what CI runs)
	$(PY) -m pytest -q -m "" $(ARGS)

clean-venv:
	rm -rf $(VENV)
