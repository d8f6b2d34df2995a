# The README's commands. Each target installs what it needs (a .venv in the checkout).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SHELL := /bin/bash

.PHONY: install demo test check compile bench lock image-check clean

install: $(STAMP)

# uv installs what the project declares (the same versions pip resolves, in about a third
# of the time: it fetches and unpacks in parallel and keeps a cache); it is the tool
# `make lock` already uses (the bound is the `lock` extra's). uv reads its own settings
# (UV_* variables, uv.toml), not pip's. --compile-bytecode: the .pyc files are written
# once here, as pip does; without them each of the suite's hundreds of processes compiles
# TensorFlow's modules again wherever PYTHONDONTWRITEBYTECODE is set (the tests took 15
# minutes instead of 10 on the 2-core machine).
$(STAMP): pyproject.toml
	@echo "make: installing the project and its dependencies into $(VENV) (under a minute the first time)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "uv>=0.9,<1"
	$(BIN)/uv pip install --compile-bytecode --python $(BIN)/python -e ".[test]"
	touch $(STAMP)

# The whole pipeline on this machine, on the embedded default (no flags, no network).
demo: install
	$(BIN)/gpu-pipeline run --local

# The whole suite (docs/testing.md), on three processes, each taking whole test files
# (their module fixtures are shared within a file): the suite's tests spend a fifth of
# their time waiting (on servers, clusters forming, timeouts), so on the 2-core machine a
# third process keeps both cores busy (1.8 cores used instead of 1.6). The longest files
# are handed out first (tests/support/schedule.py): in collection order the trainer's
# TensorFlow files came last and one process was still on them when the others had ended.
test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 3 --dist loadfile

# The fast tier for the inner loop: unit and contract tests, no test marked slow (one that
# starts processes, TensorFlow or a whole run); `make test` stays the one CI runs.
check: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow" -q

# Regenerates the committed Vertex AI spec in compiled/.
compile: install
	$(BIN)/gpu-pipeline compile

# Regenerates the images' lock files (requirements/*.lock) with uv, hashes included, and
# the GPU image's apt lock (needs https://packages.cloud.google.com/apt and gpgv).
lock: install
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[lock]"
	$(BIN)/python -m release.locks

# Builds each image's Python environment from its lock in a fresh virtualenv and checks,
# with the image's library path, that the CUDA libraries load and the code starts (no
# Docker engine or GPU needed; downloads about 3.5 GB the first time).
image-check: install
	$(BIN)/python -m release.image_check

# Every benchmark, one after another; results in benchmarks/results/ (the README's figures).
bench: install
	$(BIN)/python benchmarks/multiworker.py
	$(BIN)/python benchmarks/local_pipeline.py
	$(BIN)/python benchmarks/input_pipeline.py
	$(BIN)/python benchmarks/dataset_prep.py
	$(BIN)/python benchmarks/dataset_engines.py
	$(BIN)/python benchmarks/efficiency_overhead.py

clean:
	rm -rf $(VENV) local_runs build *.egg-info
