"""Latency and memory of softmax, linear, FLatten and LiSA attention versus token count.

The setting of LiSA's supplementary Table 13: one DeiT-T attention layer
(C = 192, 3 heads, batch 1) at N = 197 (class token + 14x14) up to
65,536 (256x256) tokens. For every method and N it measures

* forward latency (under ``torch.no_grad``) and forward+backward latency
  (gradients of the input and all parameters): median over ``--repeats``
  after ``--warmup`` runs, the methods taking turns run by run, with as
  many threads as cores by default. On the
  CPU, glibc's malloc is told to keep freed memory (:func:`keep_freed_memory`),
  as CUDA's caching allocator does; ``--clock cpu`` with ``--threads 1``
  gives process CPU time, which other jobs on shared cores barely disturb;
* memory of one forward+backward:
  - ``saved``: bytes saved for backward, recorded with
    ``torch.autograd.graph.saved_tensors_hooks``; each distinct storage is
    counted once (views share it), the parameters and the input are not
    counted (they exist anyway);
  - ``peak``: on CUDA ``torch.cuda.max_memory_allocated`` above what was
    allocated before the step; on the CPU the growth of the peak resident
    set size (``VmHWM`` of ``/proc/self/status``, reset through
    ``/proc/self/clear_refs``) in a fresh subprocess per measurement, with
    glibc's mmap threshold fixed at 64 KiB so that freed tensors go back to
    the OS instead of staying in the heap (otherwise the first warm-up
    run's pages are reused and the peak is undercounted).

What it measures is ``projects.lisa.benchmarks.attention``; this tool parses the
options and writes the results. It prints a table with the ratios to FLatten measured in the same run and
saves ``attention_benchmark.png`` (log-log latency and memory versus N) and
``attention_benchmark.json`` under ``--out``.

Example::

    python tools/benchmark_attention.py --sizes 197 1024 4096 16385 65536 --out work_dirs/bench
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from projects.lisa.benchmarks.attention import METHODS, grid_of, markdown, run, table
from projects.lisa.benchmarks.timing import keep_freed_memory, loglog_plot
from projects.lisa.models.attention import ops


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--device', default='auto', help="'cpu', 'cuda' or 'auto' (cuda when available)")
    parser.add_argument('--sizes', type=int, nargs='+', default=[197, 1024, 4096, 16385, 65536],
                        help='token counts: square numbers, or 1 + a square (class token)')
    parser.add_argument('--methods', nargs='+', default=list(METHODS), choices=METHODS)
    parser.add_argument('--dim', type=int, default=192)
    parser.add_argument('--heads', type=int, default=3)
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=7)
    parser.add_argument('--budget', type=float, default=20.0,
                        help='stop repeating a measurement after this many seconds (at least one run)')
    parser.add_argument('--softmax-max-tokens', type=int, default=None,
                        help='skip softmax above this N (default: 16385 on the CPU, no limit on CUDA)')
    parser.add_argument('--threads', type=int, nargs='+', default=[len(os.sched_getaffinity(0))],
                        help='thread counts, each measured in turn (default: the cores available)')
    parser.add_argument('--clock', choices=('wall', 'cpu'), default='wall',
                        help="'cpu': process CPU time instead of wall time; with --threads 1 it is "
                             'insensitive to other jobs sharing the cores (not for CUDA)')
    parser.add_argument('--out', type=Path, default=Path('work_dirs/benchmark_attention'))
    parser.add_argument('--markdown', type=Path, help='also write the table as a markdown document, '
                        'e.g. docs/operator.md')
    parser.add_argument('--backend', default='auto', choices=ops.CHOICES,
                        help="the operators' backend of FLatten and LiSA: 'auto' (the CPU kernels where built), "
                             "'torch' (the custom ops in tensor operations, what a GPU runs) or 'reference'")
    parser.add_argument('--glibc-malloc', action='store_true',
                        help="time with glibc's default malloc (fresh mmap for every block >= 32 MiB)")
    args = parser.parse_args(argv)
    if args.device == 'auto':
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if args.device not in ('cpu', 'cuda'):
        parser.error(f"--device={args.device!r} must be 'cpu', 'cuda' or 'auto'")
    for name, least in (('warmup', 0), ('repeats', 1), ('dim', 1), ('heads', 1), ('batch', 1)):
        if getattr(args, name) < least:
            parser.error(f'--{name}={getattr(args, name)} must be >= {least}')
    for n in args.threads:
        if n < 1:
            parser.error(f'--threads={n} must be >= 1')
    if args.clock == 'cpu' and args.device == 'cuda':
        parser.error("--clock cpu measures host CPU time; use --clock wall with --device cuda")
    if args.softmax_max_tokens is None:
        args.softmax_max_tokens = 16385 if args.device == 'cpu' else sys.maxsize
    for n in args.sizes:
        try:
            grid_of(n)
        except ValueError as e:
            parser.error(str(e))
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.device == 'cpu' and not args.glibc_malloc:
        keep_freed_memory()
    threads = ' and '.join(map(str, args.threads))
    device = torch.cuda.get_device_name() if args.device == 'cuda' else f'CPU, {threads} threads'
    title = (f'C={args.dim}, {args.heads} heads, batch {args.batch}; {device}; torch {torch.__version__}; '
             f'{args.clock} time, median of {args.repeats} after {args.warmup} warm-up; '
             f'LiSA operators: backend {ops.resolve(args.backend, torch.empty(0, device=args.device))!r}; '
             f'load {os.getloadavg()[0]:.2f} at the start')
    print(title, flush=True)
    rows, reports = [], []
    for n in args.threads:
        torch.set_num_threads(n)
        found = run(args.sizes, args.methods, torch.device(args.device), dim=args.dim, num_heads=args.heads,
                    batch=args.batch, threads=n, warmup=args.warmup, repeats=args.repeats,
                    budget_s=args.budget, clock=args.clock, softmax_max_tokens=args.softmax_max_tokens,
                    backend=args.backend)
        rows += found
        reports.append((f'{n} threads:\n' if len(args.threads) > 1 else '') + table(found))
    end = f'load average at the end: {os.getloadavg()[0]:.2f}'
    report = '\n'.join(reports) + '\n' + end
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / 'attention_benchmark.json').write_text(json.dumps({'setting': title, 'rows': rows}, indent=1))
    (args.out / 'attention_benchmark.txt').write_text(title + '\n' + report + '\n')
    first = [r for r in rows if r['threads'] == args.threads[0]]
    loglog_plot(first, 'method', 'N', {'fwd_bwd_ms': 'fwd+bwd', 'fwd_ms': 'fwd'},
                {'saved': 'saved', 'peak': 'peak'}, args.out / 'attention_benchmark.png',
                title.replace(f'{threads} threads', f'{args.threads[0]} threads'))
    print(f'saved {args.out}/attention_benchmark.{{png,json,txt}}')
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        command = 'python tools/benchmark_attention.py ' + ' '.join(sys.argv[1:] if argv is None else argv)
        args.markdown.write_text(markdown(rows, f'{title}; {end}', command.strip()))
        print(f'wrote {args.markdown}')


if __name__ == '__main__':
    main()
