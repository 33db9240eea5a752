"""AlignResize, PVT's Semantic FPN evaluation resize, registered in mmseg (Table 3's PVT rows).

References: sizes derived by hand from the rule (fit (2048, 512) keeping the ratio, then round
each side up to a multiple of 32) and mmseg's own keep-ratio Resize, which the rule extends.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mmcv.transforms import Compose
from mmengine.config import Config
from mmengine.registry import init_default_scope

import projects.lisa.registry  # noqa: F401  (registers AlignResize)
from projects.lisa.datasets.transforms import AlignResize

FPN = Path(__file__).resolve().parents[1] / 'configs/segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py'

# (h, w) -> (H, W). E.g. 480 x 640: factor min(2048 / 640, 512 / 480) = 1.0667 -> 512 x 683 -> 512 x 704.
SIZES = {
    (480, 640): (512, 704),
    (375, 500): (512, 704),  # x 1.3653 -> 512 x 683
    (300, 1000): (512, 1728),  # x 1.7067 -> 512 x 1707
    (1000, 3000): (512, 1536),  # x 0.512 (shrunk) -> 512 x 1536, already aligned
    (512, 512): (512, 512),
    (100, 90): (576, 512),  # x 5.689 -> 569 x 512
}


def build(**kwargs):
    from mmseg.registry import TRANSFORMS
    init_default_scope('mmseg')
    return TRANSFORMS.build(dict(type='AlignResize', **kwargs))


@pytest.mark.parametrize('size', SIZES, ids=str)
def test_align_resize_fits_2048x512_then_rounds_each_side_up_to_a_multiple_of_32(size):
    h, w = size
    results = build(scale=(2048, 512), size_divisor=32)(dict(img=np.zeros((h, w, 3), np.uint8)))
    assert results['img'].shape[:2] == results['img_shape'] == SIZES[size]
    big_h, big_w = SIZES[size]
    assert results['scale_factor'] == pytest.approx((big_w / w, big_h / h))
    # mmseg's keep-ratio Resize (the default ADE20K test pipeline) stops before the rounding
    from mmseg.registry import TRANSFORMS
    plain = TRANSFORMS.build(dict(type='Resize', scale=(2048, 512), keep_ratio=True))(
        dict(img=np.zeros((h, w, 3), np.uint8)))['img_shape']
    assert all(0 <= a - p < 32 for a, p in zip(SIZES[size], plain))
    assert (plain == SIZES[size]) == all(s % 32 == 0 for s in plain)


def test_align_resize_resizes_a_loaded_label_map_with_nearest_labels():
    seg = np.zeros((480, 320), np.uint8)
    seg[:, :80], seg[:, 160:] = 1, 2
    results = build()(dict(img=np.zeros((480, 320, 3), np.uint8), gt_seg_map=seg))
    assert results['gt_seg_map'].shape == results['img_shape'] == AlignResize().aligned_size(480, 320)
    assert set(np.unique(results['gt_seg_map'])) == {0, 1, 2}  # labels, not interpolated values


def test_semantic_fpn_test_pipeline_feeds_the_model_multiples_of_32(tmp_path):
    import mmcv
    image = tmp_path / 'a.jpg'
    mmcv.imwrite(np.zeros((375, 500, 3), np.uint8), str(image))
    init_default_scope('mmseg')
    pipeline = Config.fromfile(str(FPN)).test_pipeline
    out = Compose(pipeline[:2])(dict(img_path=str(image)))  # load + AlignResize
    assert out['img_shape'] == (512, 704) and out['ori_shape'] == (375, 500)


@pytest.mark.parametrize('kwargs, message', [
    (dict(scale=(2048, 0)), r'scale=\(2048, 0\) must be two positive ints'),
    (dict(size_divisor=0), 'size_divisor=0 must be a positive int'),
])
def test_align_resize_refuses_invalid_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AlignResize(**kwargs)
