# The two commands of the README: `make demo` and `make test`.
# Each installs what it needs into .venv/ first (idempotent: seconds when done).
PY := .venv/bin/python

.PHONY: install demo test test-fast lint

install:
	bash tools/install.sh

demo: install
	$(PY) tools/demo.py

test: install
	$(PY) -m pytest tests -q

# The edit loop: everything but the tests marked slow (end-to-end runs, big inputs).
test-fast: install
	$(PY) -m pytest tests -q -m 'not slow'

lint: install
	$(PY) -m ruff check .
