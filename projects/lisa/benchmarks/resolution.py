"""Time, memory and FLOPs of the dense models against the image size: where linear attention pays.

The models of Table 3 (:data:`FAMILIES`): the whole Semantic FPN with PVT-T, FLatten-PVT-T and
LiSA-PVT-T (backbone, FPN neck and FPN head: the logits of one image), and the backbone of UperNet
with Swin-T, FLatten-Swin-T and LiSA-Swin-T (UperNet's head, the same in all three, is left out:
at 512x2048 it is about 90 % of the whole model's FLOPs and would hide the attention). Random
weights (seed 0), one square image of each size, CPU. Per model and size:

* **inference time** (:func:`time_worker`): wall and process CPU time of one forward under
  ``torch.no_grad``, eager PyTorch (the CPU kernels; ``'cuda'``: on the GPU, the operators' ``torch``
  backend) and onnxruntime on the model exported once
  (:func:`export_model`: the dynamo export of :mod:`projects.lisa.deploy`, height and width
  dynamic), each on 1 thread and on all cores. The models of a family run in one process and take
  turns run by run (:func:`.timing.median_times`), so a change of the machine's load hits them alike;
* **peak memory** (:func:`memory_worker`): the growth of the resident set (``VmHWM``, reset through
  ``/proc/self/clear_refs``) during one inference in a fresh process, above what the built model
  (and onnxruntime's session) holds before it, under a data limit (``RLIMIT_DATA``: 90 % of the
  memory available when the sweep starts) so that a size the machine cannot hold fails at its first
  oversized allocation with that allocation named, instead of swapping or meeting the OOM killer; on CUDA
  ``max_memory_allocated`` above what was allocated before the step;
* **counted FLOPs** of the forward (:func:`.flops.model_complexity`, the paper's convention);
* a **training step** (batch 1; forward, backward of the sum of the outputs) at one size with and
  without gradient checkpointing (``with_cp=True`` on the backbone): time and peak memory alike.

Every measurement is one row in a JSON-lines file, keyed by :func:`row_key`, so an interrupted sweep
resumes where it stopped (:func:`sweep`). :func:`report` writes the tables, the ratios to the
softmax model beside the FLOPs ratios, the memory growth per 4x pixels, and :func:`plot` the log-log
figure. ``tools/benchmark_resolution.py`` is the command line.
"""
from __future__ import annotations

import functools
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch
from torch import nn

from .attention import MALLOC_ENV, child_env, vm_kib
from .model import DenseParts, dense_configs
from .timing import cuda_peak_bytes, keep_freed_memory, median_times

#: family -> (what is measured, the parts of the segmentor built).
FAMILIES = {
    'pvt': ('Semantic FPN (backbone, neck, head)', ('backbone', 'neck', 'decode_head')),
    'swin': ('UperNet backbone', ('backbone', )),
}
SIZES = (512, 1024, 2048, 4096)
BACKENDS = ('eager', 'onnxruntime', 'cuda')
#: The words of an error that says an allocation failed: torch, onnxruntime (its arena; C++ new), CUDA.
ALLOCATION_FAILED = ("can't allocate", 'Failed to allocate', 'bad_alloc', 'out of memory')
MiB = 2 ** 20
LOG = functools.partial(print, flush=True)


class Exportable(nn.Module):
    """:class:`.model.DenseParts` with the ``output_names`` that :func:`projects.lisa.deploy.export` needs."""

    def __init__(self, parts: DenseParts, outputs: int) -> None:
        super().__init__()
        self.parts = parts
        self.output_names = tuple(f'out{i}' for i in range(outputs))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.parts(x)


def build(family: str, model: str, config_dir: Path, with_cp: bool = False) -> DenseParts:
    """The measured parts of ``model`` (a backbone name of :func:`.model.dense_configs`), seed 0."""
    torch.manual_seed(0)
    return DenseParts(Path(config_dir) / dense_configs(family)[model], FAMILIES[family][1], with_cp=with_cp)


def onnx_path(out: Path, model: str) -> Path:
    return Path(out) / 'onnx' / f"{model.lower()}.onnx"


def export_model(family: str, model: str, config_dir: Path, out: Path, opset: int = 18) -> str:
    """Export the model once (at 512², height and width dynamic) to :func:`onnx_path`, unless there."""
    from projects.lisa.deploy import export

    path = onnx_path(out, model)
    if not path.exists():
        parts = build(family, model, config_dir).eval()
        with torch.no_grad():
            outputs = len(parts(torch.randn(1, 3, 64, 64)))
        tmp = path.with_suffix('.tmp.onnx')
        export(Exportable(parts, outputs), (512, 512), tmp, opset)
        tmp.replace(path)
    return str(path)


