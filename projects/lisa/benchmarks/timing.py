"""Latency and memory of a training or inference step, on the CPU or on CUDA (torch only).

* latency: median wall time (and process CPU time) over ``repeats`` runs after
  ``warmup`` runs, synchronising CUDA around each run, the compared steps
  taking turns (:func:`median_times`, :func:`median_seconds`);
* memory of a training step:
  - ``saved``: bytes of the distinct storages autograd keeps for backward
    (:func:`saved_tensor_bytes`, recorded with
    ``torch.autograd.graph.saved_tensors_hooks``; views share their storage,
    parameters and inputs are not counted since they exist anyway). This is
    what grows with the token count and sets the peak of training; it does not
    depend on the allocator, so it is the same on every device;
  - ``peak`` (CUDA only): ``torch.cuda.max_memory_allocated`` during the step
    above the memory allocated before it (:func:`cuda_peak_bytes`);
* allocator: on the CPU, timings are taken with glibc's malloc keeping
  freed memory (:func:`keep_freed_memory`), as CUDA's caching allocator does.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor


def synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def keep_freed_memory() -> None:
    """Make glibc's malloc keep freed memory for reuse, as a caching allocator (CUDA's) does.

    By default glibc serves every allocation of 32 MiB or more with a fresh
    ``mmap`` and unmaps it when freed, so each large temporary is page-faulted
    and zeroed by the kernel again on every step: at N = 65,536 that adds about
    2 s of system time to FLatten and LiSA alike and hides how the operators scale.
    """
    if sys.platform.startswith('linux'):
        libc = ctypes.CDLL(ctypes.util.find_library('c'))
        libc.mallopt(-4, 0)        # M_MMAP_MAX: serve everything from the heap
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: do not hand freed heap back


CLOCKS: dict[str, Callable[[], float]] = {'wall': time.perf_counter, 'cpu': time.process_time}


def median_times(steps: Mapping[str, Callable[[], object]], device: torch.device, warmup: int = 2,
                 repeats: int = 7, budget_s: float = float('inf'),
                 clocks: Mapping[str, Callable[[], float]] = CLOCKS) -> dict[str, dict[str, float]]:
    """Median seconds of each step by each clock over ``repeats`` timed calls after ``warmup`` untimed ones.

    The steps take turns (one call of each per round), so a change of the
    machine's load during the measurement hits them alike and their ratios stay
    fair on a shared machine. A step stops being timed once its timed calls
    took ``budget_s`` in total by the first clock (after at least one), so slow
    steps stay affordable. ``clocks``: name -> clock, read together around each
    call; by default wall time and the process's CPU time (all threads).
    Returns ``{step: {clock: seconds}}``.
    """
    if warmup < 0 or repeats < 1:
        raise ValueError(f'warmup={warmup} must be >= 0 and repeats={repeats} >= 1')
    for _ in range(warmup):
        for step in steps.values():
            step()
    first = next(iter(clocks))
    times: dict[str, dict[str, list[float]]] = {name: {c: [] for c in clocks} for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            if times[name][first] and sum(times[name][first]) >= budget_s:
                continue
            synchronize(device)
            start = {c: clock() for c, clock in clocks.items()}
            step()
            synchronize(device)
            for c, clock in clocks.items():
                times[name][c].append(clock() - start[c])
    return {name: {c: statistics.median(t) for c, t in ts.items()} for name, ts in times.items()}


def median_seconds(steps: Mapping[str, Callable[[], object]], device: torch.device, warmup: int = 2,
                   repeats: int = 7, budget_s: float = float('inf'),
                   clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """:func:`median_times` by one ``clock`` (wall time by default): ``{step: seconds}``."""
    times = median_times(steps, device, warmup, repeats, budget_s, {'clock': clock})
    return {name: t['clock'] for name, t in times.items()}


def saved_tensor_bytes(forward: Callable[[], Tensor], exclude: Iterable[Tensor] = ()) -> int:
    """Bytes autograd saves for the backward of ``forward()`` (then runs that backward).

    Each storage is counted once, whatever the number of views saved from it;
    storages of ``exclude`` (parameters, inputs) are not counted.
    """
    own = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in own:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    out.backward(torch.ones_like(out))
    return sum(seen.values())


def cuda_peak_bytes(step: Callable[[], object], device: torch.device) -> int:
    """Peak CUDA memory allocated during ``step()`` above what was allocated before it."""
    if device.type != 'cuda':
        raise ValueError(f'cuda_peak_bytes needs a CUDA device, got {device}')
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    step()
    synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def loglog_plot(rows: Sequence[dict], group: str, x: str, latency: Mapping[str, str], memory: Mapping[str, str],
                path: Path, title: str, memory_label: str = 'memory (MiB)') -> None:
    """Save two log-log panels against ``x``: latency (ms) and memory (MiB).

    One colour per value of ``rows[i][group]``; ``latency`` / ``memory`` map a
    row key to its legend label (first key solid, the others dashed); keys a
    group's rows lack are skipped. Needs matplotlib.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in dict.fromkeys(r[group] for r in rows):
        rs = sorted((r for r in rows if r[group] == name), key=lambda r: r[x])
        n, color = [r[x] for r in rs], None
        for ax, series, scale in ((axes[0], latency, 1), (axes[1], memory, 2 ** -20)):
            for i, (key, label) in enumerate(series.items()):
                if key in rs[0]:
                    (line, ) = ax.plot(n, [r[key] * scale for r in rs], 's--' if i else 'o-', color=color,
                                       alpha=0.6 if i else 1.0, label=f'{name} {label}')
                    color = line.get_color()
    for ax, ylabel in zip(axes, ('latency (ms)', memory_label)):
        ax.set(xscale='log', yscale='log', xlabel='tokens', ylabel=ylabel)
        ax.grid(True, which='both', alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
