"""What a config's pipeline feeds the model, drawn with its annotations (``tools/browse_dataset.py``).

As the ``browse_dataset.py`` of mmseg, mmdet and mmpretrain: the loader's dataset is built with its
pipeline, and each of its first samples, as the pipeline packs it (after resizing, cropping,
flipping; before the data preprocessor normalises it), is drawn by the library's own visualizer:
the label map blended over the image (``SegLocalVisualizer``), the boxes and masks
(``DetLocalVisualizer``) or the class (``UniversalVisualizer``). The task follows the config's
``default_scope``, else the library whose registry holds the dataset type.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from mmengine.config import Config

#: Scope -> the visualizer that draws its annotations.
DRAWERS = {'mmseg': 'SegLocalVisualizer', 'mmdet': 'DetLocalVisualizer', 'mmpretrain': 'UniversalVisualizer'}
LOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')


@dataclass
class Drawn:
    """One drawn sample: the file written, the image as the pipeline packed it (RGB) and its data sample."""

    path: Path
    image: np.ndarray
    data_sample: object


def _for_detection(data_sample):
    """Boxes as a tensor and masks as a boolean array, the forms ``DetLocalVisualizer`` draws."""
    from mmdet.structures.bbox import BaseBoxes
    from mmdet.structures.mask import BitmapMasks, PolygonMasks

    instances = data_sample.gt_instances
    if isinstance(instances.get('bboxes'), BaseBoxes):
        instances.bboxes = instances.bboxes.tensor
    if isinstance(instances.get('masks'), (BitmapMasks, PolygonMasks)):
        instances.masks = instances.masks.to_ndarray().astype(bool)
    return data_sample


def browse(cfg: Config, output_dir: str | Path, max_samples: int = 10, loader: str = 'train_dataloader') -> list[Drawn]:
    """Draw the first ``max_samples`` samples of ``cfg``'s ``loader`` into ``output_dir`` as PNG files."""
    from mmengine.registry import DATASETS, VISUALIZERS, init_default_scope

    from ..data_checks.data_check import check_data_roots
    from ..registry import config_scope, register_all_modules
    if max_samples < 1:
        raise ValueError(f'max_samples={max_samples}; expected a positive number of samples to draw')
    if loader not in LOADERS or not cfg.get(loader):
        raise ValueError(f'loader {loader!r} is not in the config; it has: '
                         f'{", ".join(name for name in LOADERS if cfg.get(name))}')
    check_data_roots(cfg, (loader, ))  # a missing dataset: what is missing and how to prepare it
    register_all_modules()
    scope = config_scope(cfg, loader)
    init_default_scope(scope)
    dataset = DATASETS.build(cfg[loader].dataset)
    visualizer = VISUALIZERS.build(
        {**(cfg.get('visualizer') or {}), 'type': DRAWERS[scope], 'name': 'browse_dataset', 'vis_backends': None})
    visualizer.dataset_meta = dataset.metainfo
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    drawn = []
    for index in range(min(max_samples, len(dataset))):
        item = dataset[index]
        image = np.ascontiguousarray(item['inputs'].permute(1, 2, 0).numpy()[..., ::-1])  # packed BGR -> RGB
        data_sample = item['data_samples'].numpy()
        path = output_dir / f'{index:04d}_{Path(data_sample.img_path).stem}.png'
        if scope == 'mmpretrain':
            visualizer.visualize_cls(image, data_sample, draw_pred=False, out_file=str(path), name=path.stem)
        else:
            if scope == 'mmdet':
                data_sample = _for_detection(data_sample)
            visualizer.add_datasample(path.stem, image, data_sample, draw_gt=True, draw_pred=False,
                                      out_file=str(path))
        drawn.append(Drawn(path, image, data_sample))
    return drawn
