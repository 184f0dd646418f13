# `make train` / `make test` create the virtual environment on first use, from the lock
# (requirements.lock: the exact versions this project is tested with); `make lock` refreshes it.
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
EXTRAS ?= dev,loggers,sweep,video,detection,lora
LOCK := requirements.lock

.PHONY: train test test-all mutants lock clean-venv bench bench-lock

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

mutants: $(VENV)/.installed  ## one-line mapping bugs (tools/mutant_list.py) the default suite must catch (make mutants ARGS="gpt2 --baseline")
	$(PY) tools/mutants.py $(ARGS)

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
	rm -rf $(VENV) $(BENCH_VENV)

# The benchmarks (docs/benchmarks.md) run in their own environment, from their own lock: the zoo
# beside the peers it is timed against. litgpt installs without its dependencies (its
# huggingface-hub<1.4 pin breaks transformers 5.x); the lock is a complete freeze, so it installs
# with --no-deps too, exactly as pinned.
BENCH_VENV ?= .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_LOCK := benchmarks/requirements.lock
BENCH_PEERS := transformers timm x-transformers openai-whisper scipy  # scipy: the set losses' matching (yolos)
# litgpt without its dependencies; of those, `import litgpt` needs only psutil (at litgpt's pin) beyond the zoo's
BENCH_NODEPS := litgpt==0.5.13
BENCH_NODEPS_NEEDS := psutil==7.2.2
BENCH_ARGS ?=

$(BENCH_VENV)/.installed: pyproject.toml $(BENCH_LOCK)
	python3 -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install -q --upgrade pip
	$(BENCH_PY) -m pip install -q --no-deps -r $(BENCH_LOCK)
	$(BENCH_PY) -m pip install -q --no-deps -e .
	touch $@

bench: $(BENCH_VENV)/.installed  ## every family against every peer, one table (make bench BENCH_ARGS="--steps 3")
	$(BENCH_PY) benchmarks/all.py $(BENCH_ARGS)

bench-lock:  ## resolve the zoo + peers afresh in a scratch venv and pin the result in benchmarks/requirements.lock
	rm -rf .lock-venv-bench && python3 -m venv .lock-venv-bench
	.lock-venv-bench/bin/python -m pip install -q --upgrade pip
	.lock-venv-bench/bin/python -m pip install -q -e . $(BENCH_PEERS) $(BENCH_NODEPS_NEEDS)
	.lock-venv-bench/bin/python -m pip install -q --no-deps $(BENCH_NODEPS)
	.lock-venv-bench/bin/python -c 'import litgpt, x_transformers, whisper, transformers, timm; from litgpt.model import GPT'
	( echo "# The exact versions the benchmarks run with (make bench-lock; Python $$(.lock-venv-bench/bin/python -c 'import platform; print(platform.python_version())'))."; \
	  echo "# Install with pip install --no-deps -r (make bench does): $(BENCH_NODEPS) is installed without its"; \
	  echo "# dependencies, since its huggingface-hub<1.4 pin breaks transformers 5.x; what it imports is here."; \
	  echo "# The CUDA wheels install on Linux only; elsewhere torch brings its own."; \
	  .lock-venv-bench/bin/python -m pip freeze --exclude-editable \
	  | sed -E '/^(nvidia-|cuda-|triton==)/ s/$$/ ; sys_platform == "linux"/' ) > $(BENCH_LOCK)
	rm -rf .lock-venv-bench
