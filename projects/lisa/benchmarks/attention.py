"""Latency and memory of one attention layer versus its token count (LiSA supp. Table 13).

One DeiT-T attention layer (softmax, linear, FLatten or LiSA; :func:`build`) on ``N`` tokens, a
square grid with or without a class token (:func:`grid_of`). :func:`run` measures per method and N

* ``fwd_ms`` / ``fwd_bwd_ms``: median latency of the forward (``torch.no_grad``) and of
  forward+backward (gradients of the input and all parameters), the methods taking turns
  (:func:`.timing.median_seconds`);
* ``saved``: bytes autograd keeps for backward (distinct storages, parameters and input
  excluded; :func:`.timing.saved_tensor_bytes`);
* ``peak``: :func:`peak_bytes`, on the CPU in a fresh subprocess per measurement (:func:`memory`);
* ``flops``: the forward's counted FLOPs (:func:`count_flops`, the paper's convention; needs MMEngine).

:func:`table` and :func:`markdown` give the rows with their ratios to FLatten of the same run, and the
markdown each time ratio divided by the FLOPs ratio: 1.00 where a method runs at FLatten's speed per FLOP.
``tools/benchmark_attention.py`` is the command line. Torch only.
"""
from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from ..models.attention import build_attention, set_backend
from .timing import cuda_peak_bytes, median_seconds, saved_tensor_bytes

METHODS = ('softmax', 'linear', 'flatten', 'lisa')
#: glibc's mmap threshold fixed at 64 KiB in the memory subprocess, so that freed tensors go back to the OS
#: (otherwise the warm-up run's pages are reused and the peak is undercounted).
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
    """One forward (under ``torch.no_grad``) or forward+backward into the input and every parameter."""
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
    """A ``/proc/self/status`` field (``VmRSS``, ``VmHWM``) in KiB."""
    with open('/proc/self/status') as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ':'))


def peak_bytes(m: nn.Module, x: torch.Tensor, hw_shape) -> int:
    """Peak memory of one forward+backward above the memory in use before it: on CUDA
    ``max_memory_allocated``, on the CPU the growth of the peak resident set (``VmHWM``, reset
    through ``/proc/self/clear_refs``; run it in a fresh process, see :func:`memory`)."""
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


