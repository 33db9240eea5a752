"""The inference metadata of a config's model (:class:`.metadata.Metadata`), written into the
exported file by ``tools/export_onnx.py``: read from the config with MMEngine (and the mm library
of its scope), so this side needs torch; the reader (:mod:`.metadata`) needs json alone.
"""
from __future__ import annotations

from pathlib import Path

from .metadata import Metadata, MetadataError

TASKS = {'mmseg': 'segmentation', 'mmdet': 'detection'}
#: The test resizes inference reproduces (:mod:`.resize`): the arguments of each that act on the image, with
#: their defaults.
RESIZE_ARGS = {
    'Resize': dict(scale=None, scale_factor=None, keep_ratio=False, interpolation='bilinear', backend='cv2'),
    'AlignResize': dict(scale=(2048, 512), size_divisor=32, interpolation='bilinear'),
}


def inference_metadata(config: str | Path, cfg_options: dict | None = None) -> Metadata:
    """The metadata of the config's model: its data preprocessor, decode head, test dataset
    (built lazily, so mmseg's or mmdet's ``METAINFO`` and the config's ``metainfo`` resolve as
    in testing: no data is read), test pipeline and a detector's ``test_cfg``."""
    from mmengine.registry import DATASETS

    from .onnx import load_config

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
