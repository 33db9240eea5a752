"""Latency and memory of DeiT-T with softmax, FLatten and LiSA attention (LiSA supp. Table 13).

The model is the project's DeiT-T (``LiSAViT``, arch ``deit-tiny``, patch 16,
12 layers, C = 192, 3 heads) with the attention of the DeiT-T configs in every
layer, built at each input size (its position tables at that grid), batch 1,
no drop path. At an input of S x S it sees ``1 + (S/16)^2`` tokens: 197 at 224,
16,385 at 2048. For every attention and size it measures

* ``fwd``: latency of the forward pass (``torch.no_grad``);
* ``train``: latency of a training step (forward, backward of the sum of the
  class-token output into every parameter);
* ``saved``: bytes autograd keeps for the backward of that step (distinct
  storages, parameters and input excluded; ``projects.lisa.analysis.benchmark``),
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

Needs torch, mmengine and mmcv (``LiSAViT`` is built from their bricks) and
matplotlib for the plot. Runs on the CPU and on CUDA (``--device``).

Example::

    python tools/benchmark_model.py --img-sizes 224 448 896 1344 2048 --out work_dirs/benchmark_model
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from torch import nn

from projects.lisa.analysis.benchmark import (
    cuda_peak_bytes,
    keep_freed_memory,
    loglog_plot,
    median_seconds,
    saved_tensor_bytes,
)
from projects.lisa.models.attention import local
from projects.lisa.models.backbones.vit import LiSAViT

# The attention of configs/classification/deit-tiny_{softmax,flatten,lisa}_8xb128_in1k.py.
ATTENTIONS = {
    'softmax': dict(type='softmax'),
    'flatten': dict(type='flatten'),
    'lisa': dict(type='lisa', num_steps=3),
}
# LiSA supp. Table 13 (GPU and batch not stated): tokens -> attention -> (latency ms, peak memory MB).
PAPER = {
    197: {'softmax': (3.50, None), 'flatten': (7.15, None), 'lisa': (13.53, None)},
    16385: {'softmax': (898.92, 50281.7), 'flatten': (91.84, 1605.2), 'lisa': (161.71, 3409.1)},
}
PATCH = 16
MiB = 2 ** 20


def build_model(attention: str, img_size: int, device: torch.device) -> nn.Module:
    torch.manual_seed(0)
    model = LiSAViT(arch='deit-tiny', pretrain_img_size=img_size, patch_size=PATCH, attn_cfgs=ATTENTIONS[attention],
                    drop_path_rate=0.0)
    return model.to(device).train()


class Bench:
    """One DeiT-T at one input size: its training step, forward pass and memory."""

    def __init__(self, attention: str, img_size: int, device: torch.device) -> None:
        self.model = build_model(attention, img_size, device)
        self.x = torch.randn(1, 3, img_size, img_size, device=device)

    def loss(self) -> torch.Tensor:
        return self.model(self.x)[0].sum()

    def train_step(self) -> None:
        self.model.zero_grad(set_to_none=True)
        self.loss().backward()

    def forward(self) -> None:
        with torch.no_grad():
            self.model(self.x)

    def saved_bytes(self) -> int:
        return saved_tensor_bytes(self.loss, exclude=[*self.model.parameters(), self.x])


def measure(img_size: int, args, device: torch.device) -> list[dict]:
    """Rows of every attention at one size; their runs take turns (see ``median_seconds``)."""
    benches = {a: Bench(a, img_size, device) for a in args.attentions}
    rows = {a: {'attention': a, 'img_size': img_size, 'tokens': 1 + (img_size // PATCH) ** 2}
            for a in args.attentions}
    for a, bench in benches.items():
        rows[a]['saved'] = bench.saved_bytes()  # also the first warm-up run
    timing = dict(warmup=args.warmup - 1, repeats=args.repeats, budget_s=args.budget)
    train = median_seconds({a: b.train_step for a, b in benches.items()}, device, **timing)
    forward = median_seconds({a: b.forward for a, b in benches.items()}, device, **timing)
    for a, bench in benches.items():
        rows[a].update(train_ms=1e3 * train[a], fwd_ms=1e3 * forward[a])
        if device.type == 'cuda':
            rows[a]['peak'] = cuda_peak_bytes(bench.train_step, device)
    return list(rows.values())


def table(rows: list[dict]) -> str:
    """Markdown table with the ratios to FLatten at the same size and the paper's figures."""
    memory = 'peak' if any('peak' in r for r in rows) else 'saved'
    flatten = {r['tokens']: r for r in rows if r['attention'] == 'flatten'}
    lines = [
        f'| attention | input | tokens | fwd ms | train ms | saved MiB |{" peak MiB |" if memory == "peak" else ""}'
        f' train / FLatten | {memory} / FLatten | paper ms | paper MB | paper ms / FLatten | paper MB / FLatten |',
    ]
    lines.append('|' + '---|' * (lines[0].count('|') - 1))
    for r in sorted(rows, key=lambda r: (r['tokens'], list(ATTENTIONS).index(r['attention']))):
        ref = flatten.get(r['tokens'])
        paper = PAPER.get(r['tokens'], {})
        ms, mb = paper.get(r['attention'], (None, None))
        fl_ms, fl_mb = paper.get('flatten', (None, None))
        cells = [r['attention'], f"{r['img_size']}²", f"{r['tokens']:,}", f"{r['fwd_ms']:.1f}",
                 f"{r['train_ms']:.1f}", f"{r['saved'] / MiB:.1f}"]
        if memory == 'peak':
            cells.append(f"{r['peak'] / MiB:.1f}")
        cells += [f"{r['train_ms'] / ref['train_ms']:.2f}x" if ref else '-',
                  f"{r[memory] / ref[memory]:.2f}x" if ref else '-',
                  f'{ms:,}' if ms else '-', f'{mb:,}' if mb else '-',
                  f'{ms / fl_ms:.2f}x' if ms else '-', f'{mb / fl_mb:.2f}x' if mb else '-']
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


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
    args = parser.parse_args(argv)
    if args.device == 'auto':
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if args.device not in ('cpu', 'cuda') or (args.device == 'cuda' and not torch.cuda.is_available()):
        parser.error(f"--device={args.device!r} must be 'cpu', 'auto', or 'cuda' on a machine with CUDA")
    for size in args.img_sizes:
        if size < PATCH or size % PATCH:
            parser.error(f'--img-sizes: {size} is not a positive multiple of the patch size {PATCH}')
    for name in ('warmup', 'repeats', 'threads'):
        if getattr(args, name) < 1:
            parser.error(f'--{name}={getattr(args, name)} must be >= 1')
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == 'cpu' and not args.glibc_malloc:
        keep_freed_memory()
    device_name = torch.cuda.get_device_name(device) if device.type == 'cuda' else f'CPU, {args.threads} threads'
    title = (f'DeiT-T, batch 1; {device_name}; torch {torch.__version__}; '
             f'median of up to {args.repeats} runs after {args.warmup} warm-up (the memory run first); '
             f'LiSA local branch: {local.implementation(device.type)}')
    print(title, flush=True)
    rows = []
    for size in args.img_sizes:
        for row in measure(size, args, device):
            rows.append(row)
            print(f"  {row['attention']:8s} {size:5d}² ({row['tokens']:6d} tokens): fwd {row['fwd_ms']:.1f} ms, "
                  f"train {row['train_ms']:.1f} ms, saved {row['saved'] / MiB:.1f} MiB"
                  + (f", peak {row['peak'] / MiB:.1f} MiB" if 'peak' in row else ''), flush=True)
    report = table(rows)
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / 'benchmark_model.json').write_text(json.dumps({'setting': title, 'rows': rows}, indent=1))
    (args.out / 'benchmark_model.md').write_text(title + '\n\n' + report + '\n')
    loglog_plot(rows, 'attention', 'tokens', {'train_ms': 'train step', 'fwd_ms': 'forward'},
                {'saved': 'saved', 'peak': 'peak'}, args.out / 'benchmark_model.png', title,
                'memory of a training step (MiB)')
    print(f'saved {args.out}/benchmark_model.{{png,json,md}}')


if __name__ == '__main__':
    main()
