# `make train` / `make test` create the virtual environment on first use, from the lock
# (requirements.lock: the exact versions this project is tested with); `make lock` refreshes it.
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
EXTRAS ?= dev,loggers,sweep,video,detection,lora
LOCK := requirements.lock

.PHONY: train test test-all lock clean-venv

$(VENV)/.installed: pyproject.toml $(LOCK)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r $(LOCK)
	$(PY) -m pip install -q --no-deps -e '.[$(EXTRAS)]'
	touch $@

train: $(VENV)/.installed   ## GPT on tiny Shakespeare (extra Hydra overrides: make train ARGS="model=bert data=wikitext")
	$(PY) train.py $(ARGS)

test: $(VENV)/.installed    ## the default test suite (a few minutes on 2 CPU cores)
	$(PY) -m pytest -q $(ARGS)

test-all: $(VENV)/.installed  ## everything, the slow tests too (what CI runs)
	$(PY) -m pytest -q -m "" $(ARGS)

lock:  ## resolve pyproject.toml's ranges afresh in a scratch venv and pin the result in requirements.lock
	rm -rf .lock-venv && python3 -m venv .lock-venv
	.lock-venv/bin/python -m pip install -q --upgrade pip
	.lock-venv/bin/python -m pip install -q -e '.[$(EXTRAS)]'
	( echo "# The exact versions zoo is tested with (make lock; Python $$(.lock-venv/bin/python -c 'import platform; print(platform.python_version())'))."; \
	  echo "# The CUDA wheels install on Linux only; elsewhere torch brings its own."; \
	  .lock-venv/bin/python -m pip freeze --exclude-editable \
	  | sed -E '/^(nvidia-|cuda-|triton==)/ s/$$/ ; sys_platform == "linux"/' ) > $(LOCK)
	rm -rf .lock-venv

clean-venv:
	rm -rf $(VENV)
