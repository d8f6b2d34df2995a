# The README's commands. Each target installs what it needs (a .venv in the checkout).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test compile bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

# The whole pipeline on this machine, on the embedded default (no flags, no network).
demo: install
	$(BIN)/gpu-pipeline run --local

test: install
	$(BIN)/python -m pytest

# Regenerates the committed Vertex AI spec in compiled/.
compile: install
	$(BIN)/gpu-pipeline compile

# Every benchmark, one after another; results in benchmarks/results/ (the README's figures).
bench: install
	$(BIN)/python benchmarks/multiworker.py
	$(BIN)/python benchmarks/local_pipeline.py
	$(BIN)/python benchmarks/input_pipeline.py
	$(BIN)/python benchmarks/dataset_prep.py

clean:
	rm -rf $(VENV) local_runs build *.egg-info
