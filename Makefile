# `make train` and `make test` each create .venv and install the project on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: install train test reproduce saelens lint bench clean

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

# SAELens's own round trip (tests/test_sae_interop.py's sae_lens tests) in an environment of its own:
# sae-lens needs TransformerLens < 4, the dev extra has 4. Minutes, and about 1 GB of packages, once.
SAELENS_VENV ?= .venv-saelens
saelens:
	test -x $(SAELENS_VENV)/bin/python || python3 -m venv $(SAELENS_VENV)
	$(SAELENS_VENV)/bin/python -c "import torch" 2>/dev/null || $(SAELENS_VENV)/bin/pip install --quiet torch==2.13.0
	$(SAELENS_VENV)/bin/pip install --quiet "sae-lens==6.54.12" -e . pytest pytest-xdist pytest-instafail
	$(SAELENS_VENV)/bin/python -m pytest -n 0 -p no:cacheprovider tests/test_sae_interop.py -k sae_lens $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	$(PY) scripts/bench.py $(ARGS)

clean:
	rm -rf $(VENV) $(SAELENS_VENV) .pytest_cache .ruff_cache
