"""``make demo`` (``tools/demo.py``): the Table 1 -> Tables 3-4 hand-off and a detector that can detect.

References: the dense demo configs as MMEngine resolves them (which file their backbones load,
under which prefix), mmdet's own anchor generator and IoU (which generated objects the RPN can
be trained on), the generated COCO itself (the object sizes the anchors must cover) and RoIAlign
on contiguous copies of the feature maps (what the box and mask heads must be given).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from projects.lisa.synthetic import generate
from tools import demo

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize('config', [demo.SEG_CONFIG, demo.DET_CONFIG], ids=['semantic-fpn', 'mask-rcnn'])
def test_dense_demo_backbones_load_the_file_the_demo_copies_the_classifier_to(config):
    cfg = Config.fromfile(str(ROOT / config))
    init = cfg.model.backbone.init_cfg
    assert (init.type, init.checkpoint, init.prefix) == ('Pretrained', demo.dense_pretrained(), 'backbone.')
    # the demo's classifier holds every tensor of the dense backbone, at the same shape
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    shapes = [{k: v.shape for k, v in MODELS.build(c.model.backbone).state_dict().items()}
              for c in (Config.fromfile(str(ROOT / demo.CLS_CONFIG)), cfg)]
    assert shapes[0] == shapes[1]


def test_demo_data_are_what_the_configs_read():
    for config, data in ((demo.CLS_CONFIG, demo.CLS_DATA), (demo.SEG_CONFIG, demo.SEG_DATA),
                         (demo.DET_CONFIG, demo.DET_DATA)):
        cfg = Config.fromfile(str(ROOT / config))
        root = cfg.train_dataloader.dataset.data_root
        assert root.rstrip('/').endswith({'imagenet': 'imagenet', 'ade20k': 'ADEChallengeData2016',
                                          'coco': 'coco'}[data['dataset']])
    assert demo.DET_DATA['size'] == Config.fromfile(str(ROOT / demo.DET_CONFIG)).scale[1]  # no resizing


@pytest.fixture(scope='module')
def coco_boxes(tmp_path_factory) -> torch.Tensor:
    """(N, 4) x1y1x2y2 boxes of every non-crowd object of the demo's generated COCO (both splits)."""
    out = tmp_path_factory.mktemp('coco')
    params = {k: v for k, v in demo.DET_DATA.items() if k != 'dataset'}
    generate('coco', out, **params)
    boxes = []
    for split in ('train', 'val'):
        content = json.loads((out / 'coco' / 'annotations' / f'instances_{split}2017.json').read_text())
        boxes += [a['bbox'] for a in content['annotations'] if not a['iscrowd']]
    xywh = torch.tensor(boxes)
    return torch.cat([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], dim=1)


def test_every_generated_object_has_an_anchor_the_rpn_assigner_calls_positive(coco_boxes):
    """mmdet's MaxIoUAssigner makes an object's best anchor positive only at IoU >= min_pos_iou."""
    from mmdet.structures.bbox import bbox_overlaps
    from mmdet.utils import register_all_modules
    from mmengine.registry import TASK_UTILS
    register_all_modules()
    cfg = Config.fromfile(str(ROOT / demo.DET_CONFIG))
    generator = TASK_UTILS.build(cfg.model.rpn_head.anchor_generator)
    height = demo.DET_DATA['size']
    width = int(1.5 * height) + 1  # the widest generated image
    sizes = [(-(-height // s), -(-width // s)) for s, _ in generator.strides]
    anchors = torch.cat(generator.grid_priors(sizes, device='cpu'))
    best = bbox_overlaps(coco_boxes, anchors).max(dim=1).values
    min_pos_iou = cfg.model.train_cfg.rpn.assigner.min_pos_iou
    assert best.min() >= min_pos_iou, f'{(best < min_pos_iou).sum()} of {len(best)} objects without an anchor'
    # the recipe's anchors (scale 8) leave the smallest objects without one: why the demo halves them
    recipe = TASK_UTILS.build({**cfg.model.rpn_head.anchor_generator, 'scales': [8]})
    recipe_best = bbox_overlaps(coco_boxes, torch.cat(recipe.grid_priors(sizes, device='cpu'))).max(dim=1).values
    assert (recipe_best < min_pos_iou).any()


def roi_features_and_reference(config: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For the Mask R-CNN of ``config`` (random weights, eval mode) on a batch of two 96 x 128 images,
    as in training (with one image the maps happen to be contiguous): the features its box and mask
    RoI extractors give for some boxes, beside the same extractors' features from contiguous copies
    of the maps (RoIAlign's input layout, which the result must not depend on)."""
    from mmdet.registry import MODELS
    from mmengine.registry import DefaultScope
    cfg = Config.fromfile(str(ROOT / config))
    cfg.model.backbone.init_cfg = None  # random weights: the layout, not the values, is under test
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmdet'):  # other tests may leave another scope current
        model = MODELS.build(cfg.model).eval()
    rois = torch.tensor([[0, 8.0, 10.0, 40.0, 50.0], [1, 50.0, 20.0, 110.0, 90.0], [1, 20.0, 30.0, 36.0, 44.0]])
    with torch.no_grad():
        maps = model.extract_feat(torch.randn(2, 3, 96, 128))
        contiguous = [m.contiguous() for m in maps]
        return [(extractor(maps[:extractor.num_inputs], rois), extractor(contiguous[:extractor.num_inputs], rois))
                for extractor in (model.roi_head.bbox_roi_extractor, model.roi_head.mask_roi_extractor)]


@pytest.mark.parametrize('config', [demo.DET_CONFIG, *(  # the demo and the Table 4 LiSA-PVT-T row fast, others slow
    pytest.param(c, marks=() if 'lisa-pvt' in c else pytest.mark.slow) for c in sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / 'configs/detection').glob('mask-rcnn_*.py')))])
def test_mask_rcnn_heads_get_the_roi_features_of_their_maps(config):
    """The backbones return contiguous maps: a channels-last view of their tokens, which mmcv's RoIAlign
    (open-mmlab/mmcv#2203) reads as NCHW, trains every Table 4 box and mask head on scrambled RoI
    features (the demo's box AP50 drops to 0.1)."""
    for features, reference in roi_features_and_reference(config):
        assert features.abs().sum() > 0
        torch.testing.assert_close(features, reference, rtol=0, atol=0)
