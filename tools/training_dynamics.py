"""Does LiSA train as well as the attention it replaces? The training-dynamics study.

    python tools/training_dynamics.py [--datasets nuclei generated] [--phases select test longer ablate
        softmax-start] [--test-draws 6] [--dev-draws 2] [--lrs 1e-4 3e-4 1e-3] [--ablations ...] [--jobs 2]
        [--rows docs/training_dynamics_rows.jsonl] [--out docs/training_dynamics.md] [--from-rows]

Semantic FPN with PVT-T, FLatten-PVT-T and LiSA-PVT-T trained from scratch on a real image of cell nuclei
and on the project's generated ADE20K, paired by draw; the protocol is ``projects/lisa/dynamics/study.py``'s.
Every run is one ``tools/train.py`` process on ``--threads`` threads, ``--jobs`` at a time. Rows are appended
to ``--rows`` as runs end, and the same command resumes a stopped study. ``--from-rows`` only rewrites the
document. The nuclei image comes from the stardist wheel, which ``pip download`` fetches into
``<data>/wheels`` once (or pass ``--wheel``). The whole study is about 11 core-hours (5.5 h on 2 cores).
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from projects.lisa.dynamics import document
from projects.lisa.dynamics.draws import DATASETS, stardist_wheel
from projects.lisa.dynamics.study import ABLATIONS, LRS, PHASES, Plan, read_rows, run_study


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f'{value} must be >= 1')
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--datasets', nargs='+', choices=DATASETS, default=list(DATASETS))
    parser.add_argument('--phases', nargs='+', choices=PHASES, default=list(PHASES))
    parser.add_argument('--ablations', nargs='+', choices=list(ABLATIONS), default=list(ABLATIONS))
    parser.add_argument('--lrs', nargs='+', type=float, default=list(LRS), help='learning-rate candidates')
    parser.add_argument('--dev-draws', type=positive, default=2, help='development draws per lr candidate')
    parser.add_argument('--test-draws', type=positive, default=6, help='paired test draws per model')
    parser.add_argument('--iters', type=positive, default=200, help='iterations of a run (longer: twice)')
    parser.add_argument('--jobs', type=positive, default=2, help='runs at a time')
    parser.add_argument('--threads', type=positive, default=1, help='threads per run')
    parser.add_argument('--rows', type=Path, default=Path('docs/training_dynamics_rows.jsonl'))
    parser.add_argument('--out', type=Path, default=Path('docs/training_dynamics.md'))
    parser.add_argument('--note', type=Path, default=Path('docs/training_dynamics_note.md'),
                        help='the reading, markdown, placed after the findings (skipped when missing)')
    parser.add_argument('--data', type=Path, default=Path('data/dynamics'))
    parser.add_argument('--work-dir', type=Path, default=Path('work_dirs/training_dynamics'))
    parser.add_argument('--wheel', type=Path, help='the stardist wheel (default: downloaded into <data>/wheels)')
    parser.add_argument('--keep-checkpoints', action='store_true', help='keep each run\'s checkpoint')
    parser.add_argument('--from-rows', action='store_true', help='only write the document from --rows')
    args = parser.parse_args(argv)
    bad = [lr for lr in args.lrs if not lr > 0]
    if bad:
        parser.error(f'--lrs {bad}: learning rates must be > 0')
    if args.wheel is not None and not args.wheel.is_file():
        parser.error(f'--wheel {args.wheel}: no such file')
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.from_rows:
        rows = read_rows(args.rows)
        if not rows:
            sys.exit(f'--from-rows: {args.rows} holds no rows')
    else:
        wheel = args.wheel or (stardist_wheel(args.data / 'wheels') if 'nuclei' in args.datasets else None)
        plan = Plan(datasets=tuple(args.datasets), phases=tuple(args.phases), lrs=tuple(args.lrs),
                    dev_draws=args.dev_draws, test_draws=args.test_draws, iters=args.iters,
                    ablations=tuple(args.ablations))
        rows = run_study(plan, args.rows, args.data, args.work_dir, args.jobs, args.threads, wheel,
                         args.keep_checkpoints)
    note = args.note.read_text() if args.note.is_file() else ''
    command = 'python tools/training_dynamics.py ' + shlex.join(argv if argv is not None else sys.argv[1:])
    document.write_document(rows, args.out, command.strip(), note)


if __name__ == '__main__':
    main()
