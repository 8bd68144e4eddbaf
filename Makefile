# gpufleet — `make audit` runs the main job on localhost; `make test` sets up and runs every test.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SIM_DIR := build/sim
SIM_LIB := $(SIM_DIR)/libnvidia-ml.so.1
INVENTORY ?= inventories/local/hosts.yml

.PHONY: audit test sim lint unit integration deps-base deps-test venv clean

audit: deps-base $(VENV)/.installed
	$(BIN)/gpufleet audit -i $(INVENTORY)

test: deps-test $(VENV)/.installed-test sim lint
	$(BIN)/pytest -q tests

deps-base:
	scripts/install-deps.sh base

deps-test:
	scripts/install-deps.sh test

venv: $(VENV)/.installed

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@ $(VENV)/.installed

# The simulated libnvidia-ml.so.1, compile-checked against NVIDIA's nvml.h from the nvidia-nvml-dev wheel.
sim: $(SIM_LIB)

$(SIM_LIB): $(wildcard tests/sim/nvml/*.c tests/sim/nvml/*.h) tests/sim/nvml/Makefile $(VENV)/.installed-test
	$(MAKE) -C tests/sim/nvml OUT=$(abspath $(SIM_DIR)) \
		NVML_INCLUDE="$$($(BIN)/python tests/sim/nvml/find_header.py)"

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/ansible-lint -q

unit: $(VENV)/.installed-test
	$(BIN)/pytest -q tests/unit

integration: $(VENV)/.installed-test sim
	$(BIN)/pytest -q tests/integration

clean:
	rm -rf build reports .pytest_cache
