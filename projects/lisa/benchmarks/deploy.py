"""Deployment figures: the exported models against eager PyTorch.

* **The demo's trained Mask R-CNN** (:func:`measure_trained`): exported once, then mmdet's own
  test (``model.test_step``) and onnxruntime on the generated COCO val images at each test
  scale, compared by :func:`projects.lisa.deploy.agreement.compare` (counts, one-to-one matched
  boxes, scores and pasted masks, box and mask AP).
* **The paper's dense models** (:func:`measure_model`, :data:`MODELS`) at full widths with random
  weights: export time, file size, latency of eager (the exported module itself, under
  ``torch.no_grad``), of eager on the reference ops (what the export traces: where onnxruntime
  trails eager, this tells the missing CPU kernels from onnxruntime's own cost) and of
  onnxruntime on the same input with the same thread count, the three taking turns run by run
  (:func:`.timing.median_times`), and how far eager and onnxruntime agree:
  segmentors by :func:`projects.lisa.deploy.relative_errors` at two sizes, detectors by
  :func:`~projects.lisa.deploy.agreement.compare` on generated COCO images. Random weights detect
  nothing above the score threshold, so each detector is first made confident in the generated
  classes (:func:`~projects.lisa.deploy.agreement.make_confident`): the timed graph then runs NMS
  and the mask head on up to ``max_per_img`` detections (``K``, reported).

:func:`document` writes the markdown (:func:`trained_table`, :func:`segmentor_table`,
:func:`detector_table`).
"""
from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from ..analysis.paper import paper_models
from .timing import median_times

#: name -> config (under ``configs/``) of the dense models of the paper's Tables 3 and 4.
MODELS = {m.name: m.config for table in ('Table 3', 'Table 4') for m in paper_models(table)}

MB = 1e6
#: The timed sides of :func:`latency`.
SIDES = ('eager', 'reference', 'onnxruntime')


def key(name: str) -> str:
    """The command-line name of a model of :data:`MODELS`, as its config names it: ``'S-FPN LiSA-PVT-T'`` ->
    ``'fpn-lisa-pvt-t'``, ``'Mask R-CNN Swin-T'`` -> ``'mask-rcnn-swin-t'``."""
    return name.lower().replace('s-fpn', 'fpn').replace('r-cnn', 'rcnn').replace(' ', '-')


def padded(shape: Sequence[int], divisor: int = 32) -> tuple[int, int]:
    """``shape (h, w)`` rounded up to multiples of ``divisor``, as the data preprocessor pads."""
    return tuple(math.ceil(s / divisor) * divisor for s in shape)


def timed_export(wrapped, shape: Sequence[int], path: Path, opset: int, metadata: dict | None = None,
                 shaped: bool = True) -> float:
    """Seconds :func:`projects.lisa.deploy.export` took to write ``path`` at ``shape``."""
    from projects.lisa.deploy import export

    start = time.perf_counter()
    export(wrapped, tuple(shape), path, opset, metadata=metadata, shaped=shaped)
    return time.perf_counter() - start


def latency(wrapped, session, inputs: Sequence[torch.Tensor], warmup: int, repeats: int,
            budget_s: float) -> dict[str, dict[str, float]]:
    """Median seconds (``wall``, process ``cpu``) of :data:`SIDES` on the same inputs, taking turns:
    eager ``wrapped(*inputs)`` as it runs (the fastest backend, the CPU kernels where built), eager on
    the ``'reference'`` backend (the tensor operations the export traces), and onnxruntime's
    ``session``: ``{'eager': ..., 'reference': ..., 'onnxruntime': ...}``."""
    from projects.lisa.models.attention.ops.backend import use_backend

    feed = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}

    def eager() -> None:
        with torch.no_grad():
            wrapped(*inputs)

    def reference() -> None:
        with torch.no_grad(), use_backend('reference'):
            wrapped(*inputs)

    return median_times({'eager': eager, 'reference': reference, 'onnxruntime': lambda: session.run(None, feed)},
                        torch.device('cpu'), warmup, repeats, budget_s)


