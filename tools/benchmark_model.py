"""Latency and memory of DeiT-T (LiSA supp. Table 13) and speed of the dense models (Table 3).

**DeiT-T** (default) with softmax, FLatten and LiSA attention.
The model is DeiT-T (patch 16, 12 layers, C = 192, 3 heads) with the
attention of the DeiT-T configs in every layer, built with torch alone
(``projects.lisa.benchmarks.deit``: the forward pass of ``LiSAViT``) at each input
size (its position tables at that grid), batch 1, no drop path. At an
input of S x S it sees ``1 + (S/16)^2`` tokens: 197 at 224, 16,385 at 2048. For every attention and size it measures

* ``fwd``: latency of the forward pass (``torch.no_grad``);
* ``train``: latency of a training step (forward, backward of the sum of the
  class-token output into every parameter);
* ``saved``: bytes autograd keeps for the backward of that step (distinct
  storages, parameters and input excluded; ``projects.lisa.benchmarks.timing``),
  on every device; on CUDA also ``peak``: ``torch.cuda.max_memory_allocated``
  during the step above what was allocated before it.

The first run of each model is the memory run; each latency is then the
median of ``--repeats`` runs after ``--warmup - 1`` further untimed runs,
stopping early once a measurement's timed runs took ``--budget`` seconds.
All attentions of one size run in one process and take turns run by run, so
a change of the machine's load hits them alike and the ratios to FLatten
compare like with like. On the CPU glibc's malloc keeps freed memory for
reuse, as CUDA's caching allocator does (``--glibc-malloc`` turns this off).
The table, a JSON file and a log-log plot of latency
and memory against the token count are written to ``--out``.

**Dense models** (``--dense``): the parts of the Table 3 segmentation
models that the attention changes, built from their configs with random
weights: backbone + neck of Semantic FPN with PVT-T, FLatten-PVT-T and
LiSA-PVT-T, and the backbone of UperNet with Swin-T, FLatten-Swin-T and
LiSA-Swin-T. Per model, wall time and process CPU time of

* a training step at ``--train-size`` (512 x 512, the paper's crop): forward,
  backward of the sum of every output into every parameter;
* inference at ``--infer-size`` (512 x 2048, ADE20K's test scale): forward
  under ``torch.no_grad`` in eval mode.

The three models of a family take turns run by run (so ratios stay fair on
a shared machine); the table gives each time and its ratios to the softmax
model and to FLatten of the same family, ``CPU / wall``. How fast a model runs
also depends on where its buffers land in memory, which is fixed for the life
of a process: one model's time can move by far more from one process to the
next than between the runs of one process. With
``--processes N`` the measurement runs in N fresh interpreters one after
another; each time is then the median over the processes and each ratio the
median of the processes' own ratios, with their range. A second table gives
each model's counted FLOPs (this project's counter, ``tools/get_flops.py``:
one multiply-add = one FLOP) for the forward at both inputs and their
ratios: the speed the FLOPs allow, beside the speed measured.

What it measures is ``projects.lisa.benchmarks.model``; this tool parses the options,
prints and writes the results. DeiT-T needs torch alone (and matplotlib for the plot); ``--dense`` needs
mmengine, mmcv and mmseg. Runs on the CPU and on
CUDA (``--device``). ``--markdown PATH`` also writes the table to PATH.

Examples::

    python tools/benchmark_model.py --img-sizes 224 448 896 1344 2048 --out work_dirs/benchmark_model
    python tools/benchmark_model.py --dense --markdown work_dirs/dense.md
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from projects.lisa.benchmarks.model import (
    ATTENTIONS,
    DENSE,
    PATCH,
    add_dense_flops,
    dense_table,
    measure_families,
    measure_sizes,
    merge_processes,
    table,
    write_results,
)
from projects.lisa.benchmarks.timing import keep_freed_memory, loglog_plot
from projects.lisa.models.attention import ops

CONFIGS = Path(__file__).resolve().parents[1] / 'configs'  # the configs of the paper's models


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--img-sizes', type=int, nargs='+', default=[224, 448, 896, 1344, 2048],
                        help=f'square input sizes, multiples of {PATCH} (224: 197 tokens, 2048: 16,385)')
    parser.add_argument('--attentions', nargs='+', default=list(ATTENTIONS), choices=list(ATTENTIONS))
    parser.add_argument('--device', default='auto', help="'cpu', 'cuda' or 'auto' (cuda when available)")
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--budget', type=float, default=60.0,
                        help='stop repeating a measurement after its runs took this many seconds')
    parser.add_argument('--threads', type=int, default=len(os.sched_getaffinity(0)),
                        help='torch CPU threads (default: the cores available)')
    parser.add_argument('--out', type=Path, default=Path('work_dirs/benchmark_model'))
    parser.add_argument('--glibc-malloc', action='store_true',
                        help="time with glibc's default malloc (fresh mmap for every block >= 32 MiB)")
    parser.add_argument('--markdown', type=Path, help='also write the markdown table to this file')
    dense = parser.add_argument_group('dense models (--dense)')
    dense.add_argument('--dense', action='store_true',
                       help='time the Table 3 segmentation backbones (+ FPN neck) instead of DeiT-T')
    dense.add_argument('--families', nargs='+', default=list(DENSE), choices=list(DENSE))
    dense.add_argument('--train-size', type=int, nargs=2, default=[512, 512], metavar=('H', 'W'))
    dense.add_argument('--infer-size', type=int, nargs=2, default=[512, 2048], metavar=('H', 'W'))
    dense.add_argument('--batch', type=int, default=1, help='images per training step')
    dense.add_argument('--processes', type=int, default=1,
                       help='measure in this many fresh interpreters, one after another (see above)')
    dense.add_argument('--no-flops', action='store_true',
                       help='leave out the FLOP count (the processes of --processes N do: their parent counts)')
    args = parser.parse_args(argv)
    if args.device == 'auto':
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if args.device not in ('cpu', 'cuda') or (args.device == 'cuda' and not torch.cuda.is_available()):
        parser.error(f"--device={args.device!r} must be 'cpu', 'auto', or 'cuda' on a machine with CUDA")
    for size in args.img_sizes:
        if size < PATCH or size % PATCH:
            parser.error(f'--img-sizes: {size} is not a positive multiple of the patch size {PATCH}')
    for name in ('warmup', 'repeats', 'threads', 'batch', 'processes'):
        if getattr(args, name) < 1:
            parser.error(f'--{name}={getattr(args, name)} must be >= 1')
    for name in ('train_size', 'infer_size'):
        if min(getattr(args, name)) < 32:
            parser.error(f'--{name.replace("_", "-")}={getattr(args, name)}: both sides must be >= 32 '
                         '(the output stride of the backbones)')
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == 'cpu' and not args.glibc_malloc:
        keep_freed_memory()
    device_name = torch.cuda.get_device_name(device) if device.type == 'cuda' else f'CPU, {args.threads} threads'
    if args.dense:
        dense_main(args, device, device_name)
        return
    title = (f'DeiT-T, batch 1; {device_name}; torch {torch.__version__}; '
             f'median of up to {args.repeats} runs after {args.warmup} warm-up (the memory run first); '
             f'LiSA operators: backend {ops.resolve(None, torch.empty(0, device=device))!r}')
    print(title, flush=True)
    rows = measure_sizes(args.img_sizes, args.attentions, device, args.warmup - 1, args.repeats, args.budget)
    report = table(rows)
    print(report)
    write_results(args.out, 'benchmark_model', title, rows, report, args.markdown)
    loglog_plot(rows, 'attention', 'tokens', {'train_ms': 'train step', 'fwd_ms': 'forward'},
                {'saved': 'saved', 'peak': 'peak'}, args.out / 'benchmark_model.png', title,
                'memory of a training step (MiB)')
    print(f'saved {args.out}/benchmark_model.{{png,json,md}}')


def measure_in_processes(args) -> list[list[dict]]:
    """The rows of ``--processes`` fresh interpreters running this tool, one after another."""
    runs = []
    for i in range(args.processes):
        out = args.out / f'process{i}'
        argv = ['--dense', '--families', *args.families, '--train-size', *map(str, args.train_size),
                '--infer-size', *map(str, args.infer_size), '--batch', str(args.batch), '--warmup', str(args.warmup),
                '--repeats', str(args.repeats), '--budget', str(args.budget), '--threads', str(args.threads),
                '--device', args.device, '--out', str(out), '--no-flops']
        argv += ['--glibc-malloc'] if args.glibc_malloc else []
        print(f'process {i + 1} of {args.processes}', flush=True)
        subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], check=True)
        runs.append(json.loads((out / 'benchmark_dense.json').read_text())['rows'])
    return runs


def dense_main(args, device: torch.device, device_name: str) -> None:
    title = (f'Dense models, random weights, training batch {args.batch}; {device_name}; torch {torch.__version__}; '
             f'median of up to {args.repeats} runs after {args.warmup} warm-up, models taking turns; '
             f'LiSA operators: backend {ops.resolve(None, torch.empty(0, device=device))!r}; '
             f'load {os.getloadavg()[0]:.2f}')
    if args.processes > 1:
        title += (f'; {args.processes} processes one after another: times the median over the processes, '
                  "ratios the median (range) of the processes' ratios")
    print(title, flush=True)
    if args.processes > 1:
        rows = merge_processes(measure_in_processes(args))
    else:
        rows = measure_families(args.families, CONFIGS, device, args.batch, args.train_size, args.infer_size,
                                args.warmup, args.repeats, args.budget)
    if not args.no_flops:
        add_dense_flops(rows, CONFIGS, args.train_size, args.infer_size)
    report = (dense_table(rows, args.train_size, args.infer_size)
              + f'\n\nload average at the end: {os.getloadavg()[0]:.2f}')
    print(report)
    write_results(args.out, 'benchmark_dense', title, rows, report, args.markdown)
    print(f'saved {args.out}/benchmark_dense.{{json,md}}')


if __name__ == '__main__':
    main()