def ort_session(path: Path, threads: int):
    from projects.lisa.deploy.onnx import ort_session as session

    return session(path, threads)


def step_fn(parts: DenseParts, x: torch.Tensor, train: bool) -> Callable[[], None]:
    """One inference (``torch.no_grad``, eval mode) or one training step of ``parts`` on ``x``."""
    if train:
        parts.train()

        def step() -> None:
            parts.zero_grad(set_to_none=True)
            sum(o.sum() for o in parts(x)).backward()
    else:
        parts.eval()

        def step() -> None:
            with torch.no_grad():
                parts(x)
    step.parts = parts
    return step


def allocation_error(e: BaseException) -> str | None:
    """The part of ``e``'s message that says an allocation failed (:data:`ALLOCATION_FAILED`), else None."""
    text = ' '.join(str(e).split())
    at = max(text.find(words) for words in ALLOCATION_FAILED)
    return text[at:at + 160] if at >= 0 else None


def memory_worker(family: str, model: str, size: int, backend: str, threads: int, config_dir: str, out: str,
                  limit: int, train: bool = False, with_cp: bool = False, count_flops: bool = False) -> dict:
    """Peak memory of one step on the CPU in this (fresh) process; the counted FLOPs with ``count_flops``.

    Returns ``{'peak': bytes above the resident set before the step, 'rss': the process's peak}``,
    or ``{'error': ...}`` where an allocation failed: the step may add ``limit`` bytes of data to what the
    process holds once the model is built (``RLIMIT_DATA``)."""
    torch.set_num_threads(threads)
    x = torch.randn(1, 3, size, size)
    if backend == 'eager':
        parts = build(family, model, Path(config_dir), with_cp=with_cp)
        step = step_fn(parts, x, train)
    else:
        session = ort_session(onnx_path(Path(out), model), threads)
        feed = {session.get_inputs()[0].name: x.numpy()}

        def step() -> None:
            session.run(None, feed)
    resource.setrlimit(resource.RLIMIT_DATA, (vm_kib('VmData') * 1024 + limit, resource.RLIM_INFINITY))
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')  # VmHWM := VmRSS
    before = vm_kib('VmRSS')
    try:
        step()
    except Exception as e:  # torch raises RuntimeError, onnxruntime its own Fail or RuntimeException
        error = allocation_error(e)
        if error is None:
            raise
        return {'error': error}
    row = {'peak': (vm_kib('VmHWM') - before) * 1024, 'rss': vm_kib('VmHWM') * 1024}
    if count_flops:
        resource.setrlimit(resource.RLIMIT_DATA, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        row['flops'] = count(parts, x)
    return row


def count(parts: DenseParts, x: torch.Tensor) -> int:
    """Counted FLOPs of the inference of ``parts`` on ``x`` (:func:`.flops.model_complexity`)."""
    from .flops import model_complexity

    return model_complexity(parts.eval(), (x, )).flops


def time_worker(family: str, models: Sequence[str], size: int, backend: str, threads: int, config_dir: str,
                out: str, warmup: int, repeats: int, budget_s: float, train: bool = False,
                with_cp: bool = False) -> dict:
    """Median wall and CPU seconds of one step of each model, the models taking turns (a model stops being
    timed once its timed runs took ``budget_s``): ``{model: {'wall': s, 'cpu': s}}``. On CUDA each model's
    ``'peak'`` too (:func:`.timing.cuda_peak_bytes`: no fresh process needed) and, for inference, its ``'flops'``."""
    torch.set_num_threads(threads)
    keep_freed_memory()
    device = torch.device('cuda' if backend == 'cuda' else 'cpu')
    x = torch.randn(1, 3, size, size, device=device)
    steps = {}
    for model in models:
        if backend in ('eager', 'cuda'):
            steps[model] = step_fn(build(family, model, Path(config_dir), with_cp=with_cp).to(device), x, train)
        else:
            session = ort_session(onnx_path(Path(out), model), threads)
            steps[model] = functools.partial(session.run, None, {session.get_inputs()[0].name: x.numpy()})
    times = median_times(steps, device, warmup, repeats, budget_s)
    if backend == 'cuda':
        for model, step in steps.items():
            times[model]['peak'] = cuda_peak_bytes(step, device)
            if not train:
                times[model]['flops'] = count(step.parts, x)
    return times


def profile_worker(family: str, size: int, threads: int, config_dir: str) -> dict:
    """Where one inference's time goes, beside its counted FLOPs: per model, the self CPU time of each
    operator in ``torch.profiler`` (one run after one warm-up, ms) and the counted FLOPs by operator kind."""
    from .flops import model_complexity

    torch.set_num_threads(threads)
    keep_freed_memory()
    x = torch.randn(1, 3, size, size)
    found = {}
    for model in dense_configs(family):
        parts = build(family, model, Path(config_dir))
        step = step_fn(parts, x, train=False)
        step()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step()
        ops = {e.key: e.self_cpu_time_total / 1e3 for e in prof.key_averages() if e.self_cpu_time_total > 0}
        found[model] = {'ops': ops, 'flops_by': dict(model_complexity(parts.eval(), (x, )).by_operator)}
    return found


def ort_profile_worker(family: str, size: int, threads: int, out: str) -> dict:
    """Where onnxruntime spends one inference of each model's export: ms per run by op type
    (:func:`.deploy.op_profile`, 3 runs after one warm-up)."""
    from .deploy import op_profile

    x = torch.randn(1, 3, size, size)
    return {model: {'ops': op_profile(onnx_path(Path(out), model), [x], threads)['ms'], 'flops_by': {}}
            for model in dense_configs(family)}


def in_subprocess(worker: str, malloc_env: bool = False, **kwargs) -> dict:
    """Run ``worker(**kwargs)`` of this module in a fresh interpreter (with ``malloc_env``: glibc returning freed
    blocks at once, :data:`.attention.MALLOC_ENV`, so the peak resident set is the peak of live memory); its
    returned JSON."""
    code = (f'import json, sys; from {__name__} import {worker}; '
            f'print("@@" + json.dumps({worker}(**json.loads(sys.argv[1]))))')
    env = child_env(MALLOC_ENV if malloc_env else None)
    proc = subprocess.run([sys.executable, '-c', code, json.dumps(kwargs)], env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith('@@')]
    if proc.returncode or not lines:
        raise RuntimeError(f'{worker}({kwargs}) failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}')
    return json.loads(lines[-1][2:])


def available_bytes() -> int:
    """``MemAvailable`` of ``/proc/meminfo``: what a process can take without swapping."""
    with open('/proc/meminfo') as f:
        return next(int(line.split()[1]) for line in f if line.startswith('MemAvailable:')) * 1024


def row_key(row: dict) -> tuple:
    """What a row measured: kind ('memory', 'time' or 'profile'), step, backend, threads, size, model."""
    return (row['kind'], row['step'], row['backend'], row['threads'], row['size'], row['model'])


def load_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()] if Path(
        path).exists() else []