def op_profile(path: Path, inputs: Sequence[torch.Tensor], threads: int, runs: int = 3) -> dict:
    """Where onnxruntime spends its time on the file at ``path``: its per-node profile
    (``SessionOptions.enable_profiling``) over ``runs`` runs after one warm-up, summed by op type.
    ``{'ms': {op type: ms per run}, 'nodes': {op type: nodes in the file}}``; op types that onnxruntime
    makes by fusion (``FusedMatMul``, ``Gemm`` from ``MatMul + Add``) count where they run, not in the file."""
    import json
    import tempfile
    from collections import Counter

    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        options.profile_file_prefix = str(Path(tmp) / 'profile')
        session = ort.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])
        feed = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
        for _ in range(1 + runs):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
    warm_up = min((e for e in events if e.get('name') == 'model_run'), key=lambda e: e['ts'])
    ms = Counter()
    for e in events:
        if e.get('cat') == 'Node' and e['name'].endswith('_kernel_time') and e['ts'] > warm_up['ts'] + warm_up['dur']:
            ms[e['args']['op_name']] += e['dur'] / 1e3 / runs
    nodes = Counter(n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node)
    return dict(ms=dict(ms.most_common()), nodes=dict(nodes.most_common()))


def timing_row(times: dict[str, dict[str, float]]) -> dict[str, float]:
    """Milliseconds of :func:`latency` as flat row fields."""
    return {f'{side}_{clock}_ms': times[side][clock] * 1e3 for side in SIDES for clock in ('cpu', 'wall')}


def measure_model(name: str, configs: Path, work: Path, threads: int, seg_size: Sequence[int],
                  det_size: Sequence[int], coco_root: Path, images: int, warmup: int, repeats: int,
                  budget_s: float, opset: int = 18, seed: int = 0, keep: bool = False, profile: bool = False) -> dict:
    """The row of one model of :data:`MODELS` (module docstring), its config under ``configs``,
    its ONNX file under ``work`` (removed afterwards unless ``keep``); with ``profile`` also
    onnxruntime's time by op type (:func:`op_profile`), of that file and of the export with the references
    traced as they are (``profile_reference``: the graph before :func:`projects.lisa.deploy.shaped
    .export_formulations`)."""
    from projects.lisa.deploy import MaskRCNNDetections, agreement, build_model, relative_errors
    from projects.lisa.deploy.onnx import ort_session

    config = configs / MODELS[name]
    torch.manual_seed(seed)
    wrapped = build_model(str(config), None)
    detector = isinstance(wrapped, MaskRCNNDetections)
    if detector:
        loader = agreement.detection_loader(config, coco_root, images=images)
        agreement.make_confident(wrapped, agreement.drawn_classes(loader))
    shape = padded(det_size) if detector else tuple(seg_size)
    path = work / f'{key(name)}.onnx'
    row = dict(model=name, task='detection' if detector else 'segmentation', size=list(det_size if detector
                                                                                       else seg_size))
    row['export_s'] = timed_export(wrapped, shape, path, opset)
    row['file_mb'] = path.stat().st_size / MB
    session = ort_session(path, threads)
    x = torch.randn(1, 3, *shape, generator=torch.Generator().manual_seed(seed))
    if detector:  # the image inside the padding, the padding 0 (as the normalised, padded batch)
        x[..., det_size[0]:, :] = 0
        x[..., det_size[1]:] = 0
        inputs = (x, torch.tensor(det_size))
    else:
        inputs = (x, )
    row.update(timing_row(latency(wrapped, session, inputs, warmup, repeats, budget_s)))
    if profile:
        row['profile'] = op_profile(path, inputs, threads)
        before = work / f'{key(name)}-reference-ops.onnx'
        timed_export(wrapped, shape, before, opset, shaped=False)
        row['profile_reference'] = op_profile(before, inputs, threads)
        before.unlink()
    if detector:
        with torch.no_grad():
            eager_k = len(wrapped(*inputs)[0])
        onnx_k = len(session.run(None, {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)})[0])
        row['k'] = (eager_k, onnx_k)
        row['agreement'] = agreement.compare(wrapped, session, loader, ap=False)
        if eager_k != onnx_k:
            row['agreement']['failures'].append(f'{eager_k} eager vs {onnx_k} onnxruntime detections on the '
                                                'timed input')
    else:
        check = (seg_size[0] + 32, seg_size[1] + 64)
        row['errors'] = [(list(s), e) for s, _, e in relative_errors(wrapped, path, [tuple(seg_size), check],
                                                                     seed=seed)]
    if not keep:
        path.unlink()
    return row


