"""Does an attention carry information farther than one hop? The long-range probe sweep.

    python tools/long_range.py [--setting make|quick] [--tasks NAME ...] [--attentions NAME ...]
        [--layers 1 2] [--runs 8] [--lrs 1e-3 2e-3 4e-3] [--jobs 2] [--threads 1]
    python tools/long_range.py --from-rows docs/long_range_rows.jsonl [--markdown docs/long_range.md]

The protocol (paired runs: run ``r`` trains with seed ``r`` on the generator's draw ``r``; each
attention's lr chosen on development draws; reported runs on fresh draws) is in
``projects/lisa/long_range/sweep.py``; the report in ``projects/lisa/long_range/report.py``.
Rows go to ``<work-dir>/rows.jsonl`` (or ``--rows``) as runs finish; a second call skips the runs
already there, so a sweep resumes where it stopped (``make long-range`` keeps them in
``docs/long_range_rows.jsonl``). The document is written from the rows alone, with a stored note
(``--note``, by default ``<markdown>_note.md`` beside it: ``docs/long_range_note.md``) for what the rows
do not hold: when and where the runs ran, and the readings of the budget checks.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from projects.lisa.long_range import report, sweep  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--setting', choices=sorted(sweep.SETTINGS), default='make')
    parser.add_argument('--tasks', nargs='+', choices=sorted(sweep.TASKS), help="default: the setting's")
    parser.add_argument('--attentions', nargs='+', choices=tuple(report.LABELS),
                        help="these attentions at each depth (default: the setting's variants, per task)")
    parser.add_argument('--layers', nargs='+', type=int, help="keep these depths (default: the setting's, per task)")
    parser.add_argument('--runs', type=int, help="reported runs per variant (default: the setting's, per task)")
    parser.add_argument('--first-run', type=int, default=1000, help='seed and data draw of the first reported run')
    parser.add_argument('--lrs', nargs='+', type=float, help='learning-rate candidates (one: no choice)')
    parser.add_argument('--select-runs', type=int, help='development runs per candidate lr')
    parser.add_argument('--max-iters', type=int,
                        help="reported runs' training iterations (default: the config's, where the lr is chosen)")
    parser.add_argument('--threads', type=int, default=1, help='torch threads per training run')
    parser.add_argument('--jobs', type=int, default=1, help='training runs at a time (one process each)')
    parser.add_argument('--data-root', type=Path, default=ROOT / 'data' / 'long_range')
    parser.add_argument('--work-dir', type=Path, default=ROOT / 'work_dirs' / 'long_range')
    parser.add_argument('--markdown', type=Path, default=ROOT / 'docs' / 'long_range.md')
    parser.add_argument('--note', type=Path, help='markdown notes for the document: the machines, dates and load, '
                        'per task readings (default: <markdown>_note.md beside --markdown, where it exists)')
    parser.add_argument('--rows', type=Path, help='where the rows are kept and resumed from '
                        '(default: <work-dir>/rows.jsonl)')
    parser.add_argument('--from-rows', type=Path, nargs='+', help='only write the document from these stored rows')
    parser.add_argument('--generate-only', action='store_true', help="only write the reported runs' data draws")
    args = parser.parse_args(argv)
    if args.note is not None and not args.note.is_file():
        parser.error(f'--note {args.note}: no such file')
    setting = sweep.SETTINGS[args.setting]
    args.select_runs = setting.select_runs if args.select_runs is None else args.select_runs
    for name in ('runs', 'threads', 'jobs', 'max_iters', 'layers'):
        values = getattr(args, name)
        bad = [v for v in (values if isinstance(values, list) else [values]) if v is not None and v < 1]
        if bad:
            parser.error(f'--{name.replace("_", "-")} {bad[0]}: must be >= 1')
    if args.select_runs < 0 or (len(args.lrs or setting.lrs) > 1 and args.select_runs < 1):
        parser.error(f'--select-runs {args.select_runs}: choosing among several --lrs needs >= 1 run per lr')
    if any(lr <= 0 for lr in args.lrs or ()):
        parser.error(f'--lrs {" ".join(map(str, args.lrs))}: learning rates must be > 0')
    missing = [str(p) for p in args.from_rows or () if not p.is_file()]
    if missing:
        parser.error(f'--from-rows {" ".join(missing)}: no such file')
    unknown = sorted(set(args.tasks or ()) - set(setting.tasks))
    if unknown:
        parser.error(f'--tasks {" ".join(unknown)}: the {args.setting} setting has {" ".join(setting.tasks)}')
    return args


def plan(args: argparse.Namespace, phase: str, chosen: dict | None = None) -> list[dict]:
    return sweep.plan(sweep.SETTINGS[args.setting], phase, tasks=args.tasks, attentions=args.attentions,
                      layers=args.layers, lrs=args.lrs, select_runs=args.select_runs, runs=args.runs,
                      first_run=args.first_run, max_iters=args.max_iters, chosen=chosen)


def shown(path: Path) -> str:
    """``path`` as the document names it: relative to the repository where it lies inside it."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def write(rows: list[dict], rows_paths: list[Path], args: argparse.Namespace) -> dict[str, list[dict]]:
    """The document and its plot, headed by the command that writes them again from the stored rows and note."""
    beside = args.markdown.with_name(f'{args.markdown.stem}_note.md')
    note = args.note or beside
    command = ['python tools/long_range.py --from-rows', *map(shown, rows_paths)]
    if args.markdown.resolve() != (ROOT / 'docs' / 'long_range.md').resolve():
        command += ['--markdown', shown(args.markdown)]
    if note.resolve() != beside.resolve():
        command += ['--note', shown(note)]
    return sweep.write_document(rows, args.markdown, note.read_text() if note.is_file() else '',
                                f"`{' '.join(command)}` from the stored rows"
                                + (f' and `{shown(note)}`' if note.is_file() else ''))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.from_rows:
        write(sweep.read_rows(args.from_rows), args.from_rows, args)
        return
    setting = sweep.SETTINGS[args.setting]
    if args.generate_only:
        for item in plan(args, 'test'):
            print(sweep.data_for(item['task'], item['run'], args.data_root, *sweep.images(item['task'], setting)))
        return
    rows_path = args.rows or args.work_dir / 'rows.jsonl'
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    rows = sweep.read_rows([rows_path]) if rows_path.is_file() else []
    start = time.perf_counter()
    run = dict(setting=setting, data_root=args.data_root, work_dir=args.work_dir, jobs=args.jobs, threads=args.threads)
    selection = plan(args, 'select') if len(args.lrs or setting.lrs) > 1 else []
    sweep.execute(selection, rows, rows_path, **run)
    chosen = report.chosen_lrs(sweep.scored(rows)) if selection else {}  # one --lrs value: that lr
    sweep.execute(plan(args, 'test', chosen), rows, rows_path, **run)
    tasks = write(rows, [rows_path], args)
    print('\n'.join(report.findings(tasks)))
    print(f'This call: {(time.perf_counter() - start) / 60:.0f} min wall, {args.jobs} run(s) at a time, '
          f'{args.threads} thread(s) each.')


if __name__ == '__main__':
    main()
