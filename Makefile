# gpufleet — `make audit` runs the main job on localhost; `make test` sets up and runs every test.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SIM_DIR := build/sim
SIM_LIB := $(SIM_DIR)/libnvidia-ml.so.1
INVENTORY ?= inventories/local/hosts.yml

.PHONY: audit demo demo-down demo-local collections test sim bindings lint sanity quality collection ee-context lab molecule unit integration deps-base deps-test venv clean docs

audit: deps-base $(VENV)/.installed
	$(BIN)/gpufleet audit -i $(INVENTORY)

# The real-GPU check (docs/device-check.md), on a Linux machine with an NVIDIA driver and GPU: gpu_info, the audit,
# topology, the probe and the watch checker (--print) on localhost, read-only, against nvidia-smi -q -x and topo -m;
# one table (field, gpufleet, nvidia-smi, match) and the time of gpufleet's NVML facts vs nvidia-smi -q, printed and
# written to build/device-check/table.md and table.json. Exit 1 on a mismatch. Needs only the project's venv (no
# apt packages, no lab). Without internet: `make device-check-wheels` where PyPI is reachable (wheels for Python
# 3.11-3.13 on WHEEL_ARCH, default x86_64; about 14 MB), carry build/device-check-wheels, then
# `PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/build/device-check-wheels make device-check`.
WHEEL_ARCH ?= x86_64
.PHONY: device-check device-check-wheels
device-check: $(VENV)/.installed
	$(BIN)/python scripts/device_check.py --out build/device-check

device-check-wheels: $(VENV)/bin/python
	for v in 3.11 3.12 3.13; do $(BIN)/pip download -q -d build/device-check-wheels --only-binary=:all: \
		--python-version $$v $(foreach t,manylinux2014 manylinux_2_28 manylinux_2_34,--platform $(t)_$(WHEEL_ARCH)) \
		. 'setuptools>=77' wheel pip || exit 1; done

# A simulated fleet of 8 GPU servers, each a podman container (inventories/demo-podman; images from `make lab`,
# nothing pulled): audited (reports/demo/), then remediated and audited again (reports/demo/remediation-*/: before,
# after, remediation.json). Every change lands inside the containers: nothing on this machine is changed. The
# containers stay up for a look (`podman exec -it gpufleet-demo-sg-a100-01 bash`); `make demo-down` removes them.
# Last, the watch (playbooks/watch.yml) is installed on every container: `podman exec gpufleet-demo-sg-a100-01
# gpufleet-watch` checks the host again, and its textfile is /var/lib/prometheus/node-exporter/gpufleet.prom (the demo
# containers run no systemd: the timer's units are installed, not started).
# `make demo-local` runs the same fleet without containers, on fixture trees under build/demo: it audits, then
# remediates (the changes land in build/demo/<host>/root only) and audits again; `make demo-local DEMO_REMEDIATE=no`
# stops after the audit.
demo: deps-test $(VENV)/.installed-test sim lab
	$(BIN)/python tests/sim/demo.py
	$(BIN)/ansible-playbook -i inventories/demo-podman/hosts.yml tests/sim/demo_podman.yml
	$(BIN)/gpufleet audit -i inventories/demo-podman/hosts.yml --out reports/demo
	@echo "demo: remediating the 8 simulated hosts (every change lands inside their podman containers)"
	$(BIN)/gpufleet remediate -i inventories/demo-podman/hosts.yml --out reports/demo
	$(BIN)/ansible-playbook -i inventories/demo-podman/hosts.yml playbooks/watch.yml

demo-down: $(VENV)/.installed-test
	$(BIN)/ansible-playbook -i inventories/demo-podman/hosts.yml tests/sim/demo_podman.yml -e gpufleet_demo_state=absent

DEMO_REMEDIATE ?= yes
demo-local: deps-test $(VENV)/.installed-test sim
	$(BIN)/python tests/sim/demo.py
	$(BIN)/gpufleet audit -i inventories/demo/hosts.yml --out reports/demo
ifeq ($(DEMO_REMEDIATE),yes)
	@echo "demo-local: remediating the 8 simulated hosts; every change lands in their fixture trees under build/demo/"
	@echo "demo-local: (nothing else on this machine changes; DEMO_REMEDIATE=no stops after the audit)"
	$(BIN)/gpufleet remediate -i inventories/demo/hosts.yml --out reports/demo
	@echo "demo-local: next, a host's topology and GPU jobs: gpufleet topology (or probe) -i inventories/demo/hosts.yml -l sg-a100-01"
else
	@echo "demo-local: DEMO_REMEDIATE=$(DEMO_REMEDIATE): no remediation (gpufleet remediate -i inventories/demo/hosts.yml --check shows what it would change)"
endif

# Regenerate the README's rule catalog and policy tables from the code.
docs: $(VENV)/.installed-test
	$(BIN)/python scripts/gen-readme-tables.py
	$(BIN)/python scripts/gen-role-readmes.py

test: deps-test $(VENV)/.installed-test sim bindings quality lab
	$(BIN)/pytest -q --durations=30 tests

# Container lab for molecule/ (root): podman, network gpufleet-lab, local images (debootstrap, nothing pulled),
# and the collections Molecule needs, from the PyPI `ansible` bundle.
lab: collections
	scripts/lab-setup.sh

# containers.podman, ansible.posix, community.general from PyPI's `ansible` bundle into .collections/ (ansible-lint
# resolves the lab playbooks' modules with them; Molecule and the demo use them).
collections: $(VENV)/.installed-test
	scripts/fetch-collections.sh

molecule: lab sim
	$(BIN)/pytest -q tests/integration/test_molecule.py

# Collection quality gates: ruff, ansible-lint (production profile), bandit (src/ and plugins/; every exception is a
# `# nosec BXXX  # reason` on its line), ansible-test sanity (--local, no Docker).
quality: lint sanity

sanity: $(VENV)/.installed-test
	scripts/sanity.sh

# The Galaxy tarball (build/gpufleet-tuning-<version>.tar.gz) and the execution-environment build context.
collection: $(VENV)/.installed-test
	$(BIN)/ansible-galaxy collection build --force --output-path build .

ee-context: collection
	$(BIN)/ansible-builder create -f execution-environment.yml -c build/ee

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

# A wheel of each NVML binding release in tests/sim/nvml/bindings.txt, under build/wheels/nvml-bindings: the binding
# matrix test (tests/integration/test_nvml_bindings.py) installs them offline, one throwaway venv each.
bindings: $(VENV)/.installed-test
	scripts/fetch-nvml-bindings.sh $(BIN)/python build/wheels/nvml-bindings

# The simulated libnvidia-ml.so.1, compile-checked against NVIDIA's nvml.h from the nvidia-nvml-dev wheel.
sim: $(SIM_LIB)

$(SIM_LIB): $(wildcard tests/sim/nvml/*.c tests/sim/nvml/*.h) tests/sim/nvml/Makefile $(VENV)/.installed-test
	$(MAKE) -C tests/sim/nvml OUT=$(abspath $(SIM_DIR)) \
		NVML_INCLUDE="$$($(BIN)/python tests/sim/nvml/find_header.py)"

lint: collections
	$(BIN)/ruff check .
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/ansible-lint -q
	$(BIN)/bandit -q -r src plugins
	$(BIN)/antsibull-changelog lint

unit: $(VENV)/.installed-test
	$(BIN)/pytest -q tests/unit

integration: $(VENV)/.installed-test sim bindings
	$(BIN)/pytest -q tests/integration

clean:
	rm -rf build reports .pytest_cache
