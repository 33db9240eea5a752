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

It prints a table with the ratios to FLatten measured in the same run and
saves ``attention_benchmark.png`` (log-log latency and memory versus N) and
``attention_benchmark.json`` under ``--out``.

Example::

    python tools/benchmark_attention.py --sizes 197 1024 4096 16385 65536 --out work_dirs/bench
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import time
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
from projects.lisa.models.attention import build_attention, local

METHODS = ('softmax', 'linear', 'flatten', 'lisa')
MALLOC_ENV = {'MALLOC_MMAP_THRESHOLD_': '65536', 'MALLOC_TRIM_THRESHOLD_': '0'}


def grid_of(n: int) -> tuple[tuple[int, int], int]:
    """``((H, W), prefix)`` for a square grid of ``n`` or ``n - 1`` (class token) tokens."""
    for prefix in (0, 1):
        side = math.isqrt(n - prefix)
        if side * side == n - prefix:
            return (side, side), prefix
    raise ValueError(f'N={n} is neither a square number nor 1 + a square number')


def build(method: str, n: int, dim: int, num_heads: int) -> nn.Module:
    """The layer of Table 13; FLatten and LiSA with their positional encoding at this grid."""
    hw_shape, prefix = grid_of(n)
    cfg = {
        'softmax': dict(type='softmax'),
        'linear': dict(type='linear'),
        'flatten': dict(type='flatten', pos_shape=hw_shape),
        'lisa': dict(type='lisa', num_steps=3, step_weights='adaptive', use_local=True, pos_shape=hw_shape),
    }[method]
    return build_attention(cfg, dim=dim, num_heads=num_heads, num_prefix_tokens=prefix)


def step(m: nn.Module, x: torch.Tensor, hw_shape, backward: bool) -> None:
    if not backward:
        with torch.no_grad():
            m(x, hw_shape)
        return
    m.zero_grad(set_to_none=True)
    x.grad = None
    m(x, hw_shape).sum().backward()


def saved_bytes(m: nn.Module, x: torch.Tensor, hw_shape) -> int:
    """Bytes of the distinct storages autograd keeps for backward (parameters and input excluded)."""
    m.zero_grad(set_to_none=True)
    return saved_tensor_bytes(lambda: m(x, hw_shape), exclude=[*m.parameters(), x])


def vm_kib(field: str) -> int:
    with open('/proc/self/status') as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ':'))


def peak_bytes(m: nn.Module, x: torch.Tensor, hw_shape) -> int:
    """Peak memory of one forward+backward above the memory in use before it."""
    step(m, x, hw_shape, backward=True)  # warm-up: one-time buffers, gradients allocated
    m.zero_grad(set_to_none=True)
    x.grad = None
    if x.device.type == 'cuda':
        return cuda_peak_bytes(functools.partial(step, m, x, hw_shape, True), x.device)
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')  # reset VmHWM to the current resident size
    before = vm_kib('VmRSS')
    step(m, x, hw_shape, backward=True)
    return (vm_kib('VmHWM') - before) * 1024


def setup(method: str, n: int, args, device: torch.device):
    torch.manual_seed(0)
    m = build(method, n, args.dim, args.heads).to(device)
    x = torch.randn(args.batch, n, args.dim, device=device, requires_grad=True)
    return m, x, grid_of(n)[0]


def memory_worker(method: str, n: int, args) -> None:
    """Subprocess entry: print the JSON of ``saved`` and ``peak`` bytes for one method and N."""
    torch.set_num_threads(args.threads)
    m, x, hw_shape = setup(method, n, args, torch.device('cpu'))
    print(json.dumps({'saved': saved_bytes(m, x, hw_shape), 'peak': peak_bytes(m, x, hw_shape)}))


