# Every target is documented by its `##` comment; `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Sub-projects are the folders with a pyproject.toml: ablations, core, detection, figures, harness, retrieval.
SUBPROJECTS := $(patsubst %/pyproject.toml,%,$(wildcard */pyproject.toml))
TEST_DIRS := $(wildcard $(addsuffix /tests,$(SUBPROJECTS)) tests)
# The mmdetection environment (environments/mmdet/): Python 3.10, apart from .venv.
# The first candidate that really runs Python 3.10 (a pyenv shim may exist without the version).
PYTHON_MMDET ?= $(firstword $(foreach p,$(shell command -v python3.10 2>/dev/null) $(wildcard $(HOME)/.pyenv/versions/3.10*/bin/python3.10),$(if $(findstring True,$(shell $(p) -c 'import sys; print(sys.version_info[:2] == (3, 10))' 2>/dev/null)),$(p))))
MMDET_VENV := .venv-mmdet
MMDET_STAMP := $(MMDET_VENV)/.installed
# The API reference's build tools (environments/docs-requirements.txt), apart from .venv.
DOCS_VENV := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed
# The peers benchmark's environment: .venv's packages (a .pth file) plus torchsort, built from source against .venv's torch.
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed
# The profile params.yaml holds (its `profile:` line): the folder of its results, results/<profile>/.
PARAMS_PROFILE := $(shell sed -n 's/^profile: *\([^ #]*\).*/\1/p' params.yaml)
PROFILE ?= $(PARAMS_PROFILE)
BENCH_ARGS ?=
# make reproduce STAGE_TIMES_RECORD=FILE: each stage's seconds as JSON (rambo.ablations.stage_times)
STAGE_TIMES_RECORD ?=
MODE ?= portable

.PHONY: help install lint test test-slow test-slurm test-kernels test-mmdet docs bench bench-peers gpu-check gpu-budget memory-plan wandb-report reproduce paper-smoke figures tables
.DEFAULT_GOAL := help

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

install: $(STAMP) ## create .venv with the pinned requirements and every sub-project (editable)

$(STAMP): environments/requirements.txt $(addsuffix /pyproject.toml,$(SUBPROJECTS))
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r environments/requirements.txt
	$(VENV)/bin/pip install -q --no-deps $(addprefix -e ./,$(SUBPROJECTS))
	touch $@

lint: install ## ruff check and ruff format --check over the repository (ruff.toml); CI runs it
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: install ## run every sub-project's tests (the README's test command; CI runs exactly this)
	$(PY) -m pytest -m "not slow and not slurm" $(TEST_DIRS)

test-slow: install ## run the tests marked slow as well
	$(PY) -m pytest -m "not slurm" $(TEST_DIRS)

.PHONY: test-reproduce
test-reproduce: install ## a fresh clone runs `make reproduce PROFILE=tiny` and commits it; a fresh clone of that commit retrains every run: git status must be clean and a second dvc repro run nothing (tests/test_clean_reproduce.py, marker `reproduce`, also `slow`: about 10 minutes on 2 cores, two tiny reproductions of about 5 each); CI runs it
	$(PY) -m pytest -s -m reproduce tests/test_clean_reproduce.py

test-slurm: install ## the cluster path on a real single-node SLURM started on this host (Debian's slurm-wlm and munge, installed when missing and root; else skipped, saying what to install): sweeps, the pipeline with the SLURM launcher, preemption, a time limit, two SLURM tasks, two jobs in one folder; CI runs it
	$(PY) -m pytest -s -m slurm tests/slurm

test-kernels: install ## the tests that assert outcomes of training or float arithmetic (marker `outcome`), again in the portable numerics mode (torch's portable kernels, MKL's COMPATIBLE branch, no oneDNN) on one thread; CI runs it after `make test`
	RAMBO_NUMERICS=portable GLIBC_TUNABLES=glibc.cpu.hwcaps=-FMA,-FMA4 OMP_NUM_THREADS=1 $(PY) -m pytest -m "outcome and not slow" $(TEST_DIRS)

