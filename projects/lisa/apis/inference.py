"""Run a trained model of any LiSA config on one image and draw its prediction.

The task is the config's library (:func:`~projects.lisa.registry.config_scope`); each goes through
that library's own inference call and visualiser, as its ``demo/image_demo.py`` does:

- ``mmseg``: ``mmseg.apis.inference_model``, drawn by ``SegLocalVisualizer`` (the label map
  blended over the image);
- ``mmdet``: ``mmdet.apis.inference_detector``, drawn by ``DetLocalVisualizer`` (boxes and
  masks above ``score_thr``);
- ``mmpretrain``: ``ImageClassificationInferencer``, drawn by ``UniversalVisualizer`` (the top
  class and its score).

The checkpoint is loaded strictly (:func:`~projects.lisa.models.backbones.loading.load_checkpoint_strictly`:
every tensor of the model from the file, every tensor of the file used, except what the
``allow_*`` globs name), not silently in part as the libraries' ``init_model`` would.
"""
from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

import mmcv
import numpy as np
from mmengine.config import Config
from mmengine.registry import init_default_scope
from torch import nn

from projects.lisa.data_checks.dataset_loading import leaf_cfgs
from projects.lisa.models.backbones.loading import load_checkpoint_strictly
from projects.lisa.registry import config_scope, register_all_modules


def _dataset_meta(cfg: Config, checkpoint: dict) -> dict:
    """The classes and palette a checkpoint was trained with (MMEngine saves them in ``meta``),
    else those of the config's test dataset."""
    meta = checkpoint.get('meta', {}).get('dataset_meta')
    if meta:
        return meta
    dataset = leaf_cfgs(cfg.test_dataloader.dataset)[0]  # inside wrappers (RepeatDataset, ...)
    registry = importlib.import_module(f'{config_scope(cfg, "test_dataloader")}.registry').DATASETS
    return {**registry.get(dataset.type).METAINFO, **(dataset.get('metainfo') or {})}


def init_model(config: str | Config, checkpoint: str, device: str = 'cpu', allow_new: Sequence[str] = (),
               allow_unused: Sequence[str] = (), allow_mismatch: Sequence[str] = (),
               cfg_options: dict | None = None) -> nn.Module:
    """The config's model with the checkpoint's weights (strict), in eval mode on ``device``;
    ``model.cfg`` holds the config, ``model.dataset_meta`` the classes (and palette)."""
    register_all_modules()
    cfg = Config.fromfile(config) if isinstance(config, (str, Path)) else config
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    init_default_scope(config_scope(cfg, "test_dataloader"))
    model_cfg = cfg.model.get('model', cfg.model)  # a distiller wraps the model
    model_cfg.get('backbone', {}).pop('init_cfg', None)  # the checkpoint holds the whole model
    model_cfg.pop('pretrained', None)
    from mmengine.registry import MODELS
    model = MODELS.build(cfg.model)
    ckpt = load_checkpoint_strictly(model, checkpoint, allow_new=allow_new, allow_unused=allow_unused,
                                    allow_mismatch=allow_mismatch)
    model.cfg = model._config = cfg  # mmpretrain's inferencers read ``_config``
    model.dataset_meta = _dataset_meta(cfg, ckpt)
    return model.to(device).eval()


def inference(model: nn.Module, image: str | np.ndarray):
    """The prediction of ``model`` (from :func:`init_model`) for one image: the library's data sample."""
    task = config_scope(model.cfg, "test_dataloader")
    if task == 'mmseg':
        from mmseg.apis import inference_model
        return inference_model(model, image)
    if task == 'mmdet':
        from mmdet.apis import inference_detector
        return inference_detector(model, image)
    from mmpretrain.apis import ImageClassificationInferencer
    inferencer = ImageClassificationInferencer(model, device=next(model.parameters()).device)
    batch = next(iter(inferencer.preprocess(inferencer._inputs_to_list([image]), batch_size=1)))
    return inferencer.forward(batch)[0]  # the inferencer's call, without its progress bar


def draw(model: nn.Module, image: str | np.ndarray, result, out_file: str, score_thr: float = 0.3,
         opacity: float = 0.5) -> np.ndarray:
    """Draw ``result`` over ``image`` as the model's library draws it and write it to ``out_file``;
    returns the drawn RGB image."""
    task = config_scope(model.cfg, "test_dataloader")
    rgb = mmcv.imread(image, channel_order='rgb') if isinstance(image, str) else mmcv.bgr2rgb(image)
    name = f'lisa_image_demo_{id(model)}'  # visualisers are global instances, one per name
    if task == 'mmseg':
        from mmseg.visualization import SegLocalVisualizer
        visualizer = SegLocalVisualizer.get_instance(name, alpha=opacity)
        visualizer.set_dataset_meta(model.dataset_meta['classes'], model.dataset_meta.get('palette'))
        visualizer.add_datasample('image', rgb, result, draw_gt=False, out_file=out_file)
    elif task == 'mmdet':
        from mmdet.visualization import DetLocalVisualizer
        visualizer = DetLocalVisualizer.get_instance(name, alpha=opacity)
        visualizer.dataset_meta = model.dataset_meta
        visualizer.add_datasample('image', rgb, result, draw_gt=False, out_file=out_file, pred_score_thr=score_thr)
    else:
        from mmpretrain.visualization import UniversalVisualizer
        visualizer = UniversalVisualizer.get_instance(name)
        visualizer.visualize_cls(rgb, result, classes=model.dataset_meta.get('classes'), draw_gt=False,
                                 out_file=out_file)
    return visualizer.get_image()


def describe(model: nn.Module, result, score_thr: float = 0.3) -> str:
    """One line saying what ``result`` predicts: the classes of a label map, the instances scored at least
    ``score_thr`` (those :func:`draw` draws), or the top class and its score."""
    classes = model.dataset_meta.get('classes', ())

    def name(i: int) -> str:
        return classes[i] if i < len(classes) else str(i)

    if 'pred_sem_seg' in result:
        return 'classes ' + ', '.join(name(i) for i in result.pred_sem_seg.data.unique().tolist())
    if 'pred_instances' in result:
        return f'{int((result.pred_instances.scores >= score_thr).sum())} instances scored >= {score_thr}'
    label = int(result.pred_label)
    return f'{name(label)} ({float(result.pred_score[label]):.3f})'
