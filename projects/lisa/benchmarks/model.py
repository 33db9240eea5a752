"""Latency and memory of DeiT-T (LiSA supp. Table 13) and speed of the dense models (Table 3).

* **DeiT-T** with softmax, FLatten and LiSA attention (:class:`Bench`, :func:`measure`), built
  with torch alone (:class:`.deit.DeiT`: the forward pass of ``LiSAViT``) at each input size,
  batch 1: ``fwd_ms`` (forward under ``torch.no_grad``), ``train_ms`` (forward, backward of the
  sum of the class-token output into every parameter), ``saved`` (bytes autograd keeps for that
  backward; :func:`.timing.saved_tensor_bytes`) and on CUDA ``peak``. :func:`table` adds the
  ratios to FLatten of the same size and the paper's figures.
* **Dense models**: the parts of the Table 3 segmentation models that the attention changes
  (:data:`DENSE`, :func:`dense_configs`: backbone + FPN neck of Semantic FPN with PVT-T, FLatten-PVT-T,
  LiSA-PVT-T; the UperNet backbones Swin-T, FLatten-Swin-T, LiSA-Swin-T), built from their configs with random
  weights (:class:`DenseParts`, needs mmengine, mmcv and mmseg): wall and CPU time of a training
  step and of inference (:func:`measure_dense`, :func:`measure_families`), the FLOPs counted
  (:func:`count_dense_flops`, :func:`add_dense_flops`),
  tables of the ratios to the softmax model and to FLatten of the same family
  (:func:`dense_table`, over several processes :func:`merge_processes`).

The models of one comparison take turns run by run (:func:`.timing.median_times`), so a change
of the machine's load hits them alike. :func:`write_results` writes the rows and the table;
``tools/benchmark_model.py`` is the command line.
"""
from __future__ import annotations

import functools
import json
import statistics
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from torch import nn

from ..analysis.paper import TABLE_13 as PAPER
from ..analysis.paper import paper_models
from .deit import DEIT_TINY_ATTENTIONS as ATTENTIONS
from .deit import DeiT
from .timing import cuda_peak_bytes, median_seconds, median_times, saved_tensor_bytes

PATCH = 16
MiB = 2 ** 20
#: Where a measurement's lines go as they are measured: printed at once.
LOG = functools.partial(print, flush=True)


def build_model(attention: str, img_size: int, device: torch.device) -> nn.Module:
    """DeiT-T with the attention of the DeiT-T configs (seed 0), in training mode."""
    torch.manual_seed(0)
    return DeiT(ATTENTIONS[attention], img_size=img_size, patch_size=PATCH).to(device).train()


class Bench:
    """One DeiT-T at one input size: its training step, forward pass and memory."""

    def __init__(self, attention: str, img_size: int, device: torch.device) -> None:
        self.model = build_model(attention, img_size, device)
        self.x = torch.randn(1, 3, img_size, img_size, device=device)

    def loss(self) -> torch.Tensor:
        return self.model(self.x).sum()

    def train_step(self) -> None:
        self.model.zero_grad(set_to_none=True)
        self.loss().backward()

    def forward(self) -> None:
        with torch.no_grad():
            self.model(self.x)

    def saved_bytes(self) -> int:
        return saved_tensor_bytes(self.loss, exclude=[*self.model.parameters(), self.x])