def sweep(out: Path, config_dir: Path, families: Sequence[str] = tuple(FAMILIES), sizes: Sequence[int] = SIZES,
          backends: Sequence[str] = BACKENDS, threads: Sequence[int] = (1, len(os.sched_getaffinity(0))),
          train_size: int | None = 1024, warmup: int = 1, repeats: int = 3, budget_s: float = 40.0,
          limit: int | None = None, profile_size: int | None = None, ort_profile_size: int | None = None,
          log: Callable[[str], object] = LOG) -> list[dict]:
    """Measure what :file:`rows.jsonl` under ``out`` lacks, appending each row as it is measured.

    On the CPU memory and FLOPs first (one fresh process per model, size and backend, on all cores), then
    the times; a model whose memory process hit the limit is not timed at that size and backend. On CUDA
    the time processes measure memory and FLOPs too. With ``profile_size``, last, the profile of the PVT
    family's eager inference on 1 thread at that size (:func:`profile_worker`); with ``ort_profile_size``
    onnxruntime's (:func:`ort_profile_worker`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / 'rows.jsonl'
    rows = load_rows(path)
    done = {row_key(r) for r in rows}
    cores = max(threads)
    limit = limit or int(0.9 * available_bytes())

    def add(row: dict) -> None:
        rows.append(row)
        done.add(row_key(row))
        with open(path, 'a') as f:
            f.write(json.dumps(row) + '\n')

    def models(family: str) -> list[str]:
        return list(dense_configs(family))

    if 'onnxruntime' in backends:
        for family in families:
            for model in models(family):
                if not onnx_path(out, model).exists():
                    log(f'exporting {model}')
                    in_subprocess('export_model', family=family, model=model, config_dir=str(config_dir),
                                  out=str(out))
    plans = [('infer', size, False) for size in sizes]
    if train_size:
        plans += [('train', train_size, False), ('train_cp', train_size, True)]
    for step, size, with_cp in plans:
        for backend in [b for b in backends if b != 'cuda' and (step == 'infer' or b != 'onnxruntime')]:
            for family in families:
                for model in models(family):
                    base = dict(kind='memory', step=step, backend=backend, threads=cores, size=size, model=model,
                                family=family)
                    if row_key(base) in done:
                        continue
                    start = time.perf_counter()
                    found = in_subprocess('memory_worker', malloc_env=True, family=family, model=model, size=size,
                                          backend=backend, threads=cores, config_dir=str(config_dir),
                                          out=str(out), limit=limit, train=step != 'infer', with_cp=with_cp,
                                          count_flops=backend != 'onnxruntime' and step == 'infer')
                    add({**base, **found, 'load': os.getloadavg()[0], 'seconds': time.perf_counter() - start})
                    log(f'  memory {step:8s} {backend:11s} {size:5d}² {model:15s} '
                        + (found['error'] if 'error' in found else
                           f"peak {found['peak'] / MiB:8.1f} MiB" + (f", {found['flops'] / 1e9:.1f} GFLOPs"
                                                                      if 'flops' in found else '')))
    # what fits: the memory rows without an error (on CUDA everything is tried)
    peaks = {(r['step'], r['backend'], r['size'], r['model']): r['peak'] for r in rows
             if r['kind'] == 'memory' and 'peak' in r}
    fits = set(peaks) | {(step, 'cuda', size, m) for step, size, _ in plans for f in families for m in models(f)}
    for step, size, with_cp in plans:
        for backend in backends if step == 'infer' else [b for b in backends if b != 'onnxruntime']:
            for n in (threads if step == 'infer' and backend != 'cuda' else (cores, )):
                for family in families:
                    todo = [m for m in models(family) if (step, backend, size, m) in fits]
                    if not todo or all(row_key(dict(kind='time', step=step, backend=backend, threads=n, size=size,
                                                    model=m)) in done for m in todo):
                        continue
                    load = os.getloadavg()[0]
                    start = time.perf_counter()
                    # onnxruntime's sessions keep their peak memory (its arena): where the family's peaks do not
                    # fit together, each model is timed in its own process, one after another
                    together = sum(peaks[step, backend, size, m] for m in todo if (step, backend, size, m) in peaks)
                    # (sessions run again hold up to about twice the peak of one run: so apart above a third of the
                    # memory, and a model whose one run takes over 30 % of it runs once, as its memory was measured)
                    apart = backend == 'onnxruntime' and together > 0.35 * available_bytes()
                    once = {m for m in todo if apart and peaks[step, backend, size, m] > 0.3 * available_bytes()}
                    times = {}
                    for group in ([[m] for m in todo] if apart else [todo]):
                        times.update(in_subprocess(
                            'time_worker', family=family, models=group, size=size, backend=backend, threads=n,
                            config_dir=str(config_dir), out=str(out), warmup=0 if group[0] in once else warmup,
                            repeats=1 if group[0] in once else repeats, budget_s=budget_s, train=step != 'infer',
                            with_cp=with_cp))
                    seconds = time.perf_counter() - start
                    for m in todo:
                        if backend == 'cuda':
                            add(dict(kind='memory', step=step, backend=backend, threads=n, size=size, model=m,
                                     family=family, **{k: v for k, v in times[m].items() if k in ('peak', 'flops')}))
                        add(dict(kind='time', step=step, backend=backend, threads=n, size=size, model=m,
                                 family=family, wall_ms=1e3 * times[m]['wall'], cpu_ms=1e3 * times[m]['cpu'],
                                 warmup=0 if m in once else warmup, repeats=1 if m in once else repeats,
                                 budget_s=budget_s, apart=apart, once=m in once, load_start=load,
                                 load_end=os.getloadavg()[0], seconds=seconds))
                    log(f'  time {step:8s} {backend:11s} {n} thr {size:5d}² ' + ', '.join(
                        f"{m} {1e3 * times[m]['wall']:.0f} ms" for m in todo))
    for backend, size, worker, where in (('eager', profile_size, 'profile_worker', dict(config_dir=str(config_dir))),
                                         ('onnxruntime', ort_profile_size, 'ort_profile_worker', dict(out=str(out)))):
        if not size or 'pvt' not in families or backend not in backends:
            continue
        keys = [dict(kind='profile', step='infer', backend=backend, threads=1, size=size, model=m, family='pvt')
                for m in models('pvt')]
        if not all(row_key(k) in done for k in keys):
            log(f'  profiling the PVT family at {size}², {backend}')
            found = in_subprocess(worker, family='pvt', size=size, threads=1, **where)
            for k in keys:
                add({**k, **found[k['model']]})
    return rows


# ---------------------------------------------------------------------------------------------------------------
# The report


def _index(rows: Iterable[dict]) -> tuple[dict, dict]:
    """``(times, memory)``: rows by ``(step, backend, threads, size, model)`` and ``(step, backend, size, model)``."""
    times = {(r['step'], r['backend'], r['threads'], r['size'], r['model']): r for r in rows if r['kind'] == 'time'}
    memory = {(r['step'], r['backend'], r['size'], r['model']): r for r in rows if r['kind'] == 'memory'}
    return times, memory


def _families(rows: Sequence[dict]) -> dict[str, list[str]]:
    """family -> its models in the rows, the softmax model first (the order of :func:`.model.dense_configs`)."""
    present = {r['model'] for r in rows}
    return {f: [m for m in dense_configs(f) if m in present] for f in FAMILIES if any(
        r['family'] == f for r in rows)}


def settings(rows: Sequence[dict]) -> list[tuple[str, int]]:
    """The (backend, threads) of the inference times in the rows: eager first, fewer threads first."""
    found = {(r['backend'], r['threads']) for r in rows if r['kind'] == 'time' and r['step'] == 'infer'}
    return sorted(found, key=lambda s: (BACKENDS.index(s[0]), s[1]))


def flops_of(memory: dict, size: int, model: str) -> float | None:
    """The counted FLOPs of ``model``'s inference at ``size`` (from the eager or CUDA memory row)."""
    return next((r['flops'] for (step, _, s, m), r in memory.items() if (step, s, m) == ('infer', size, model)
                 and 'flops' in r), None)