.PHONY: test-numerics
test-numerics: install ## a tiny retrieval and a tiny detection run give the same metrics.json bytes under an older CPU's code paths in the portable numerics mode (tests/test_portable_numerics.py, marker `numerics`; about a minute); CI runs it
	$(PY) -m pytest -m numerics tests/test_portable_numerics.py

$(MMDET_STAMP): environments/mmdet/requirements.txt core/pyproject.toml harness/pyproject.toml detection/pyproject.toml
	@test -n "$(PYTHON_MMDET)" || { echo "error: the mmdetection environment needs Python 3.10 (mmcv's compiled ops exist for it): install it or set PYTHON_MMDET=/path/to/python3.10"; exit 1; }
	$(PYTHON_MMDET) -m venv $(MMDET_VENV)
	$(MMDET_VENV)/bin/pip install -q --no-cache-dir --require-hashes --no-deps -r environments/mmdet/requirements.txt
	$(MMDET_VENV)/bin/pip install -q --no-deps --no-build-isolation -e ./core -e ./harness -e ./detection
	touch $@

test-mmdet: $(MMDET_STAMP) ## the mmdetection plugin's tests (mmdet's registry and Runner) in their own pinned environment, .venv-mmdet (never touches .venv)
	RAMBO_REQUIRE_MMDET=1 $(MMDET_VENV)/bin/python -m pytest -s detection/tests/test_detection_mmdet_plugin.py detection/tests/test_detection_mmdet_runner.py

$(DOCS_STAMP): environments/docs-requirements.txt
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install -q -r environments/docs-requirements.txt
	touch $@

docs: $(DOCS_STAMP) ## the documentation site and the API reference from the docstrings (mkdocs, Material, mkdocstrings; warnings are errors) into build/docs, then every internal link and anchor of the built pages checked; CI runs it
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict
	$(DOCS_VENV)/bin/python tests/check_site_links.py build/docs

bench: install ## AP-loss speed benchmark vs the reference algorithm and one float32 sort (BENCH_ARGS="--with-1e8 --device cuda")
	$(PY) -m rambo.core.benchmark --out core/benchmarks/ap_loss.json --markdown core/benchmarks/ap_loss.md $(BENCH_ARGS)

$(PEERS_STAMP): $(STAMP)
	$(PY) -m venv $(PEERS_VENV)
	$(PY) -c 'import site; print(site.getsitepackages()[0])' > "$$($(PEERS_VENV)/bin/python -c 'import site; print(site.getsitepackages()[0])')/_rambo_venv.pth"
	$(PEERS_VENV)/bin/pip install -q wheel
	echo "torch==$$($(PY) -c 'import torch; print(torch.__version__.split("+")[0])')" > $(PEERS_VENV)/torch-constraint.txt
	nvcc=$$(command -v nvcc); CUDA_HOME="$${CUDA_HOME:-$${nvcc:+$$(dirname $$(dirname $$(readlink -f $$nvcc)))}}" \
		TORCH_CUDA_ARCH_LIST="$${TORCH_CUDA_ARCH_LIST:-9.0}" $(PEERS_VENV)/bin/pip install -q torchsort==0.1.10 --no-build-isolation -c $(PEERS_VENV)/torch-constraint.txt \
		|| echo "torchsort did not build: the peers table runs without it (and says so)"
	touch $@

bench-peers: $(PEERS_STAMP) ## the RaMBO losses beside PML's FastAP, SmoothAP, MultiSimilarity, Contrastive and torchsort's soft-rank AP at batches 128-4096, with and without the memory (about 10 minutes on one CPU thread): core/benchmarks/peers.{json,md}; .venv-peers holds torchsort
	PYTHONPATH=$(CURDIR)/core/src:$$PYTHONPATH $(PEERS_VENV)/bin/python -m rambo.core.benchmark_peers --out core/benchmarks/peers.json --markdown core/benchmarks/peers.md $(BENCH_ARGS)