def measure(img_size: int, attentions: Sequence[str], device: torch.device, warmup: int = 1, repeats: int = 5,
            budget_s: float = 60.0) -> list[dict]:
    """Rows of every attention at one size; their runs take turns (:func:`.timing.median_seconds`).

    The first run of each model is the memory run (``saved``); each latency is then the median of
    ``repeats`` runs after ``warmup`` further untimed ones, stopping once they took ``budget_s``.
    """
    benches = {a: Bench(a, img_size, device) for a in attentions}
    rows = {a: {'attention': a, 'img_size': img_size, 'tokens': 1 + (img_size // PATCH) ** 2}
            for a in attentions}
    for a, bench in benches.items():
        rows[a]['saved'] = bench.saved_bytes()  # also the first warm-up run
    timing = dict(warmup=warmup, repeats=repeats, budget_s=budget_s)
    train = median_seconds({a: b.train_step for a, b in benches.items()}, device, **timing)
    forward = median_seconds({a: b.forward for a, b in benches.items()}, device, **timing)
    for a, bench in benches.items():
        rows[a].update(train_ms=1e3 * train[a], fwd_ms=1e3 * forward[a])
        if device.type == 'cuda':
            rows[a]['peak'] = cuda_peak_bytes(bench.train_step, device)
    return list(rows.values())


def measure_sizes(img_sizes: Sequence[int], attentions: Sequence[str], device: torch.device, warmup: int = 1,
                  repeats: int = 5, budget_s: float = 60.0, log: Callable[[str], object] = LOG) -> list[dict]:
    """The rows of :func:`measure` at every size, each passed to ``log`` as a line once measured."""
    rows = []
    for size in img_sizes:
        for row in measure(size, attentions, device, warmup, repeats, budget_s):
            rows.append(row)
            log(f"  {row['attention']:8s} {size:5d}² ({row['tokens']:6d} tokens): fwd {row['fwd_ms']:.1f} ms, "
                f"train {row['train_ms']:.1f} ms, saved {row['saved'] / MiB:.1f} MiB"
                + (f", peak {row['peak'] / MiB:.1f} MiB" if 'peak' in row else ''))
    return rows


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


# family -> (what is measured, parts of the model, the segmentor of its Table 3 models in analysis.paper.PAPER_MODELS)
DENSE = {
    'pvt': ('Semantic FPN backbone + neck', ('backbone', 'neck'), 'S-FPN'),
    'swin': ('UperNet backbone', ('backbone', ), 'UperNet'),
}


def dense_configs(family: str) -> dict[str, str]:
    """Backbone -> config (under ``configs/``) of the family's Table 3 models, the softmax baseline first."""
    return {m.backbone: m.config for m in paper_models('Table 3', DENSE[family][2])}


class DenseParts(nn.Module):
    """The backbone (+ neck, + decode head) of a segmentation config, randomly initialised; ``with_cp``:
    gradient checkpointing in the backbone."""

    def __init__(self, config: Path, parts: tuple[str, ...], with_cp: bool = False) -> None:
        super().__init__()
        from mmengine.config import Config
        from mmengine.registry import init_default_scope
        from mmseg.registry import MODELS

        import projects.lisa.registry  # noqa: F401  (registers the backbones)

        init_default_scope('mmseg')
        cfg = Config.fromfile(config).model
        cfg.backbone.init_cfg = None  # random weights: no checkpoint
        if with_cp:
            cfg.backbone.with_cp = True
        self.backbone = MODELS.build(cfg.backbone)
        self.backbone.init_weights()
        self.neck = MODELS.build(cfg.neck) if 'neck' in parts else None
        self.decode_head = MODELS.build(cfg.decode_head) if 'decode_head' in parts else None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feats = tuple(self.backbone(x))
        if self.neck is not None:
            feats = tuple(self.neck(feats))
        return (self.decode_head(feats), ) if self.decode_head is not None else feats


class DenseBench:
    """One dense model: its training step (``batch`` images of ``train_size``) and its inference
    (one image of ``infer_size``)."""

    def __init__(self, config: Path, parts: tuple[str, ...], device: torch.device, batch: int = 1,
                 train_size: Sequence[int] = (512, 512), infer_size: Sequence[int] = (512, 2048)) -> None:
        torch.manual_seed(0)
        self.model = DenseParts(config, parts).to(device)
        self.train_x = torch.randn(batch, 3, *train_size, device=device)
        self.infer_x = torch.randn(1, 3, *infer_size, device=device)

    def train_step(self) -> None:
        self.model.train()
        self.model.zero_grad(set_to_none=True)
        sum(out.sum() for out in self.model(self.train_x)).backward()

    def infer(self) -> None:
        self.model.eval()
        with torch.no_grad():
            self.model(self.infer_x)


def measure_dense(family: str, config_dir: Path, device: torch.device, batch: int = 1,
                  train_size: Sequence[int] = (512, 512), infer_size: Sequence[int] = (512, 2048), warmup: int = 2,
                  repeats: int = 5, budget_s: float = 60.0) -> list[dict]:
    """Rows of the models of one family (``config_dir``: the ``configs/`` folder; a row's ``'config'`` is
    its file name); their runs take turns."""
    what, parts, _ = DENSE[family]
    configs = dense_configs(family)
    benches = {name: DenseBench(Path(config_dir) / cfg, parts, device, batch, train_size, infer_size)
               for name, cfg in configs.items()}
    timing = dict(warmup=warmup, repeats=repeats, budget_s=budget_s)
    train = median_times({n: b.train_step for n, b in benches.items()}, device, **timing)
    infer = median_times({n: b.infer for n, b in benches.items()}, device, **timing)
    return [{'family': family, 'measured': what, 'model': name, 'config': Path(configs[name]).name,
             **{f'train_{c}_ms': 1e3 * t for c, t in train[name].items()},
             **{f'infer_{c}_ms': 1e3 * t for c, t in infer[name].items()}} for name in configs]


def measure_families(families: Sequence[str], config_dir: Path, device: torch.device, batch: int = 1,
                     train_size: Sequence[int] = (512, 512), infer_size: Sequence[int] = (512, 2048),
                     warmup: int = 2, repeats: int = 5, budget_s: float = 60.0,
                     log: Callable[[str], object] = LOG) -> list[dict]:
    """The rows of :func:`measure_dense` of every family, each passed to ``log`` as a line once measured."""
    rows = []
    for family in families:
        for row in measure_dense(family, config_dir, device, batch, train_size, infer_size, warmup, repeats, budget_s):
            rows.append(row)
            log(f"  {row['model']:15s} train {row['train_cpu_ms']:.0f} ms CPU, {row['train_wall_ms']:.0f} ms "
                f"wall; inference {row['infer_cpu_ms']:.0f} ms CPU, {row['infer_wall_ms']:.0f} ms wall")
    return rows


def count_dense_flops(family: str, config_dir: Path, train_size: Sequence[int] = (512, 512),
                      infer_size: Sequence[int] = (512, 2048)) -> dict[str, tuple[int, int]]:
    """Counted FLOPs of each model's forward of one image at ``train_size`` and at ``infer_size``."""
    from .flops import model_complexity  # mmengine's counter: only the dense models need mm

    flops = {}
    for name, cfg in dense_configs(family).items():
        model = DenseParts(Path(config_dir) / cfg, DENSE[family][1]).eval()
        flops[name] = tuple(model_complexity(model, (torch.randn(1, 3, *size), )).flops
                            for size in (train_size, infer_size))
    return flops


def add_dense_flops(rows: list[dict], config_dir: Path, train_size: Sequence[int] = (512, 512),
                    infer_size: Sequence[int] = (512, 2048)) -> None:
    """Set each row's ``train_flops`` and ``infer_flops`` (:func:`count_dense_flops`, once per family)."""
    flops = {name: f for family in dict.fromkeys(r['family'] for r in rows)
             for name, f in count_dense_flops(family, config_dir, train_size, infer_size).items()}
    for row in rows:
        row['train_flops'], row['infer_flops'] = flops[row['model']]


TIMES = tuple(f'{kind}_{clock}_ms' for kind in ('train', 'infer') for clock in ('cpu', 'wall'))


def merge_processes(runs: list[list[dict]]) -> list[dict]:
    """One row per model from the rows of several processes (same models, same order): each time
    the median over the processes, the processes' own rows under ``'processes'``."""
    merged = []
    for rows in zip(*runs):
        merged.append({**rows[0], **{t: statistics.median(r[t] for r in rows) for t in TIMES},
                       'processes': list(rows)})
    return merged


def families(rows: list[dict]) -> Iterator[tuple[list[dict], dict, dict | None]]:
    """Per family, in the rows' order: its rows, its softmax model (the first) and its FLatten model."""
    for family in dict.fromkeys(r['family'] for r in rows):
        rs = [r for r in rows if r['family'] == family]
        yield rs, rs[0], next((r for r in rs if r['model'].startswith('FLatten')), None)


def dense_table(rows: list[dict], train_size: Sequence[int], infer_size: Sequence[int]) -> str:
    """Markdown table: times (CPU / wall) and their ratios to the softmax model and to FLatten; for rows
    of several processes (:func:`merge_processes`) each ratio is the median of the processes' ratios,
    their range in brackets."""
    train, infer = '×'.join(map(str, train_size)), '×'.join(map(str, infer_size))
    lines = [f'| model | measured | train step {train} ms (CPU / wall) | inference {infer} ms (CPU / wall) '
             '| train / softmax | train / FLatten | inference / softmax | inference / FLatten |',
             '|---|---|---|---|---|---|---|---|']
    for rs, base, flatten in families(rows):

        def cell(r, kind, fmt='{:.0f}'):
            return ' / '.join(fmt.format(r[f'{kind}_{c}_ms']) for c in ('cpu', 'wall'))

        def ratio(r, ref, kind):
            if ref is None:
                return '-'
            cells = []
            for c in ('cpu', 'wall'):
                key = f'{kind}_{c}_ms'
                each = [a[key] / b[key] for a, b in zip(r.get('processes', [r]), ref.get('processes', [ref]))]
                spread = f' ({min(each):.2f}–{max(each):.2f})' if len(each) > 1 else ''
                cells.append(f'{statistics.median(each):.2f}x{spread}')
            return ' / '.join(cells)

        for r in rs:
            lines.append(f"| {r['model']} | {r['measured']} | {cell(r, 'train')} | {cell(r, 'infer')} | "
                         f"{ratio(r, base, 'train')} | {ratio(r, flatten, 'train')} | "
                         f"{ratio(r, base, 'infer')} | {ratio(r, flatten, 'infer')} |")
    if all('train_flops' in r for r in rows):
        lines += ['', flops_table(rows, train, infer)]
    return '\n'.join(lines)


def flops_table(rows: list[dict], train: str, infer: str) -> str:
    """Markdown table of the rows' counted forward FLOPs and their ratios to the softmax model and to FLatten."""
    lines = [f'| model | GFLOPs {train} / {infer} (forward, counted) | / softmax | / FLatten |', '|---|---|---|---|']
    for rs, base, flatten in families(rows):

        def ratio(r, ref):
            return '-' if ref is None else ' / '.join(f"{r[k] / ref[k]:.3f}x" for k in ('train_flops', 'infer_flops'))

        for r in rs:
            lines.append(f"| {r['model']} | {r['train_flops'] / 1e9:.1f} / {r['infer_flops'] / 1e9:.1f} | "
                         f"{ratio(r, base)} | {ratio(r, flatten)} |")
    return '\n'.join(lines)


def write_results(out: Path, name: str, setting: str, rows: list[dict], report: str,
                  markdown: Path | None = None) -> None:
    """``NAME.json`` (``setting`` and ``rows``) and ``NAME.md`` (``setting`` and ``report``) under ``out``;
    the markdown also to ``markdown``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f'{name}.json').write_text(json.dumps({'setting': setting, 'rows': rows}, indent=1))
    for path in (out / f'{name}.md', markdown):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(setting + '\n\n' + report + '\n')