def label(backend: str, threads: int) -> str:
    return 'CUDA' if backend == 'cuda' else f'{backend} {threads} thr.'


def ratio_checks(rows: Sequence[dict], family: str = 'pvt', model: str = 'LiSA-PVT-T',
                 tolerance: float = 0.10) -> list[dict]:
    """Per size and inference setting: ``model``'s time ratio to its family's softmax model against their
    FLOPs ratio (``time / flops`` within ``1 ± tolerance`` holds)."""
    times, memory = _index(rows)
    base = next(iter(dense_configs(family)))
    checks = []
    for backend, threads in settings(rows):
        for size in sorted({r['size'] for r in rows if r['step'] == 'infer'}):
            t = times.get(('infer', backend, threads, size, model))
            b = times.get(('infer', backend, threads, size, base))
            f, fb = flops_of(memory, size, model), flops_of(memory, size, base)
            if t and b and f and fb:
                time_ratio, flops_ratio = t['wall_ms'] / b['wall_ms'], f / fb
                checks.append(dict(backend=backend, threads=threads, size=size, time_ratio=time_ratio,
                                   flops_ratio=flops_ratio, off=time_ratio / flops_ratio - 1,
                                   holds=abs(time_ratio / flops_ratio - 1) <= tolerance,
                                   cold=bool(t.get('once')) != bool(b.get('once'))))
    return checks


