"""LiSA backbones drop into other mm architectures with the few lines the README shows.

Each case is a config of a few lines inheriting an architecture that the paper
does not use (RetinaNet, Cascade Mask R-CNN, DeepLabV3+) from its mm library;
the reference is the library's own model: it must build, compute its losses on a
small batch and send gradients back into the LiSA attention.
"""
import functools
import tempfile
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope
from mmengine.structures import PixelData

# The README's recipe: inherit any config, swap the backbone, give the neck/heads its channels.
SNIPPETS = {
    'retinanet_lisa-pvt-t': """
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = 'mmdet::retinanet/retinanet_r50_fpn_1x_coco.py'
model = dict(
    backbone=dict(_delete_=True, type='LiSAPVT', arch='tiny', init_cfg=None),
    neck=dict(in_channels=[64, 128, 320, 512]))
""",
    'cascade-mask-rcnn_lisa-swin-t': """
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = 'mmdet::cascade_rcnn/cascade-mask-rcnn_r50_fpn_1x_coco.py'
model = dict(
    backbone=dict(_delete_=True, type='LiSASwinTransformer', arch='tiny', init_cfg=None),
    neck=dict(in_channels=[96, 192, 384, 768]))
""",
    'deeplabv3plus_lisa-pvt-t': """
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = 'mmseg::deeplabv3plus/deeplabv3plus_r50-d8_4xb4-80k_ade20k-512x512.py'
model = dict(
    pretrained=None,
    backbone=dict(_delete_=True, type='LiSAPVT', arch='tiny', init_cfg=None),
    decode_head=dict(in_channels=512, c1_in_channels=64),
    auxiliary_head=dict(in_channels=320))
""",
}


@functools.cache
def build(name: str) -> torch.nn.Module:
    """The model of ``SNIPPETS[name]``, written to a config file and built as mm tools do (once per session)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f'{name}.py'
        path.write_text(SNIPPETS[name])
        cfg = Config.fromfile(str(path))
    assert '://' not in cfg.pretty_text
    if cfg.default_scope == 'mmseg':  # BN on one CPU process, a small test input
        cfg.merge_from_dict({'model.data_preprocessor.size': (64, 64)})
        for head in ('decode_head', 'auxiliary_head'):
            cfg.model[head].norm_cfg = dict(type='BN', requires_grad=True)
    else:  # fewer proposals and RoIs than on COCO, to keep the CPU test short
        if 'rpn_proposal' in cfg.model.train_cfg:
            cfg.model.train_cfg.rpn_proposal.max_per_img = cfg.model.test_cfg.rpn.max_per_img = 100
        rcnn = cfg.model.train_cfg.get('rcnn')
        for stage in rcnn if isinstance(rcnn, list) else [rcnn] if rcnn else []:
            stage.sampler.num = 64
    init_default_scope(cfg.default_scope)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model


def det_batch(with_mask: bool) -> dict:
    from mmdet.testing import demo_mm_inputs
    torch.manual_seed(0)
    return demo_mm_inputs(batch_size=2, image_shapes=[(3, 64, 96), (3, 64, 96)], num_items=[3, 2],
                          num_classes=80, with_mask=with_mask)


def seg_batch() -> dict:
    from mmseg.structures import SegDataSample
    torch.manual_seed(0)
    inputs, samples = [], []
    for _ in range(2):
        inputs.append(torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8))
        sample = SegDataSample(metainfo=dict(img_shape=(64, 64), ori_shape=(64, 64)))
        sample.gt_sem_seg = PixelData(data=torch.randint(0, 150, (1, 64, 64)))
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


@pytest.mark.slow
@pytest.mark.parametrize('name', SNIPPETS)
def test_lisa_backbone_trains_inside_another_mm_architecture(name):
    model = build(name)
    model.train()
    model.zero_grad()
    batch = seg_batch() if name.startswith('deeplab') else det_batch(with_mask='mask' in name)
    data = model.data_preprocessor(batch, True)
    losses = model(**data, mode='loss')
    loss, log_vars = model.parse_losses(losses)
    assert torch.isfinite(loss) and loss > 0
    expected = {'retinanet': {'loss_cls', 'loss_bbox'}, 'cascade': {'s2.loss_mask', 's0.loss_cls', 'loss_rpn_cls'},
                'deeplabv3plus': {'decode.loss_ce', 'aux.loss_ce'}}[name.split('-')[0].split('_')[0]]
    assert expected <= set(log_vars)
    loss.backward()
    lisa = [m for m in model.backbone.modules() if type(m).__name__ == 'LiSAAttention']
    assert lisa, 'the default backbone uses LiSA'
    grads = [p.grad for m in lisa for p in m.qkv.parameters()]
    assert all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)


@pytest.mark.slow
@pytest.mark.parametrize('name', SNIPPETS)
def test_lisa_backbone_predicts_inside_another_mm_architecture(name):
    model = build(name).eval()
    batch = seg_batch() if name.startswith('deeplab') else det_batch(with_mask='mask' in name)
    with torch.no_grad():
        data = model.data_preprocessor(batch, False)
        results = model(**data, mode='predict')
    assert len(results) == 2
    if name.startswith('deeplab'):
        assert results[0].pred_sem_seg.data.shape == (1, 64, 64)
    else:
        assert results[0].pred_instances.bboxes.shape[1] == 4
        if 'mask' in name:
            assert 'masks' in results[0].pred_instances