def memory(method: str, n: int, args, device: torch.device) -> dict:
    if device.type == 'cuda':
        m, x, hw_shape = setup(method, n, args, device)
        return {'saved': saved_bytes(m, x, hw_shape), 'peak': peak_bytes(m, x, hw_shape)}
    cmd = [sys.executable, __file__, '--memory-worker', method, str(n), '--dim', str(args.dim),
           '--heads', str(args.heads), '--batch', str(args.batch), '--threads', str(args.threads)]
    out = subprocess.run(cmd, env={**os.environ, **MALLOC_ENV}, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def skip_reason(method: str, n: int, args) -> str | None:
    if method == 'softmax' and n > args.softmax_max_tokens:
        flops = 4 * 3 * args.batch * n * n * args.dim  # QK^T and PV, forward + 2x backward
        return (f'softmax skipped at N={n}: ~{flops / 1e12:.1f} TFLOP per forward+backward, quadratic '
                f'(raise --softmax-max-tokens={args.softmax_max_tokens} to run it)')
    return None


def run(args) -> list[dict]:
    device = torch.device(args.device)
    clock = time.process_time if args.clock == 'cpu' else time.perf_counter
    timing = dict(warmup=args.warmup, repeats=args.repeats, budget_s=args.budget, clock=clock)
    rows = []
    for n in args.sizes:
        methods = []
        for method in args.methods:
            reason = skip_reason(method, n, args)
            if reason:
                print(reason, flush=True)
            else:
                methods.append(method)
        setups = {method: setup(method, n, args, device) for method in methods}
        fwd, fwd_bwd = (median_seconds({name: functools.partial(step, *parts, backward)
                                        for name, parts in setups.items()}, device, **timing)
                        for backward in (False, True))
        del setups
        for method in methods:
            row = {'method': method, 'N': n, 'grid': '{}x{}'.format(*grid_of(n)[0]),
                   'fwd_ms': 1e3 * fwd[method], 'fwd_bwd_ms': 1e3 * fwd_bwd[method], **memory(method, n, args, device)}
            rows.append(row)
            print(f"  {method:8s} N={n:6d}: fwd {row['fwd_ms']:.1f} ms, fwd+bwd {row['fwd_bwd_ms']:.1f} ms, "
                  f"saved {row['saved'] / 2**20:.1f} MiB, peak {row['peak'] / 2**20:.1f} MiB", flush=True)
    return rows


def table(rows: list[dict]) -> str:
    ref = {r['N']: r for r in rows if r['method'] == 'flatten'}
    head = (f"{'method':8s} {'N':>6s} {'grid':>8s} {'fwd ms':>9s} {'f+b ms':>9s} {'saved MiB':>10s} "
            f"{'peak MiB':>9s} | {'fwd/FL':>6s} {'f+b/FL':>6s} {'saved/FL':>8s} {'peak/FL':>7s}")
    lines = [head, '-' * len(head)]
    for r in sorted(rows, key=lambda r: (r['N'], METHODS.index(r['method']))):
        f = ref.get(r['N'])
        ratios = ('{:6.2f} {:6.2f} {:8.2f} {:7.2f}'.format(
            r['fwd_ms'] / f['fwd_ms'], r['fwd_bwd_ms'] / f['fwd_bwd_ms'], r['saved'] / f['saved'],
            r['peak'] / f['peak']) if f else '')
        lines.append(f"{r['method']:8s} {r['N']:6d} {r['grid']:>8s} {r['fwd_ms']:9.1f} {r['fwd_bwd_ms']:9.1f} "
                     f"{r['saved'] / 2**20:10.1f} {r['peak'] / 2**20:9.1f} | {ratios}")
    sizes = sorted({r['N'] for r in rows})
    for method in METHODS:
        t = {r['N']: r['fwd_bwd_ms'] for r in rows if r['method'] == method}
        steps = [f'{b}/{a}: {t[b] / t[a]:.2f}' for a, b in zip(sizes, sizes[1:]) if a in t and b in t]
        if steps:
            lines.append(f'{method} fwd+bwd time ratio ' + ', '.join(steps))
    return '\n'.join(lines)


def markdown(rows: list[dict], title: str, command: str) -> str:
    """The measurements as a markdown document: absolute figures and ratios to FLatten from the same run."""
    ref = {r['N']: r for r in rows if r['method'] == 'flatten'}
    lines = ['# The attention operator: latency and memory', '',
             f'Written by `{command}` (do not edit by hand). One attention layer; methods take turns run by run.',
             '', f'Setting: {title}.', '',
             '| method | N | grid | fwd ms | fwd+bwd ms | saved MiB | peak MiB | fwd / FLatten | '
             'fwd+bwd / FLatten | saved / FLatten | peak / FLatten |',
             '|---|---|---|---|---|---|---|---|---|---|---|']
    for r in sorted(rows, key=lambda r: (r['N'], METHODS.index(r['method']))):
        f = ref.get(r['N'])
        ratios = ([f"{r[k] / f[k]:.2f}x" for k in ('fwd_ms', 'fwd_bwd_ms', 'saved', 'peak')] if f else ['-'] * 4)
        lines.append(f"| {r['method']} | {r['N']:,} | {r['grid']} | {r['fwd_ms']:.1f} | {r['fwd_bwd_ms']:.1f} | "
                     f"{r['saved'] / 2**20:.1f} | {r['peak'] / 2**20:.1f} | " + ' | '.join(ratios) + ' |')
    sizes = sorted({r['N'] for r in rows})
    if len(sizes) > 1:
        lines += ['', 'Growth of the forward+backward time from one size to the next (linear in N would be the '
                  'ratio of the sizes):', '', '| method | ' + ' | '.join(
                      f'{b:,} / {a:,} (x{b / a:.2f})' for a, b in zip(sizes, sizes[1:])) + ' |',
                  '|---|' + '---|' * (len(sizes) - 1)]
        for method in METHODS:
            t = {r['N']: r['fwd_bwd_ms'] for r in rows if r['method'] == method}
            if any(a in t and b in t for a, b in zip(sizes, sizes[1:])):
                lines.append(f'| {method} | ' + ' | '.join(
                    f'{t[b] / t[a]:.2f}' if a in t and b in t else '-' for a, b in zip(sizes, sizes[1:])) + ' |')
    return '\n'.join(lines) + '\n'


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
    parser.add_argument('--threads', type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument('--clock', choices=('wall', 'cpu'), default='wall',
                        help="'cpu': process CPU time instead of wall time; with --threads 1 it is "
                             'insensitive to other jobs sharing the cores (not for CUDA)')
    parser.add_argument('--out', type=Path, default=Path('work_dirs/benchmark_attention'))
    parser.add_argument('--markdown', type=Path, help='also write the table as a markdown document, '
                        'e.g. docs/operator.md')
    parser.add_argument('--glibc-malloc', action='store_true',
                        help="time with glibc's default malloc (fresh mmap for every block >= 32 MiB)")
    parser.add_argument('--memory-worker', nargs=2, metavar=('METHOD', 'N'), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device == 'auto':
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if args.device not in ('cpu', 'cuda'):
        parser.error(f"--device={args.device!r} must be 'cpu', 'cuda' or 'auto'")
    for name, least in (('warmup', 0), ('repeats', 1), ('threads', 1), ('dim', 1), ('heads', 1), ('batch', 1)):
        if getattr(args, name) < least:
            parser.error(f'--{name}={getattr(args, name)} must be >= {least}')
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
    if args.memory_worker:
        memory_worker(args.memory_worker[0], int(args.memory_worker[1]), args)
        return
    torch.set_num_threads(args.threads)
    if args.device == 'cpu' and not args.glibc_malloc:
        keep_freed_memory()
    device = torch.cuda.get_device_name() if args.device == 'cuda' else f'CPU, {args.threads} threads'
    title = (f'C={args.dim}, {args.heads} heads, batch {args.batch}; {device}; torch {torch.__version__}; '
             f'{args.clock} time, median of {args.repeats} after {args.warmup} warm-up; '
             f'LiSA local branch: {local.implementation(args.device)}; load {os.getloadavg()[0]:.2f}')
    print(title, flush=True)
    rows = run(args)
    report = table(rows) + f'\nload average at the end: {os.getloadavg()[0]:.2f}'
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / 'attention_benchmark.json').write_text(json.dumps({'setting': title, 'rows': rows}, indent=1))
    (args.out / 'attention_benchmark.txt').write_text(title + '\n' + report + '\n')
    loglog_plot(rows, 'method', 'N', {'fwd_bwd_ms': 'fwd+bwd', 'fwd_ms': 'fwd'},
                {'saved': 'saved', 'peak': 'peak'}, args.out / 'attention_benchmark.png', title)
    print(f'saved {args.out}/attention_benchmark.{{png,json,txt}}')
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        command = 'python tools/benchmark_attention.py ' + ' '.join(sys.argv[1:] if argv is None else argv)
        args.markdown.write_text(markdown(rows, title, command.strip()))
        print(f'wrote {args.markdown}')


if __name__ == '__main__':
    main()