def pays_from(checks: Sequence[dict]) -> list[str]:
    """Per setting of :func:`ratio_checks`, the size from which on LiSA-PVT-T is faster than PVT-T, as lines."""
    lines = []
    for backend, threads in dict.fromkeys((c['backend'], c['threads']) for c in checks):
        cs = sorted((c for c in checks if (c['backend'], c['threads']) == (backend, threads)), key=lambda c: c['size'])
        faster = [c['size'] for i, c in enumerate(cs) if all(d['time_ratio'] < 1 for d in cs[i:])]
        where = f'from {faster[0]}² on' if faster else 'at none of the largest sizes measured'
        lines.append(f'- {label(backend, threads)}: LiSA-PVT-T is faster than PVT-T {where}.')
    return lines


def growth_checks(rows: Sequence[dict], bound: float = 4.4, from_size: int = 1024) -> list[dict]:
    """Per model and backend: the peak memory's growth from each size to twice it (4x pixels), from
    ``from_size`` up (``<= bound`` holds)."""
    _, memory = _index(rows)
    checks = []
    for (step, backend, size, model), r in sorted(memory.items()):
        nxt = memory.get((step, backend, 2 * size, model))
        if step == 'infer' and size >= from_size and nxt and 'peak' in r and 'peak' in nxt:
            g = nxt['peak'] / r['peak']
            checks.append(dict(backend=backend, model=model, size=size, growth=g, holds=g <= bound))
    return checks


