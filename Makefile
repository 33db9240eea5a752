# The two commands of the README: `make demo` and `make test`.
# Each installs what it needs into .venv/ first (idempotent: seconds when done).
PY := .venv/bin/python

.PHONY: install demo test test-fast lint docs

install:
	bash tools/install.sh

demo: install
	$(PY) tools/demo.py

# The whole suite, one pytest-xdist worker per core (slow tests spread by work stealing), closing with
# its 15 slowest tests: CI's budget is read off that list.
test: install
	$(PY) -m pytest tests -q -n auto --dist worksteal --durations 15

# The edit loop: everything but the tests marked slow (end-to-end runs, big inputs), one worker
# process per core (pytest-xdist).
test-fast: install
	$(PY) -m pytest tests -q -m 'not slow' -n auto

lint: install
	$(PY) -m ruff check .

# The measured documents in docs/, each written by the tool that measures it (an idle machine
# gives steady figures; the model benchmarks take their turns, so ratios hold under load too).
docs: install
	$(PY) tools/get_flops.py --paper --threads 1 --markdown docs/flops.md
	$(PY) tools/benchmark_attention.py --threads 1 2 --markdown docs/operator.md
	$(PY) tools/benchmark_attention.py --threads 1 --clock cpu --backend torch --methods linear flatten lisa --out work_dirs/benchmark_attention_torch --markdown docs/operator_torch.md
	$(PY) tools/benchmark_resolution.py --markdown docs/performance.md
	$(PY) tools/benchmark_model.py --img-sizes 224 2048 --threads 1 --markdown docs/deit.md
	$(PY) tools/demo.py
	$(PY) tools/collect_results.py work_dirs/demo --found-only --markdown docs/results.md
	$(PY) tools/benchmark_deploy.py --threads 1 --markdown docs/deploy.md

# The long-range probe (docs/long_range.md): per task, each attention's lr chosen on development draws, then
# paired runs on fresh draws (the controls 3, the comparisons 8), two runs at a time; then the two-hop lookup's
# 8 further draws and the budget checks (twice the iterations, the pointer's also four times, there with 8
# further draws too, and the two-layer models at twice; same lrs). Hours on 2 cores (the document states the
# wall time); rows are kept as runs end, so a stopped sweep resumes where it was.
# The training-dynamics study (docs/training_dynamics.md): Semantic FPN with PVT-T, FLatten-PVT-T and LiSA-PVT-T
# from scratch on real nuclei tiles and generated ADE20K; lr per backbone on development draws, 6 paired test
# draws, twice the iterations, LiSA's ablations, the start from one softmax PVT-T. Two runs at a time, hours on
# 2 cores; rows are kept as runs end, so a stopped study resumes where it was.
.PHONY: training-dynamics
training-dynamics: install
	$(PY) tools/training_dynamics.py --jobs 2 --threads 1

LONG_RANGE = $(PY) tools/long_range.py --setting make --threads 1 --jobs 2 --rows docs/long_range_rows.jsonl
.PHONY: long-range
long-range: install
	$(LONG_RANGE)
	$(LONG_RANGE) --tasks lookup-hops2 --runs 16
	$(LONG_RANGE) --tasks lookup-hops2 --attentions softmax flatten lisa lisa-t2 --layers 1 --max-iters 4000
	$(LONG_RANGE) --tasks pathfinder-seg --layers 1 --max-iters 4000
	$(LONG_RANGE) --tasks pathfinder-seg --attentions softmax flatten --layers 2 --max-iters 4000
	$(LONG_RANGE) --tasks pointer --attentions softmax flatten lisa lisa-global lisa-t2 --layers 1 --max-iters 8000
	$(LONG_RANGE) --tasks pointer --attentions softmax flatten lisa lisa-global lisa-t2 --layers 1 --max-iters 16000 --runs 16
	$(LONG_RANGE) --tasks pointer --attentions softmax flatten --layers 2 --max-iters 8000
