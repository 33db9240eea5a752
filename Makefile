# The two commands of the README: `make demo` and `make test`.
# Each installs what it needs into .venv/ first (idempotent: seconds when done).
PY := .venv/bin/python

.PHONY: install demo test

install:
	bash tools/install.sh

demo: install
	$(PY) tools/demo.py

test: install
	$(PY) -m pytest tests -q