def _ms(r: dict | None) -> str:
    return f"{r['wall_ms']:,.0f}" if r else '-'


def inference_table(rows: Sequence[dict], family: str, models: Sequence[str]) -> str:
    times, memory = _index(rows)
    sets = settings(rows)
    head = ['size', 'model', 'GFLOPs', 'FLOPs / softmax']
    head += [f'{label(b, n)} ms (/ softmax)' for b, n in sets]
    head += [f'peak MiB {b} (/ softmax)' for b in BACKENDS if any(k[1] == b for k in memory)]
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    base = models[0]
    for size in sorted({r['size'] for r in rows if r['step'] == 'infer'}):
        for m in models:
            f, fb = flops_of(memory, size, m), flops_of(memory, size, base)
            cells = [f'{size}²', m, f'{f / 1e9:,.1f}' if f else '-', f'{f / fb:.3f}x' if f and fb else '-']
            for b, n in sets:
                t, tb = times.get(('infer', b, n, size, m)), times.get(('infer', b, n, size, base))
                cells.append(_ms(t) + (f" ({t['wall_ms'] / tb['wall_ms']:.2f}x)" if t and tb else ''))
            for b in BACKENDS:
                if not any(k[1] == b for k in memory):
                    continue
                r, rb = memory.get(('infer', b, size, m)), memory.get(('infer', b, size, base))
                if r is None:
                    cells.append('-')
                elif 'error' in r:
                    cells.append('did not fit')
                else:
                    cells.append(f"{r['peak'] / MiB:,.0f}" + (f" ({r['peak'] / rb['peak']:.2f}x)"
                                                              if rb and 'peak' in rb else ''))
            lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def training_table(rows: Sequence[dict], models: Sequence[str]) -> str:
    times, memory = _index(rows)
    lines = ['| model | size | step ms | peak MiB | with_cp: step ms | with_cp: peak MiB '
             '| with_cp / without: time, memory |', '|---|---|---|---|---|---|---|']
    for m in models:
        for (step, backend, n, size, model), r in sorted(times.items()):
            if step != 'train' or model != m:
                continue
            cp = times.get(('train_cp', backend, n, size, m))
            mem, mem_cp = memory.get(('train', backend, size, m), {}), memory.get(('train_cp', backend, size, m), {})
            peak = f"{mem['peak'] / MiB:,.0f}" if 'peak' in mem else '-'
            peak_cp = f"{mem_cp['peak'] / MiB:,.0f}" if 'peak' in mem_cp else '-'
            rel = (f"{cp['wall_ms'] / r['wall_ms']:.2f}x, {mem_cp['peak'] / mem['peak']:.2f}x"
                   if cp and 'peak' in mem and 'peak' in mem_cp else '-')
            lines.append(f'| {m} | {size}² | {_ms(r)} | {peak} | {_ms(cp)} | {peak_cp} | {rel} |')
    return '\n'.join(lines)


def not_fitting(rows: Sequence[dict]) -> list[str]:
    return [f"{r['model']} at {r['size']}² on {r['backend']} ({r['step']}): {r['error']}"
            for r in rows if r['kind'] == 'memory' and 'error' in r]


