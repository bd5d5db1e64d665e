# `make train` and `make test` each create .venv and install the project on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: install train test reproduce lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

train: $(STAMP)
	$(PY) train.py $(ARGS)

test: $(STAMP)
	$(PY) -m pytest $(ARGS)

reproduce: $(STAMP)  # the docs' training runs in full (numbers compared), bench --quick, circuits.md, a plain install (minutes)
	$(PY) -m pytest -m reproduce $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	$(PY) scripts/bench.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