def measure_trained(config: Path, checkpoint: Path, data_root: Path, scales: Sequence[float], work: Path,
                    threads: int, opset: int = 18) -> list[dict]:
    """Per test scale (times the config's): the item-1 comparison of the trained Mask R-CNN at
    ``checkpoint`` on the COCO val set at ``data_root`` (its ONNX file exported once, at the
    first scale, under ``work``)."""
    from projects.lisa.deploy import agreement, build_model, inference_metadata
    from projects.lisa.deploy.onnx import ort_session

    wrapped = build_model(str(config), str(checkpoint))
    loaders = {scale: agreement.detection_loader(config, data_root, scale) for scale in scales}
    w, h = agreement.resize_scale(loaders[scales[0]])
    path = work / 'trained-mask-rcnn.onnx'
    export_s = timed_export(wrapped, padded((h, w)), path, opset, inference_metadata(config).to_props())
    session = ort_session(path, threads)
    rows = []
    for scale, loader in loaders.items():
        row = dict(scale=scale, resize=list(agreement.resize_scale(loader)), export_s=export_s,
                   file_mb=path.stat().st_size / MB)
        row.update(agreement.compare(wrapped, session, loader))
        rows.append(row)
    return rows


def machine() -> str:
    """The CPU's model name, the cores this process may use, the OS."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                name = line.split(':', 1)[1].strip()
                break
    except OSError:
        pass
    return f'{name}, {len(os.sched_getaffinity(0))} cores available, {platform.system()} {platform.release()}'


def ms(row: dict, side: str) -> str:
    return f"{row[f'{side}_cpu_ms']:.0f} / {row[f'{side}_wall_ms']:.0f}"


def ratio(row: dict, over: str = 'eager') -> str:
    return ' / '.join(f"{row[f'onnxruntime_{c}_ms'] / row[f'{over}_{c}_ms']:.2f}x" for c in ('cpu', 'wall'))


#: The latency columns of both model tables (:func:`latency_cells`).
LATENCY_HEADER = ('eager ms {h}×{w} (CPU / wall) | eager, reference ops ms (CPU / wall) '
                  '| onnxruntime ms (CPU / wall) | onnxruntime / eager (CPU / wall) '
                  '| onnxruntime / reference ops (CPU / wall)')


def latency_cells(row: dict) -> str:
    """The cells under :data:`LATENCY_HEADER`: the three sides' times, onnxruntime's over two of them."""
    return ' | '.join([ms(row, 'eager'), ms(row, 'reference'), ms(row, 'onnxruntime'), ratio(row),
                       ratio(row, 'reference')])


def verdict(failures: Sequence[str]) -> str:
    return 'yes' if not failures else 'NO: ' + '; '.join(failures)


def trained_table(rows: Sequence[dict]) -> str:
    """The item-1 comparison of :func:`measure_trained`, a row per test scale."""
    lines = ['| test scale (Resize w×h) | images | near-ties | detections eager / onnxruntime '
             '| images with other counts | min box IoU | max score diff | min mask IoU | box AP eager / onnxruntime '
             '| mask AP eager / onnxruntime | within bounds |',
             '|---|---|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        (box_e, box_o), (mask_e, mask_o) = r['ap']['bbox'], r['ap']['segm']
        lines.append(f"| {r['scale']:g}× ({r['resize'][0]}×{r['resize'][1]}) | {r['images']} | "
                     f"{r['near_ties']} | {r['eager']} / "
                     f"{r['onnx']} | {r['count_mismatches']} | {r['min_iou']:.4f} | {r['max_score_diff']:.1e} | "
                     f"{r['min_mask_iou']:.4f} | {100 * box_e:.1f} / {100 * box_o:.1f} | "
                     f"{100 * mask_e:.1f} / {100 * mask_o:.1f} | {verdict(r['failures'])} |")
    return '\n'.join(lines)


def segmentor_table(rows: Sequence[dict]) -> str:
    """Export, latency and relative errors of the segmentor rows of :func:`measure_model`."""
    rows = [r for r in rows if r['task'] == 'segmentation']
    if not rows:
        return ''
    sizes = ' / '.join(f'{h}×{w}' for (h, w), _ in rows[0]['errors'])
    h, w = rows[0]['size']
    lines = [f'| model | export s | file MB | {LATENCY_HEADER.format(h=h, w=w)} | relative error {sizes} |',
             '|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        errors = ' / '.join(f'{e:.1e}' for _, e in r['errors'])
        lines.append(f"| {r['model']} | {r['export_s']:.0f} | {r['file_mb']:.1f} | {latency_cells(r)} | {errors} |")
    return '\n'.join(lines)


def detector_table(rows: Sequence[dict]) -> str:
    """Export, latency, K and agreement of the detector rows of :func:`measure_model`."""
    rows = [r for r in rows if r['task'] == 'detection']
    if not rows:
        return ''
    h, w = rows[0]['size']
    lines = [f'| model | export s | file MB | {LATENCY_HEADER.format(h=h, w=w)} | K eager / onnxruntime | images '
             '| near-ties | detections eager / onnxruntime | min box IoU | max score diff | min mask IoU '
             '| within bounds |',
             '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        a = r['agreement']
        lines.append(f"| {r['model']} | {r['export_s']:.0f} | {r['file_mb']:.1f} | {latency_cells(r)} | "
                     f"{r['k'][0]} / {r['k'][1]} | {a['images']} | {a['near_ties']} | "
                     f"{a['eager']} / {a['onnx']} | {a['min_iou']:.4f} | {a['max_score_diff']:.1e} | "
                     f"{a['min_mask_iou']:.4f} | {verdict(a['failures'])} |")
    return '\n'.join(lines)


def profile_table(rows: Sequence[dict], top: int = 14) -> str:
    """onnxruntime's time by op type (:func:`op_profile`) of the rows that have it, side by side (a row's
    reference-ops export first where it has one: before and after the shaping): ms per run (share of the
    nodes' total) and the file's nodes of that type, the ``top`` op types by time, the rest summed."""
    columns = [(f"{r['model']}{label}", r[field]) for r in rows
               for field, label in (('profile_reference', ', reference ops traced'), ('profile', '')) if field in r]
    if not columns:
        return ''
    totals = [sum(p['ms'].values()) for _, p in columns]
    ops = sorted({op for _, p in columns for op in (*p['ms'], *p['nodes'])},
                 key=lambda op: -max(p['ms'].get(op, 0) / t for (_, p), t in zip(columns, totals)))
    lines = ['| op type | ' + ' | '.join(f'{name} ms (share) | nodes' for name, _ in columns) + ' |',
             '|---|' + '---|---|' * len(columns)]

    def cells(names: Sequence[str]) -> str:
        return ' | '.join(f"{sum(p['ms'].get(op, 0) for op in names):.0f} "
                          f"({100 * sum(p['ms'].get(op, 0) for op in names) / t:.0f}%) | "
                          f"{sum(p['nodes'].get(op, 0) for op in names)}" for (_, p), t in zip(columns, totals))

    lines += [f'| {op} | {cells([op])} |' for op in ops[:top]]
    if ops[top:]:
        lines.append(f'| other ({len(ops) - top} types) | {cells(ops[top:])} |')
    lines.append(f'| **all nodes** | {cells(ops)} |')
    return '\n'.join(lines)


def document(command: str, setting: str, trained: Sequence[dict], trained_note: str, models: Sequence[dict],
             models_note: str, wall_s: float, profile_note: str = '') -> str:
    """The markdown of ``docs/deploy.md``: what wrote it, the setting, the tables."""
    parts = ['# Deployment: ONNX export and onnxruntime against eager PyTorch', '',
             f'Written by `{command}` (do not edit by hand), in {wall_s / 60:.0f} min.', '', f'Setting: {setting}.']
    if trained:
        parts += ['', "## The demo's trained Mask R-CNN: onnxruntime's detections against mmdet's test", '',
                  trained_note, '', trained_table(trained)]
    if models:
        parts += ['', "## The paper's models: export, latency, agreement", '', models_note]
        for table in (segmentor_table(models), detector_table(models)):
            if table:
                parts += ['', table]
        if profile_table(models):
            parts += ['', "### Where onnxruntime's time goes", '', profile_note, '', profile_table(models)]
    return '\n'.join(parts) + '\n'