def profile_tables(rows: Sequence[dict], top: int = 12) -> list[str]:
    """Markdown of the profile rows, per backend and size: the operators that take the most time and, where
    FLOPs by operator were counted, each model's speed per counted FLOP in its softmax attention
    (``scaled_dot_product_attention``) and in the rest of the model."""
    lines = []
    for backend, size in dict.fromkeys((r['backend'], r['size']) for r in rows if r['kind'] == 'profile'):
        prof = [r for r in rows if r['kind'] == 'profile' and (r['backend'], r['size']) == (backend, size)]
        models = [r['model'] for r in prof]
        ops = sorted({op for r in prof for op in r['ops']}, key=lambda op: -max(r['ops'].get(op, 0) for r in prof))
        what = ('self CPU time by operator (`torch.profiler`, one run after one warm-up)' if backend == 'eager'
                else "time by op type (onnxruntime's node profile, 3 runs after one warm-up)")
        lines += [f'## Where the time goes: {FAMILIES[prof[0]["family"]][0]}, {size}², {backend}, 1 thread', '',
                  f'{what[0].upper()}{what[1:]}, ms per run:', '',
                  '| operator | ' + ' | '.join(models) + ' |', '|---|' + '---|' * len(models)]
        for op in ops[:top]:
            lines.append(f'| `{op}` | ' + ' | '.join(f"{r['ops'].get(op, 0):,.0f}" for r in prof) + ' |')
        lines.append('')
        if not all(r['flops_by'] for r in prof):
            continue
        lines += ['Speed per counted FLOP (GFLOP/s; FLOPs as `tools/get_flops.py` counts them):', '',
                  '| model | all: ms, GFLOPs, GFLOP/s | softmax attention: ms, GFLOPs, GFLOP/s '
                  '| the rest: ms, GFLOPs, GFLOP/s |', '|---|---|---|---|']

        def cell(ms: float, flops: float) -> str:
            return f'{ms:,.0f}, {flops / 1e9:,.1f}, {flops / 1e6 / ms:.1f}' if ms and flops else '-'

        for r in prof:
            total_ms, total_flops = sum(r['ops'].values()), sum(r['flops_by'].values())
            sdpa_ms = sum(ms for op, ms in r['ops'].items() if 'scaled_dot_product' in op)
            sdpa_flops = sum(f for op, f in r['flops_by'].items() if 'scaled_dot_product' in op)
            lines.append(f"| {r['model']} | {cell(total_ms, total_flops)} | {cell(sdpa_ms, sdpa_flops)} "
                         f"| {cell(total_ms - sdpa_ms, total_flops - sdpa_flops)} |")
        lines.append('')
    return lines


def report(rows: Sequence[dict], setting: str, command: str, plot_name: str | None = None) -> str:
    """The markdown document of the rows (module docstring)."""
    fams = _families(rows)
    lines = ['# The dense models against the image size', '',
             f'Written by `{command}` (do not edit by hand) from `rows.jsonl` of its `--out`.', '',
             f'Setting: {setting}.', '',
             'Time: wall time of one step, the median of the timed runs, the models of a family taking turns in one '
             'process. Memory: the growth of the peak resident set (VmHWM) during one step in a fresh process, above '
             'what the built model (or the onnxruntime session) holds. FLOPs: counted forward, one multiply-add = '
             'one FLOP (`tools/get_flops.py`).', '']
    apart = sorted({(r['family'], r['size']) for r in rows if r['kind'] == 'time' and r.get('apart')})
    if apart:
        lines += ["Where a family's three onnxruntime sessions do not fit in memory together (each keeps its peak "
                  'in its arena), each model is timed in its own process, one after another: '
                  + ', '.join(f'{FAMILIES[f][0]} at {s}²' for f, s in apart) + '.', '']
    once = [r for r in rows if r['kind'] == 'time' and r.get('once')]
    if once:
        lines += ['One run, cold, in a fresh process, where one run takes over 30 % of the memory (run again, a '
                  "session holds up to about twice that: onnxruntime's arena grows): "
                  + ', '.join(sorted({f"{r['model']} at {r['size']}²" for r in once})) + '.', '']
    if plot_name:
        lines += [f'![time and memory against the pixels]({plot_name})', '']
    for family, models in fams.items():
        lines += [f'## {FAMILIES[family][0]}: inference', '', inference_table(rows, family, models), '']
    checks = ratio_checks(rows)
    if checks:
        lines += ['## LiSA-PVT-T against PVT-T: time ratio beside FLOPs ratio', '',
                  '| setting | size | time ratio | FLOPs ratio | time / FLOPs ratio | within 10 % |',
                  '|---|---|---|---|---|---|']
        lines += [f"| {label(c['backend'], c['threads'])} | {c['size']}² | {c['time_ratio']:.3f} "
                  f"| {c['flops_ratio']:.3f} | {1 + c['off']:.3f} | "
                  + ('not comparable: one of the two timed by one cold run |' if c['cold'] else
                     f"{'yes' if c['holds'] else 'no'} |") for c in checks]
        lines += ['', *pays_from([c for c in checks if not c['cold']]), '']
    growth = growth_checks(rows)
    if growth:
        lines += ['## Peak memory per 4x pixels (from 1024²)', '',
                  '| model | backend | ' + ' | '.join(f'{s}² → {2 * s}²' for s in sorted({g['size'] for g in growth}))
                  + ' |', '|---|---|' + '---|' * len({g['size'] for g in growth})]
        for (model, backend) in dict.fromkeys((g['model'], g['backend']) for g in growth):
            by = {g['size']: g for g in growth if g['model'] == model and g['backend'] == backend}
            lines.append(f'| {model} | {backend} | ' + ' | '.join(
                f"{by[s]['growth']:.2f}x" if s in by else '-' for s in sorted({g['size'] for g in growth})) + ' |')
        lines.append('')
    if any(r['step'] == 'train' for r in rows):
        lines += ['## Training step, batch 1, eager, all cores', '',
                  training_table(rows, [m for ms in fams.values() for m in ms]), '']
    lines += profile_tables(rows)
    missing = not_fitting(rows)
    if missing:
        lines += ['## Not measured: did not fit', '', *[f'- {m}' for m in missing], '']
    return '\n'.join(lines)


