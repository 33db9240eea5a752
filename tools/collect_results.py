"""Our results beside the paper's: every table the project reproduces, from the runs' own metric files.

    python tools/collect_results.py WORK_DIR... [--all | --found-only] [--json OUT.json] [--markdown OUT.md]
        [--tables 'Table 1' ...]

Searches each WORK_DIR for MMEngine work dirs (and ``tools/benchmark_model.py``'s
``benchmark_model.json`` for supp. Table 13), matches each run to its table row by the
name of the config it dumped, says how many runs it found, and prints the rows of Tables 1-8,
Fig. 3 and Table 13 that have a run as Markdown: the paper's value, ours (mean +- std over
several runs of a row, e.g. seeds) and the difference. ``--all`` prints every row, those
without a run reading ``missing``; ``--found-only`` every row of the tables that have a run.
The mapping from config names to rows and the paper's numbers are in
``projects/lisa/analysis/results.py``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from projects.lisa.analysis.paper import ROWS, TABLES, Row
from projects.lisa.analysis.results import (
    compare,
    find_benchmarks,
    find_runs,
    matches,
    rows_with_figures,
    table_13,
    to_json,
    to_markdown,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('work_dirs', nargs='+', type=Path, help='folders holding MMEngine work dirs')
    parser.add_argument('--tables', nargs='+', choices=list(TABLES), default=list(TABLES), metavar='TABLE',
                        help=f'tables to print (default: all of {", ".join(TABLES)})')
    rows = parser.add_mutually_exclusive_group()
    rows.add_argument('--all', action='store_true',
                      help="every row of every table, 'missing' where no run was found (default: the rows with runs)")
    rows.add_argument('--found-only', action='store_true', help='every row of the tables with at least one run')
    parser.add_argument('--json', type=Path, help='also write every entry to this JSON file')
    parser.add_argument('--markdown', type=Path, help='also write the tables to this Markdown file')
    args = parser.parse_args(argv)
    for path in args.work_dirs:
        if not path.is_dir():
            parser.error(f'work dir {path} does not exist')
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    runs = find_runs(args.work_dirs)
    entries = compare(runs) + table_13(find_benchmarks(args.work_dirs))
    found = {e.table for e in entries if e.ours is not None}
    entries = [e for e in entries if e.table in args.tables and (e.table in found or not args.found_only)]
    if not (args.all or args.found_only):
        entries = rows_with_figures(entries)
    print(f'{len(runs)} runs found under {", ".join(map(str, args.work_dirs))}; '
          f'{len({(e.table, e.row) for e in entries if e.ours is not None})} table rows with figures.')
    for run in runs:
        if not any(matches(row, run) for row in ROWS if isinstance(row, Row)):
            print(f'not a row of the paper\'s tables: {run.work_dir} (config {run.config})')
    text = to_markdown(entries)
    print(text)
    for path, content in ((args.markdown, text), (args.json, to_json(entries))):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content + '\n')
            print(f'written: {path}')


if __name__ == '__main__':
    main()
