"""The dense models from 512² to 4096²: time, peak memory and counted FLOPs, eager and onnxruntime.

Semantic FPN with PVT-T, FLatten-PVT-T and LiSA-PVT-T (the whole model: backbone, neck and head) and
the UperNet backbones Swin-T, FLatten-Swin-T and LiSA-Swin-T, random weights, one square image per
size (``--sizes``), on the CPU:

* inference time, eager PyTorch and onnxruntime (each model exported once, sizes dynamic), on 1
  thread and on all cores (``--threads``); the models of a family take turns in one process;
* peak memory of one inference (the growth of the resident set in a fresh process) under a data
  limit, so a size the machine cannot hold is reported with the allocation that failed;
* counted FLOPs of the forward (the paper's convention);
* a training step (batch 1) at ``--train-size`` with and without ``with_cp=True``;
* where the time goes: the PVT family's eager inference on 1 thread at ``--profile-size`` under
  ``torch.profiler``, by operator, and each model's speed per counted FLOP in its softmax attention and
  in the rest of the model; onnxruntime's node profile of the exports at ``--ort-profile-size``.

Every measurement is appended to ``OUT/rows.jsonl`` as it is taken: run the same command again and
it goes on where it stopped. The report (``OUT/performance.md``, and ``--markdown PATH``) gives the
ratios to the softmax model beside the FLOPs ratios, the memory growth per 4x pixels and a log-log
plot (``OUT/performance.png``, copied beside ``--markdown``). ``--from-rows`` only rewrites the
report. What it measures is ``projects.lisa.benchmarks.resolution``.

Examples::

    python tools/benchmark_resolution.py --markdown docs/performance.md
    python tools/benchmark_resolution.py --sizes 256 512 --threads 1 --train-size 256 --out work_dirs/res
"""
from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import sys
from pathlib import Path

import torch

from projects.lisa.benchmarks.resolution import FAMILIES, SIZES, load_rows, plot, report, sweep

CONFIGS = Path(__file__).resolve().parents[1] / 'configs'


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--sizes', type=int, nargs='+', default=list(SIZES), help='square image sides (pixels)')
    parser.add_argument('--families', nargs='+', default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument('--device', default='cpu', choices=('cpu', 'cuda'),
                        help="'cuda': eager PyTorch on the GPU (the operators' torch backend) instead of the CPU")
    parser.add_argument('--backends', nargs='+', choices=('eager', 'onnxruntime'),
                        help='on the CPU (default: both); on CUDA eager alone')
    cores = len(os.sched_getaffinity(0))
    parser.add_argument('--threads', type=int, nargs='+', default=sorted({1, cores}),
                        help=f'thread counts of the inference times (default: 1 and all {cores} cores)')
    parser.add_argument('--train-size', type=int, default=1024, help='side of the training step (0: none)')
    parser.add_argument('--profile-size', type=int, default=2048,
                        help='profile the PVT family at this side, eager on 1 thread, beside its FLOPs (0: no)')
    parser.add_argument('--ort-profile-size', type=int, default=512,
                        help="onnxruntime's node profile of the PVT family's exports at this side, 1 thread (0: no)")
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--budget', type=float, default=40.0,
                        help="stop timing a model at a size once its timed runs took this many seconds")
    parser.add_argument('--memory-limit', type=float, default=None,
                        help='GiB of data one measured step may add (default: 90 %% of the memory available)')
    parser.add_argument('--out', type=Path, default=Path('work_dirs/benchmark_resolution'))
    parser.add_argument('--markdown', type=Path, help='also write the report here (the plot beside it)')
    parser.add_argument('--from-rows', action='store_true', help='measure nothing: write the report of OUT/rows.jsonl')
    args = parser.parse_args(argv)
    for size in args.sizes + [s for s in (args.train_size, args.profile_size, args.ort_profile_size) if s]:
        if size < 64 or size % 32:
            parser.error(f'size {size}: must be a multiple of 32 and >= 64 (the backbones\' output stride is 32)')
    for n in args.threads:
        if not 1 <= n <= cores:
            parser.error(f'--threads {n}: must be between 1 and the {cores} cores available')
    for name in ('warmup', 'repeats'):
        if getattr(args, name) < (0 if name == 'warmup' else 1):
            parser.error(f'--{name}={getattr(args, name)} is too small')
    if args.memory_limit is not None and args.memory_limit <= 0:
        parser.error(f'--memory-limit={args.memory_limit} must be > 0 GiB')
    if args.device == 'cuda':
        if args.backends not in (None, ['eager']):
            parser.error(f'--backends {" ".join(args.backends)}: on --device cuda only eager runs')
        if not torch.cuda.is_available():
            parser.error('--device cuda: torch sees no CUDA device')
        args.backends = ['cuda']
    args.backends = args.backends or ['eager', 'onnxruntime']
    if args.from_rows and not (args.out / 'rows.jsonl').exists():
        parser.error(f'--from-rows: {args.out / "rows.jsonl"} does not exist')
    return args


def machine() -> str:
    cpu = next((line.split(':', 1)[1].strip() for line in open('/proc/cpuinfo') if line.startswith('model name')),
               platform.processor())
    return f'{cpu}, {len(os.sched_getaffinity(0))} cores'


def main(argv=None) -> None:
    args = parse_args(argv)
    command = 'python tools/benchmark_resolution.py ' + shlex.join(sys.argv[1:] if argv is None else argv)
    if not args.from_rows:
        start = os.getloadavg()[0]
        rows = sweep(args.out, CONFIGS, args.families, args.sizes, args.backends, args.threads,
                     args.train_size or None, args.warmup, args.repeats, args.budget,
                     int(args.memory_limit * 2 ** 30) if args.memory_limit else None, args.profile_size or None,
                     args.ort_profile_size or None)
        print(f'load average at the start {start:.2f}, at the end {os.getloadavg()[0]:.2f}')
    rows = load_rows(args.out / 'rows.jsonl')
    times = [r for r in rows if r['kind'] == 'time']
    where = torch.cuda.get_device_name() if args.device == 'cuda' else machine()
    if 'onnxruntime' in args.backends:
        import onnxruntime

        where += f', onnxruntime {onnxruntime.__version__}'
    setting = (f"{where}; torch {torch.__version__}; random weights; "
               f"median of up to {max((r['repeats'] for r in times), default=0)} timed runs after "
               f"{max((r['warmup'] for r in times), default=0)} warm-up, at most "
               f"{max((r['budget_s'] for r in times), default=0):.0f} s of timed runs per model and size; "
               f"1-minute load average {min((r['load_start'] for r in times), default=0):.2f}–"
               f"{max((r['load_end'] for r in times), default=0):.2f} over the timing processes")
    name = 'performance.png'
    on = 'CUDA' if args.device == 'cuda' else '1 thread'
    plot(rows, args.out / name, f'inference: wall time ({on}) and peak memory against pixels '
         '(S-FPN PVT family: whole model; Swin family: UperNet backbone)')
    text = report(rows, setting, command, name)
    (args.out / 'performance.md').write_text(text)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
        if (args.markdown.parent / name).resolve() != (args.out / name).resolve():  # --markdown inside --out
            shutil.copyfile(args.out / name, args.markdown.parent / name)
    print(text)


if __name__ == '__main__':
    main()