def plot(rows: Sequence[dict], path: Path, title: str, threads: int = 1) -> None:
    """Log-log panels per family: inference time (``threads``; CUDA: as measured) and peak memory against the
    pixels, one colour per attention, eager solid, onnxruntime dashed. Needs matplotlib."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    times, memory = _index(rows)
    fams = _families(rows)
    fig, axes = plt.subplots(len(fams), 2, figsize=(11, 3.8 * len(fams)), squeeze=False)
    for (family, models), (ax_t, ax_m) in zip(fams.items(), axes):
        for colour, model in zip(('tab:red', 'tab:blue', 'tab:green'), models):
            for backend, style in (('eager', 'o-'), ('cuda', 'o-'), ('onnxruntime', 's--')):
                mem = sorted((k[2], r) for k, r in memory.items() if k[:2] == ('infer', backend) and k[3] == model)
                n = threads if backend != 'cuda' else next((r['threads'] for _, r in mem), threads)
                t = sorted((k[3], r['wall_ms']) for k, r in times.items()
                           if k[:3] == ('infer', backend, n) and k[4] == model)
                if t:
                    ax_t.plot([s * s for s, _ in t], [ms for _, ms in t], style, color=colour,
                              label=f'{model} {backend}')
                peaks = [(s, r['peak'] / MiB) for s, r in mem if 'peak' in r]
                if peaks:
                    ax_m.plot([s * s for s, _ in peaks], [p for _, p in peaks], style, color=colour,
                              label=f'{model} {backend}')
        for ax, ylabel in ((ax_t, 'inference time (ms)'), (ax_m, 'peak memory of inference (MiB)')):
            sizes = sorted({r['size'] for r in rows if r['step'] == 'infer'})
            ax.set(xscale='log', yscale='log', xlabel='pixels', ylabel=ylabel, title=FAMILIES[family][0])
            ax.set_xticks([s * s for s in sizes], [f'{s}²' for s in sizes])
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.grid(True, which='both', alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def beside_table_13(rows: Sequence[dict]) -> str:
    """Markdown: per family and size, LiSA's time and peak memory over FLatten's, beside supplementary Table 13
    (DeiT-T at 16,385 tokens: LiSA / FLatten latency and memory)."""
    from ..analysis.paper import TABLE_13

    (ms, mb), (fl_ms, fl_mb) = (TABLE_13[16385][a] for a in ('lisa', 'flatten'))
    times, memory = _index(rows)
    lines = ['| family | setting | size | LiSA / FLatten time | LiSA / FLatten peak memory |', '|---|---|---|---|---|']
    for family, models in _families(rows).items():
        lisa, flatten = (next((m for m in models if m.startswith(p)), None) for p in ('LiSA', 'FLatten'))
        for backend, threads in settings(rows):
            for size in sorted({r['size'] for r in rows if r['step'] == 'infer'}):
                t, tf = (times.get(('infer', backend, threads, size, x)) for x in (lisa, flatten))
                m, mf = (memory.get(('infer', backend, size, x), {}) for x in (lisa, flatten))
                if t and tf:
                    mem = f"{m['peak'] / mf['peak']:.2f}x" if 'peak' in m and 'peak' in mf else '-'
                    lines.append(f"| {FAMILIES[family][0]} | {label(backend, threads)} | {size}² "
                                 f"| {t['wall_ms'] / tf['wall_ms']:.2f}x | {mem} |")
    lines.append(f'| paper, supp. Table 13: DeiT-T | GPU | 16,385 tokens | {ms / fl_ms:.2f}x | {mb / fl_mb:.2f}x |')
    return '\n'.join(lines)
