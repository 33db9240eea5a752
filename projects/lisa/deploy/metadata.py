"""What inference from an exported ONNX file needs besides the graph, stored in the file's
``metadata_props`` (ONNX's key/value metadata, one JSON value per key).

The graph maps a normalised image batch to logits (:mod:`.onnx`); to run it on an image one
needs the data preprocessor's normalisation (``mean``, ``std``, ``bgr_to_rgb``), what the sides
must be multiples of and the value padding them (``size_divisor``, ``pad_val``), how the decode
head resizes its logits (``align_corners``), the dataset's ``classes`` and ``palette``, and the
``task`` (``'segmentation'``, or ``'detection'`` for a Mask R-CNN), the test pipeline's resize
(``resize``: mmcv's ``Resize`` or PVT's ``AlignResize``, with the arguments that act on the
image; a detector's boxes are divided by its scale factor, a segmentor's logits resized back to
the image) and a detector's mask threshold (``mask_thr``, ``test_cfg.rcnn.mask_thr_binary``).
:func:`inference_metadata` reads them from the config; :meth:`Metadata.from_props` reads them
back with json alone (no torch, no OpenMMLab import). The last two came later: a file without
them is refused (re-export it), since its results would silently not be the test's.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

TASKS = {'mmseg': 'segmentation', 'mmdet': 'detection'}
#: The fields a task needs beyond those every file carries (which have no default).
TASK_FIELDS = {'segmentation': ('resize', ), 'detection': ('resize', 'mask_thr')}
#: The test resizes inference reproduces: the arguments of each that act on the image, with their defaults.
RESIZE_ARGS = {
    'Resize': dict(scale=None, scale_factor=None, keep_ratio=False, interpolation='bilinear', backend='cv2'),
    'AlignResize': dict(scale=(2048, 512), size_divisor=32, interpolation='bilinear'),
}


class MetadataError(ValueError):
    """An ONNX file without (complete) inference metadata."""


@dataclass(frozen=True)
class Metadata:
    """Inference metadata of an exported model (see the module docstring)."""

    task: str
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    bgr_to_rgb: bool
    size_divisor: int | None
    pad_val: float
    align_corners: bool
    classes: tuple[str, ...]
    palette: tuple[tuple[int, int, int], ...]
    resize: dict | None = None
    mask_thr: float | None = None

    def to_props(self) -> dict[str, str]:
        """The ``metadata_props`` of the ONNX file: each field as JSON."""
        return {k: json.dumps(v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_props(cls, props: dict[str, str], source: str) -> Metadata:
        """Read back :meth:`to_props`; :class:`MetadataError` naming ``source`` if a key that every
        file or the file's task needs is missing."""
        fields = dataclasses.fields(cls)
        names = [f.name for f in fields if f.default is dataclasses.MISSING]
        task = json.loads(props['task']) if 'task' in props else None
        needed = names + list(TASK_FIELDS.get(task, ()))
        missing = [name for name in needed if name not in props]
        if missing:
            what = 'no' if missing == needed else f'incomplete (no {", ".join(missing)})'
            raise MetadataError(f'{source} carries {what} inference metadata: re-export it with tools/export_onnx.py')
        values = {f.name: json.loads(props[f.name]) for f in fields if f.name in props}
        for name in ('mean', 'std', 'classes'):
            values[name] = None if values[name] is None else tuple(values[name])
        values['palette'] = tuple(tuple(c) for c in values['palette'])
        if values.get('resize') is not None:  # mmcv's Resize takes tuples, not lists
            values['resize'] = {k: tuple(v) if isinstance(v, list) else v for k, v in values['resize'].items()}
        return cls(**values)


def inference_metadata(config: str | Path, cfg_options: dict | None = None) -> Metadata:
    """The metadata of the config's model: its data preprocessor, decode head, test dataset
    (built lazily, so mmseg's or mmdet's ``METAINFO`` and the config's ``metainfo`` resolve as
    in testing: no data is read), test pipeline and a detector's ``test_cfg``."""
    from mmengine.registry import DATASETS

    from .onnx import load_config  # torch and mmengine: not needed to read metadata back

    cfg, scope = load_config(config, cfg_options)
    prep = cfg.model.get('data_preprocessor', {})
    dataset = DATASETS.build({**cfg.test_dataloader.dataset, 'lazy_init': True})
    return Metadata(
        task=TASKS[scope],
        mean=None if prep.get('mean') is None else tuple(float(m) for m in prep['mean']),
        std=None if prep.get('std') is None else tuple(float(s) for s in prep['std']),
        bgr_to_rgb=bool(prep.get('bgr_to_rgb') or prep.get('rgb_to_bgr')),  # either swaps the channels
        size_divisor=size_divisor(cfg),
        pad_val=float(prep.get('pad_val', prep.get('pad_value', 0))),
        align_corners=bool(cfg.model.get('decode_head', {}).get('align_corners', False)),
        classes=tuple(dataset.metainfo['classes']),
        palette=tuple(tuple(int(v) for v in c) for c in dataset.metainfo['palette']),
        resize=pipeline_resize(cfg),
        mask_thr=None if scope != 'mmdet' else float(cfg.model.test_cfg.rcnn.mask_thr_binary))


def pipeline_resize(cfg) -> dict | None:
    """The test pipeline's resize: its ``type`` (mmcv's ``Resize``, which mmdet's and mmseg's
    extend to boxes and maps, or ``AlignResize``) and image arguments (:data:`RESIZE_ARGS`), or
    None if it has none."""
    resizes = [t for t in cfg.test_dataloader.dataset.get('pipeline', []) if t['type'].split('.')[-1] in RESIZE_ARGS]
    if len(resizes) > 1:
        raise MetadataError(f'the test pipeline resizes {len(resizes)} times; inference from the file does it once')
    if not resizes:
        return None
    kind = resizes[0]['type'].split('.')[-1]
    args = {'type': kind, **{k: resizes[0].get(k, default) for k, default in RESIZE_ARGS[kind].items()}}
    if isinstance(args['scale'], int):
        args['scale'] = (args['scale'], args['scale'])
    return {k: tuple(v) if isinstance(v, list) else v for k, v in args.items()}


def size_divisor(cfg) -> int | None:
    """What the input's sides must be multiples of at test time: the data preprocessor's test
    padding (mmseg ``test_cfg.size_divisor``, mmdet ``pad_size_divisor``), else the test
    pipeline's (``AlignResize`` rounds every test image's sides up to multiples of it)."""
    prep = cfg.model.get('data_preprocessor', {})
    divisor = (prep.get('test_cfg') or {}).get('size_divisor') or prep.get('pad_size_divisor')
    if divisor is None:
        divisor = next((t['size_divisor'] for t in cfg.test_dataloader.dataset.get('pipeline', [])
                        if 'size_divisor' in t), None)
    return divisor