def allocated_peak_bytes(m: nn.Module, x: torch.Tensor, hw_shape) -> int:
    """Peak of the bytes that torch's CPU allocator holds during one forward+backward, above those held
    before it, after a warm-up: every allocation and free, in order, from the profiler's memory events.
    Exact and deterministic in this process (unlike :func:`peak_bytes`' resident set, which needs a
    fresh one); what the tests assert."""
    step(m, x, hw_shape, backward=True)  # warm-up: one-time buffers, gradients allocated
    m.zero_grad(set_to_none=True)
    x.grad = None
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step(m, x, hw_shape, backward=True)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == '[memory]']
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def setup(method: str, n: int, dim: int, num_heads: int, batch: int, device: torch.device,
          backend: str | None = None) -> tuple[nn.Module, torch.Tensor, tuple[int, int]]:
    """The layer (seed 0) with its operators' ``backend`` (:func:`~..models.attention.set_backend`;
    None: the global choice), an input ``(batch, n, dim)`` that requires grad, and its grid."""
    torch.manual_seed(0)
    m = set_backend(build(method, n, dim, num_heads).to(device), backend)
    x = torch.randn(batch, n, dim, device=device, requires_grad=True)
    return m, x, grid_of(n)[0]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child interpreter that imports this very package: the folder holding
    ``projects`` first on its path, ``extra`` variables added."""
    package_root = str(Path(__file__).resolve().parents[3])
    path = os.pathsep.join(p for p in (package_root, os.environ.get('PYTHONPATH')) if p)
    return {**os.environ, **(extra or {}), 'PYTHONPATH': path}


def memory_worker(method: str, n: int, dim: int, num_heads: int, batch: int, threads: int,
                  backend: str | None = None) -> None:
    """Subprocess entry of :func:`memory`: print the JSON of ``saved`` and ``peak`` bytes on the CPU."""
    torch.set_num_threads(threads)
    m, x, hw_shape = setup(method, n, dim, num_heads, batch, torch.device('cpu'), backend)
    print(json.dumps({'saved': saved_bytes(m, x, hw_shape), 'peak': peak_bytes(m, x, hw_shape)}))


def memory(method: str, n: int, dim: int, num_heads: int, batch: int, threads: int,
           device: torch.device, backend: str | None = None) -> dict[str, int]:
    """``{'saved': bytes, 'peak': bytes}`` of one forward+backward; on the CPU measured in a fresh
    interpreter (:func:`memory_worker`) with :data:`MALLOC_ENV`, so earlier runs leave no pages behind."""
    if device.type == 'cuda':
        m, x, hw_shape = setup(method, n, dim, num_heads, batch, device, backend)
        return {'saved': saved_bytes(m, x, hw_shape), 'peak': peak_bytes(m, x, hw_shape)}
    code = (f'from {__name__} import memory_worker; '
            f'memory_worker({method!r}, {n}, {dim}, {num_heads}, {batch}, {threads}, {backend!r})')
    env = child_env(MALLOC_ENV)
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


class _OnGrid(nn.Module):
    """The layer with its grid bound, so that a tracer sees one tensor input."""

    def __init__(self, m: nn.Module, hw_shape: tuple[int, int]) -> None:
        super().__init__()
        self.m, self.hw_shape = m, hw_shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.m(x, self.hw_shape)


def count_flops(method: str, n: int, dim: int, num_heads: int, batch: int = 1) -> int | None:
    """Counted FLOPs of the layer's forward (:func:`.flops.model_complexity`: one multiply-add = one FLOP,
    matrix products and convolutions); None where MMEngine, the counter's library, is not installed."""
    try:
        from .flops import model_complexity
    except ImportError:
        return None
    m, x, hw_shape = setup(method, n, dim, num_heads, batch, torch.device('cpu'))
    return model_complexity(_OnGrid(m, hw_shape).eval(), (x.detach(), )).flops


def skip_reason(method: str, n: int, batch: int, dim: int, softmax_max_tokens: int) -> str | None:
    """Why ``method`` is not run at ``n`` tokens (softmax above ``softmax_max_tokens``), else None."""
    if method == 'softmax' and n > softmax_max_tokens:
        flops = 4 * 3 * batch * n * n * dim  # QK^T and PV, forward + 2x backward
        return (f'softmax skipped at N={n}: ~{flops / 1e12:.1f} TFLOP per forward+backward, quadratic '
                f'(raise --softmax-max-tokens={softmax_max_tokens} to run it)')
    return None


def run(sizes: Sequence[int], methods: Sequence[str], device: torch.device, dim: int = 192, num_heads: int = 3,
        batch: int = 1, threads: int = 1, warmup: int = 2, repeats: int = 7, budget_s: float = 20.0,
        clock: str = 'wall', softmax_max_tokens: int = sys.maxsize, backend: str | None = None, count: bool = True,
        log: Callable[[str], object] = functools.partial(print, flush=True)) -> list[dict]:
    """One row per method and size: ``method, N, grid, fwd_ms, fwd_bwd_ms, saved, peak``; each
    measured row, and each skip (:func:`skip_reason`), is passed to ``log`` as a line.
    ``clock``: 'wall' (``perf_counter``) or 'cpu' (the process's CPU time); ``backend``: the
    operators' backend of FLatten and LiSA (one of ``ops.CHOICES``; None: the global choice); ``count``:
    add each row's ``flops`` (:func:`count_flops`, where MMEngine is installed)."""
    timing = dict(warmup=warmup, repeats=repeats, budget_s=budget_s,
                  clock=time.process_time if clock == 'cpu' else time.perf_counter)
    rows = []
    for n in sizes:
        runs = []
        for method in methods:
            reason = skip_reason(method, n, batch, dim, softmax_max_tokens)
            if reason:
                log(reason)
            else:
                runs.append(method)
        setups = {method: setup(method, n, dim, num_heads, batch, device, backend) for method in runs}
        fwd, fwd_bwd = (median_seconds({name: functools.partial(step, *parts, backward)
                                        for name, parts in setups.items()}, device, **timing)
                        for backward in (False, True))
        del setups
        for method in runs:
            row = {'method': method, 'N': n, 'grid': '{}x{}'.format(*grid_of(n)[0]), 'threads': threads,
                   'fwd_ms': 1e3 * fwd[method], 'fwd_bwd_ms': 1e3 * fwd_bwd[method],
                   **memory(method, n, dim, num_heads, batch, threads, device, backend)}
            flops = count_flops(method, n, dim, num_heads, batch) if count else None
            if flops is not None:
                row['flops'] = flops
            rows.append(row)
            log(f"  {method:8s} N={n:6d}: fwd {row['fwd_ms']:.1f} ms, fwd+bwd {row['fwd_bwd_ms']:.1f} ms, "
                f"saved {row['saved'] / 2**20:.1f} MiB, peak {row['peak'] / 2**20:.1f} MiB")
    return rows


