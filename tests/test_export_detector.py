"""Mask R-CNN exported whole (projects/lisa/deploy/detector.py): its stand-ins of mmcv's and mmdet's
ops against theirs, and onnxruntime's detections against mmdet's own eager test."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from projects.lisa import deploy
from projects.lisa.deploy import agreement, detector
from projects.lisa.deploy.onnx import ort_session

mmcv_ops = pytest.importorskip('mmcv.ops')
pytest.importorskip('onnxruntime')

ROOT = Path(__file__).resolve().parents[1]


def random_boxes(n: int, generator: torch.Generator, side: float = 50) -> torch.Tensor:
    """``n`` boxes ``(x1, y1, x2, y2)`` in a ``side``-square image, sides 1 to 21 (many overlaps)."""
    xy = torch.rand(n, 2, generator=generator) * side
    return torch.cat([xy, xy + torch.rand(n, 2, generator=generator) * 20 + 1], 1)


@pytest.mark.parametrize('size, scale', [(7, 1 / 4), (14, 1 / 8), (7, 1 / 32)])
def test_roi_align_is_mmcv_roi_align_aligned(size, scale):
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(2, 3, 13, 17, generator=generator)
    boxes = random_boxes(40, generator, side=17 / scale) * torch.tensor([1.0, 0.8, 1.0, 0.8])
    rois = torch.cat([torch.randint(0, 2, (40, 1), generator=generator).float(), boxes], 1)
    expected = mmcv_ops.RoIAlign(size, scale, sampling_ratio=0, pool_mode='avg', aligned=True)(features, rois)
    torch.testing.assert_close(torch.ops.lisa.roi_align(features, rois, size, scale), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('means, stds', [((0., 0., 0., 0.), (1., 1., 1., 1.)), ((0., 0., 0., 0.), (.1, .1, .2, .2)),
                                         ((.1, -.2, .05, 0.), (.5, 1., 2., .3))])
def test_decode_boxes_is_mmdet_delta_xywh_decode(means, stds):
    """Large deltas too: boxes leaving the image (clipped) and sizes past the ratio clip."""
    from mmdet.models.task_modules.coders import DeltaXYWHBBoxCoder

    generator = torch.Generator().manual_seed(0)
    priors = random_boxes(500, generator)
    deltas = torch.randn(500, 4, generator=generator) * 3
    expected = DeltaXYWHBBoxCoder(means, stds).decode(priors, deltas, max_shape=(45, 60))
    actual = detector.decode_boxes(priors, deltas, means, stds, torch.tensor([45, 60]))
    assert (actual[:, 2] == 60).any() and (actual[:, 1] == 0).any()  # clipping happened
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


@pytest.mark.parametrize('groups, iou', [(1, 0.5), (5, 0.7), (80, 0.5)])
def test_batched_nms_keeps_what_mmcv_batched_nms_keeps(groups, iou):
    """And keeps nothing of nothing (where mmcv's needs its callers' guard)."""
    generator = torch.Generator().manual_seed(0)
    for n in (1, 60, 400):
        boxes, scores = random_boxes(n, generator), torch.rand(n, generator=generator)
        idxs = torch.randint(0, groups, (n, ), generator=generator)
        _, keep = mmcv_ops.batched_nms(boxes, scores, idxs, dict(type='nms', iou_threshold=iou))
        assert torch.equal(detector.batched_nms(boxes, scores, idxs, iou), keep)
    assert detector.batched_nms(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.long), iou).shape == (0, )


# Tiny widths (one block per stage) of each detection config, for an export in about a minute.
TINY = {
    'pvt': ('backbone=dict(arch=dict(_delete_=True, embed_dims=[16, 32, 48, 64], depths=[1, 1, 1, 1], '
            'num_heads=[1, 2, 2, 4], mlp_ratios=[2, 2, 2, 2]))', [16, 32, 48, 64]),
    'swin': ('backbone=dict(arch=dict(_delete_=True, embed_dims=16, depths=[1, 1, 2, 1], num_heads=[1, 2, 2, 4]))',
             [16, 32, 64, 128]),
}
HEADS = ('rpn_head=dict(in_channels=16, feat_channels=16), roi_head=dict(bbox_roi_extractor=dict(out_channels=16), '
         'bbox_head=dict(in_channels=16, fc_out_channels=32), mask_roi_extractor=dict(out_channels=16), '
         'mask_head=dict(in_channels=16, conv_out_channels=16))')


def detection_config(base: Path, data_root: Path, out: Path, model: str) -> Path:
    """``base`` testing on the generated COCO val set at ``data_root`` (images enlarged 1.25 times:
    a scale factor to undo, and padding), its ``model`` overridden."""
    out.write_text(
        f"_base_ = '{base}'\n"
        f'model = dict({model})\n'
        "test_pipeline = [dict(type='Resize', scale_factor=1.25, keep_ratio=True) if t['type'] == 'Resize' else t "
        'for t in _base_.test_pipeline]\n'
        f"test_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False, dataset=dict(data_root='"
        f"{data_root}/', ann_file='annotations/instances_val2017.json', data_prefix=dict(img='val2017/'), "
        'pipeline=test_pipeline))\n')
    return out


@pytest.fixture(scope='module')
def coco_val(tmp_path_factory) -> dict[int, Path]:
    """Generated COCO val sets of 3 images at two sizes (96 and 128 px high)."""
    from projects.lisa.synthetic.synthetic import generate

    roots = {}
    for size in (96, 128):
        out = tmp_path_factory.mktemp(f'coco{size}')
        generate('coco', out, num_train=1, num_val=3, size=size, seed=size)
        roots[size] = out / 'coco'
    return roots


def assert_agree(pairs: list[tuple]) -> list[dict]:
    """The agreements of every image (:func:`agreement.agreement`), asserted within the bounds of
    :mod:`projects.lisa.deploy.agreement`."""
    found = [agreement.agreement(eager, onnx) for eager, onnx, _ in pairs]
    assert not agreement.failures(agreement.summary(found)), found
    return found


CONFIGS = [f'mask-rcnn_{name}_fpn_1x_coco.py' for name in
           ('pvt-t', 'flatten-pvt-t', 'lisa-pvt-t', 'swin-t', 'flatten-swin-t', 'lisa-swin-t')]


@pytest.mark.slow
@pytest.mark.parametrize('config', CONFIGS)
def test_onnx_detections_equal_mmdet_test_at_two_sizes(config, coco_val, tmp_path):
    """One graph, exported at one size, gives mmdet's own test detections (count, boxes, scores,
    labels, pasted masks) on generated images of two other sizes, for each backbone and attention.
    Tiny widths and random weights, the box classifier made confident in the generated classes so
    that 100 boxes pass the score threshold; box and mask AP (mmdet's CocoMetric) of the two equal
    within 0.1. About a minute each (the export)."""
    family = 'swin' if 'swin' in config else 'pvt'
    backbone, widths = TINY[family]
    model = f'{backbone}, neck=dict(in_channels={widths}, out_channels=16), {HEADS}'
    cfg = {size: detection_config(ROOT / 'configs/detection' / config, root, tmp_path / f'{size}.py', model)
           for size, root in coco_val.items()}
    loaders = {size: agreement.detection_loader(path) for size, path in cfg.items()}
    torch.manual_seed(0)
    wrapped = deploy.build_model(str(cfg[96]), None)
    agreement.make_confident(wrapped, agreement.drawn_classes(loaders[96]))
    deploy.export(wrapped, (64, 96), tmp_path / 'mrcnn.onnx', opset=18)
    session = ort_session(tmp_path / 'mrcnn.onnx')
    for size, loader in loaders.items():
        pairs = agreement.both_detections(wrapped, session, loader)
        found = assert_agree(pairs)
        ap = agreement.average_precision(pairs, loader)
        print(f'{config} {size}px:', found, ap)
        assert not agreement.failures(agreement.summary(found), ap), ap  # within 0.1 AP points


@pytest.mark.parametrize('change, message', [
    ("test_cfg=dict(rcnn=dict(nms=dict(type='soft_nms')))", "test_cfg.rcnn.nms is {'type': 'soft_nms'"),
    ('roi_head=dict(bbox_head=dict(reg_class_agnostic=True))', 'the box head regresses class-agnostic boxes'),
    ('roi_head=dict(mask_roi_extractor=dict(roi_layer=dict(aligned=False)))', 'mask_roi_extractor pools with'),
    ('rpn_head=dict(bbox_coder=dict(clip_border=False))',
     'rpn_head.bbox_coder is DeltaXYWHBBoxCoder (clip_border=False'),
])
def test_export_refuses_a_detector_whose_post_processing_it_does_not_reproduce(change, message, tmp_path, capsys):
    from tools import export_onnx

    config = tmp_path / 'changed.py'
    config.write_text(f"_base_ = '{ROOT}/configs/detection/mask-rcnn_lisa-pvt-t_fpn_1x_coco.py'\n"
                      f'model = dict({change})\n')
    assert export_onnx.main([str(config), 'none', '--shape', '64', '64', '--out', str(tmp_path / 'm.onnx')]) == 1
    err = capsys.readouterr().err
    assert message in err and 'the exported detector is a Mask R-CNN' in err
    assert not (tmp_path / 'm.onnx').exists()


def eager_perturbed(model, batch, seed: int, noise: float = 1e-5) -> dict:
    """mmdet's test of ``batch`` with each backbone output ``x`` plus Gaussian noise of standard deviation
    ``noise * rms(x)``, as the dict that the ONNX graph's detections are pasted into."""
    generator = torch.Generator().manual_seed(seed)
    handle = model.backbone.register_forward_hook(
        lambda m, i, out: tuple(x + torch.randn(x.shape, generator=generator) * noise * x.pow(2).mean().sqrt()
                                for x in out))
    with torch.no_grad():
        found = model.test_step(batch)[0].pred_instances
    handle.remove()
    return dict(bboxes=found.bboxes, scores=found.scores, labels=found.labels, masks=found.masks)


def test_detections_decided_by_near_ties_are_held_to_eagers_own_outcomes(coco_val, tmp_path):
    """The tiny LiSA-PVT-T detector of the test above (seed 0, 96 px) has an image whose detections a
    change of the backbone outputs by 1e-5 of their RMS (the size of the eager-onnxruntime difference)
    flips: a graph giving eager's own detections under such a change (another seed than
    :func:`agreement.perturbed_tests`' draws) would break the bounds (box IoU 0.61) against the
    unperturbed test. Held to :func:`agreement.reference`, it agrees, with that image's detections
    counted as near-ties; detections moved by 2 px still break the bounds."""
    backbone, widths = TINY['pvt']
    model = f'{backbone}, neck=dict(in_channels={widths}, out_channels=16), {HEADS}'
    path = detection_config(ROOT / 'configs/detection/mask-rcnn_lisa-pvt-t_fpn_1x_coco.py', coco_val[96],
                            tmp_path / 'c.py', model)
    loader = agreement.detection_loader(path)
    torch.manual_seed(0)
    wrapped = deploy.build_model(str(path), None)
    agreement.make_confident(wrapped, agreement.drawn_classes(loader))
    detector_model = wrapped.model
    plain, held, moved = [], [], []
    for batch in loader:
        with torch.no_grad():
            eager = detector_model.test_step(batch)[0]
        graph = eager_perturbed(detector_model, batch, seed=1000)
        plain.append(agreement.agreement(eager, graph))
        held.append(agreement.agreement(agreement.reference(detector_model, batch, eager, graph), graph))
        shifted = dict(graph, bboxes=graph['bboxes'] + 2)
        moved.append(agreement.agreement(agreement.reference(detector_model, batch, eager, shifted), shifted))
    assert agreement.failures(agreement.summary(plain)), plain  # a near-tie flips under the perturbation
    total = agreement.summary(held)
    tied = [a for a in held if a['near_ties']]
    assert not agreement.failures(total) and len(tied) == 1 and tied[0]['near_ties'] == tied[0]['count'][0], held
    assert any('box IoU' in f for f in agreement.failures(agreement.summary(moved))), moved
