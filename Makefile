# Everything installs itself into .venv on first use:
#   make demo   installs the base package only (numpy, TenSEAL, cryptography, scikit-learn)
#               and runs `fedsec demo`;
#   make test   installs everything the test suite needs (test tools, plots, Flower with its
#               simulation engine (Ray), PyTorch, the documentation tools) and runs ruff, mypy and
#               pytest (tests/test_docs_site.py builds the documentation site with --strict);
#   make docs   builds the documentation site into site/ (open site/index.html).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
BASE   := $(VENV)/.installed-base
FULL   := $(VENV)/.installed-full
PIP    := $(BIN)/pip install --quiet --disable-pip-version-check

.PHONY: demo test lint typecheck unit docs bench clean

$(BIN)/python:
	@echo "==> creating the virtual environment $(VENV) ($(PYTHON) -m venv)"
	$(PYTHON) -m venv $(VENV)

$(BASE): pyproject.toml | $(BIN)/python
	@echo "==> installing fedsec and what the demo needs: numpy, TenSEAL (SEAL), cryptography,"
	@echo "    scikit-learn (about 330 MB installed; a few minutes on first run)"
	$(PIP) -e .
	@touch $(BASE)

$(FULL): pyproject.toml $(BASE)
	@echo "==> installing the test and optional dependencies: pytest, hypothesis, ruff, mypy,"
	@echo "    matplotlib, Flower with Ray (simulation engine), PyTorch CPU, MkDocs (several minutes)"
	$(PIP) -e '.[dev,plots,flower,flower-sim,learning,docs]'
	@touch $(FULL)

demo: $(BASE)
	@echo "==> fedsec demo: secure AUC over 5 hospitals, both threat models (seconds)"
	$(BIN)/fedsec demo

lint: $(FULL)
	@echo "==> ruff"
	$(BIN)/ruff check src tests benchmarks

typecheck: $(FULL)
	@echo "==> mypy --strict"
	$(BIN)/mypy src/fedsec

unit: $(FULL)
	@echo "==> pytest"
	$(BIN)/pytest

test: lint typecheck unit

docs: $(FULL)
	@echo "==> mkdocs build --strict (the site goes to site/; warnings are errors)"
	$(BIN)/mkdocs build --strict --site-dir site

bench: $(FULL)
	$(BIN)/python benchmarks/bench_fhauc.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