def table(rows: list[dict]) -> str:
    """Plain-text table of the rows with their ratios to FLatten at the same N, then each method's growth."""
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


def _section(rows: list[dict]) -> list[str]:
    """The markdown table of one thread count's rows."""
    ref = {r['N']: r for r in rows if r['method'] == 'flatten'}
    flops = all('flops' in r for r in rows)
    head = ['method', 'N', 'grid', 'fwd ms', 'fwd+bwd ms', 'saved MiB', 'peak MiB', 'fwd / FLatten',
            'fwd+bwd / FLatten', 'saved / FLatten', 'peak / FLatten']
    if flops:
        head += ['GFLOPs', 'FLOPs / FLatten', 'fwd ÷ FLOPs ratio', 'fwd+bwd ÷ FLOPs ratio']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for r in sorted(rows, key=lambda r: (r['N'], METHODS.index(r['method']))):
        f = ref.get(r['N'])
        cells = [r['method'], f"{r['N']:,}", r['grid'], f"{r['fwd_ms']:.1f}", f"{r['fwd_bwd_ms']:.1f}",
                 f"{r['saved'] / 2**20:.1f}", f"{r['peak'] / 2**20:.1f}"]
        cells += [f"{r[k] / f[k]:.2f}x" for k in ('fwd_ms', 'fwd_bwd_ms', 'saved', 'peak')] if f else ['-'] * 4
        if flops:
            cells += [f"{r['flops'] / 1e9:.3f}"]
            cells += ([f"{r['flops'] / f['flops']:.3f}x"] + [
                f"{r[k] / f[k] / (r['flops'] / f['flops']):.3f}" for k in ('fwd_ms', 'fwd_bwd_ms')] if f else ['-'] * 3)
        lines.append('| ' + ' | '.join(cells) + ' |')
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
    return lines


def markdown(rows: list[dict], title: str, command: str) -> str:
    """The measurements as a markdown document, one section per thread count: absolute figures, ratios to
    FLatten from the same run and, with counted FLOPs, each time ratio divided by the FLOPs ratio."""
    lines = ['# The attention operator: latency and memory', '',
             f'Written by `{command}` (do not edit by hand). One attention layer; methods take turns run by run.',
             '', f'Setting: {title}.', '']
    if all('flops' in r for r in rows):
        lines += ['FLOPs: the forward counted as `tools/get_flops.py` counts (one multiply-add = one FLOP; matrix '
                  'products, convolutions, the walk and the local window as computed; element-wise operations '
                  'not). The backward of a product costs twice its forward, so the forward\'s FLOPs ratio is also '
                  "forward+backward's. A time ratio ÷ FLOPs ratio of 1.00 runs at FLatten's speed per FLOP.", '']
    for threads in sorted({r.get('threads', 0) for r in rows}):
        if threads:
            lines += [f'## {threads} thread{"s" if threads > 1 else ""}', '']
        lines += _section([r for r in rows if r.get('threads', 0) == threads]) + ['']
    return '\n'.join(lines)