gpu-check: install ## the project on one GPU in minutes (core tests on CUDA, rank losses 1e5-1e8 beside the paper's V100, CPU/GPU identical ranks, paper-profile training steps, Recall@K at SOP scale): benchmarks/gpu_check.md; toy sizes on the CPU when there is no GPU
	$(PY) benchmarks/gpu_check.py

wandb-report: install ## a W&B Report of the profile's runs (tables as bars over seeds, learning curves, claims; needs WANDB_API_KEY and the network): python -m rambo.ablations.wandb_report
	$(PY) -m rambo.ablations.wandb_report --params params.yaml

gpu-budget: install ## hours per paper experiment on one GPU, from the step times of benchmarks/gpu_check.json (a real GPU run of make gpu-check): benchmarks/gpu_budget.md, which the docs include
	$(PY) benchmarks/gpu_budget.py --markdown benchmarks/gpu_budget.md

memory-plan: install ## GPU memory of every paper experiment's training step and evaluation, measured on this CPU at 2 and 4 images and extrapolated to its batch, beside 16/24/40/80 GB cards: benchmarks/memory_plan.{md,json} (minutes)
	$(PY) benchmarks/memory_plan.py

reproduce: install ## run the pipeline of PROFILE (default: the checkout's profile, params.yaml's: mini, CPU, synthetic data; paper: GPUs, real data); another profile runs in its own workspace, build/profiles/<profile>/ (rambo.ablations.workspace), leaving the checkout's files as they are; RAMBO_NUMERICS=native for this CPU's faster kernels (another draw)
	@if [ "$(PROFILE)" = "$(PARAMS_PROFILE)" ]; then where=.; else where=$$($(PY) -m rambo.ablations.workspace $(PROFILE)) || exit $$?; fi; \
	  echo "profile $(PROFILE) in $$where, $${RAMBO_NUMERICS:-portable} numerics (rambo.harness.numerics)"; \
	  start=$$(date +%s); cd "$$where" && PATH="$(abspath $(VENV))/bin:$$PATH" $(abspath $(PY)) -m rambo.ablations.stage_times $(if $(STAGE_TIMES_RECORD),--record $(abspath $(STAGE_TIMES_RECORD))) -- $(abspath $(VENV))/bin/dvc repro; status=$$?; \
	  echo "pipeline finished in $$(( $$(date +%s) - start )) s (exit $$status)"; \
	  echo "tables:  $$where/results/$(PROFILE)/tables/tables.md (one Markdown and JSON file per table beside it)"; \
	  echo "figures: $$where/figures/out/$(PROFILE)/"; \
	  exit $$status

.PHONY: pipeline-timing
pipeline-timing: install ## the pipeline timed stage by stage in a fresh clone of HEAD, MODE=native or MODE=portable (every run retrained: as long as a reproduce): benchmarks/pipeline_timing.{json,md}, the modes side by side (rambo.ablations.pipeline_timing)
	$(PY) -m rambo.ablations.pipeline_timing --mode $(MODE)

paper-smoke: install ## the whole paper DAG (every experiment, table and figure of PROFILE=paper) on this CPU in minutes, fed by stand-in archives of every dataset, in a scratch copy (build/paper-smoke: 4 GB of checkpoints at its end, deleted when it passes); CI runs it
	$(PY) -m rambo.ablations.paper_smoke

figures: install ## rebuild every figure (their DVC stages, and whatever they depend on that is out of date)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/dvc repro figure_1 figure_2 figure_3 figure_4 figure_5 figure_6 table_6

tables: install ## the tables of params.yaml's profile from its runs' metrics.json under results/<profile>/runs/ (e.g. runs made on a cluster), without running or deleting anything upstream
	$(PY) -m rambo.ablations.tables --runs results/$(PARAMS_PROFILE)/runs --params params.yaml --out results/$(PARAMS_PROFILE)/tables $(if $(wildcard figures/out/$(PARAMS_PROFILE)/fig2_minibatch_map.json),--figure2 figures/out/$(PARAMS_PROFILE)/fig2_minibatch_map.json)
