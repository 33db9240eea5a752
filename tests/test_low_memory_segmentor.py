"""Evaluation of large images at full resolution (projects.lisa.models.segmentors, data_checks.eval_memory): the
configs' segmentor predicts what mmseg's ``EncoderDecoder`` predicts, in memory of the order of the label map,
and ``check_data`` names the images whose test step would not fit.

The references are mmseg's own ``EncoderDecoder.postprocess_result`` on the same logits, and the peak resident
memory of a fresh process, measured.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from projects.lisa.registry import register_all_modules

ROOT = Path(__file__).resolve().parents[1]
SEG_CONFIGS = sorted((ROOT / 'configs' / 'segmentation').rglob('*.py'))
SEG_DEMO = ROOT / 'configs/segmentation/demo/fpn_lisa-pvt-t_1xb4-150iter_synthetic-ade20k-96x96.py'
TINY = dict(  # the smallest mmseg segmentor: its post-processing is what is compared
    backbone=dict(type='MixVisionTransformer', in_channels=3, embed_dims=8, num_stages=1, num_layers=[1],
                  num_heads=[1], patch_sizes=[7], strides=[4], sr_ratios=[1], out_indices=(0, )),
    decode_head=dict(type='SegformerHead', in_channels=[8], in_index=[0], channels=8, num_classes=150))


def segmentor(kind: str, align_corners: bool = False, **kwargs):
    register_all_modules()
    from mmengine.registry import DefaultScope
    from mmseg.registry import MODELS
    head = dict(TINY['decode_head'], align_corners=align_corners)
    with DefaultScope.overwrite_default_scope('mmseg'):  # whatever scope an earlier test left current
        return MODELS.build(dict(type=kind, backbone=TINY['backbone'], decode_head=head, **kwargs))


def samples(n: int, ori_shape, padding=(0, 0, 0, 0), flip=None):
    from mmseg.structures import SegDataSample
    found = []
    for _ in range(n):
        sample = SegDataSample()
        meta = dict(ori_shape=ori_shape, img_shape=ori_shape, padding_size=list(padding))
        if flip:
            meta.update(flip=True, flip_direction=flip)
        sample.set_metainfo(meta)
        found.append(sample)
    return found


# (logits h x w, image H x W, padding left, right, top, bottom, flip): odd sizes, up- and downsampling, padding
CASES = [
    ((32, 43), (167, 259), (0, 0, 0, 0), None),
    ((64, 86), (257, 341), (0, 5, 0, 3), 'horizontal'),
    ((49, 66), (301, 203), (2, 0, 1, 0), 'vertical'),
    ((160, 160), (150, 97), (0, 0, 0, 0), None),
    ((64, 64), (37, 45), (0, 0, 0, 0), None),  # H + W <= 128: PyTorch vectorises over the classes
]


@pytest.mark.parametrize('align_corners', [False, True])
@pytest.mark.parametrize('logits_size,image_size,padding,flip', CASES)
def test_prediction_is_mmseg_s_bit_for_bit(logits_size, image_size, padding, flip, align_corners):
    torch.manual_seed(0)
    logits = torch.randn(2, 150, *logits_size) * 4
    logits[1, 7] = logits[1, 3]  # ties: argmax takes the first class
    logits[1, 9, :4, :4] = float('nan')  # NaN ranks above any number
    reference = segmentor('EncoderDecoder', align_corners).postprocess_result(
        logits.clone(), samples(2, image_size, padding, flip))
    low = segmentor('LowMemoryEncoderDecoder', align_corners, max_logits_bytes=0)  # every image reduced
    found = low.postprocess_result(logits.clone(), samples(2, image_size, padding, flip))
    kept = segmentor('LowMemoryEncoderDecoder', align_corners).postprocess_result(  # every image fits
        logits.clone(), samples(2, image_size, padding, flip))
    for ref, got, same in zip(reference, found, kept):
        assert got.pred_sem_seg.data.dtype == torch.int64
        assert torch.equal(got.pred_sem_seg.data, ref.pred_sem_seg.data)
        assert 'seg_logits' not in got and got.unresized_seg_logits.shape == (
            logits_size[0] - padding[2] - padding[3], logits_size[1] - padding[0] - padding[1])
        assert torch.equal(same.pred_sem_seg.data, ref.pred_sem_seg.data)
        assert torch.equal(same.seg_logits.data.view(torch.int32), ref.seg_logits.data.view(torch.int32))  # bits
    assert (found[1].pred_sem_seg.data != 7).all()  # the tie went to class 3


def test_invalid_budget_is_named():
    with pytest.raises(ValueError, match=r"max_logits_bytes must be an integer >= 0 \(bytes\), got -1"):
        segmentor('LowMemoryEncoderDecoder', max_logits_bytes=-1)


@pytest.mark.parametrize('config', SEG_CONFIGS, ids=lambda p: p.stem)
def test_every_segmentation_config_evaluates_with_the_low_memory_segmentor(config):
    assert Config.fromfile(str(config)).model.type == 'LowMemoryEncoderDecoder'


PEAK = '''
import sys, torch
from mmengine.config import Config
from mmengine.structures import PixelData
from mmseg.registry import MODELS
from mmseg.structures import SegDataSample
from projects.lisa.registry import register_all_modules
register_all_modules()
torch.set_num_threads(1)
cfg = Config.fromfile(sys.argv[1])
cfg.model.backbone.init_cfg = None
model = MODELS.build(cfg.model)
size, classes = int(sys.argv[2]), cfg.model.decode_head.num_classes
logits = torch.randn(1, classes, 128, 128)
sample = SegDataSample(gt_sem_seg=PixelData(data=torch.zeros(1, size, size, dtype=torch.long)))
sample.set_metainfo(dict(ori_shape=(size, size), img_shape=(128, 128), padding_size=[0, 0, 0, 0]))
def kb(field):
    return int(next(line for line in open('/proc/self/status') if line.startswith(field)).split()[1])
open('/proc/self/clear_refs', 'w').write('5')  # the peak (VmHWM) starts again from the current size
before = kb('VmRSS')
with torch.no_grad():
    [result] = model.postprocess_result(logits, [sample])
print((kb('VmHWM') - before) * 1024)
'''


def peak_of_postprocessing(config: Path, size: int) -> int:
    """The bytes the post-processing of ``config``'s model adds to a fresh process's peak memory."""
    proc = subprocess.run([sys.executable, '-c', PEAK, str(config), str(size)], capture_output=True, text=True,
                          env={**os.environ, 'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1'}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


@pytest.mark.slow
def test_the_configs_predict_a_large_image_in_memory_of_the_order_of_its_label_map():
    # 1500 x 1500 of 150 classes: mmseg's resize alone is 150 x 1500 x 1500 x 4 B = 1.35 GB; the int64 label map
    # is 18 MB. The low-memory segmentor reduces images whose logits exceed 1 GiB, so it reduces this one.
    size = 1500
    label_map = 8 * size * size
    peak = peak_of_postprocessing(SEG_DEMO, size)
    assert peak < 4 * label_map, f'{peak / 1e6:.0f} MB'
    from projects.lisa.data_checks.eval_memory import REDUCED
    assert peak <= REDUCED * size * size * 1.2  # what check_data estimates for it (1.2: allocator slack)


def test_the_estimate_of_an_8000_px_image_is_mmseg_s_resize_or_a_few_label_maps():
    from projects.lisa.data_checks.eval_memory import EvalMemory
    from projects.lisa.models.segmentors import MAX_LOGITS_BYTES
    rescales = (('AlignResize', (2048, 512), ''), )  # the configs' test resize
    pixels = 8000 * 8000
    mmseg = EvalMemory(150, rescales).peak((8000, 8000))
    low = EvalMemory(150, rescales, MAX_LOGITS_BYTES).peak((8000, 8000))
    assert mmseg >= 150 * pixels * 4 + 8 * pixels  # the resized logits (38.4 GB) and their argmax
    assert low < 8 * pixels * 8  # under 8 int64 label maps (4.1 GB)
    # an image whose logits fit the budget is evaluated as mmseg does, with the same memory
    assert EvalMemory(150, rescales, MAX_LOGITS_BYTES).peak((512, 683)) == EvalMemory(150, rescales).peak((512, 683))


def _large_val_image(root: Path, size: tuple[int, int]) -> Path:
    """Replace the first validation image (and its label map) of a generated ADE20K copy by a ``size`` one."""
    import numpy as np
    from PIL import Image
    image = sorted((root / 'images' / 'validation').iterdir())[0]
    label = root / 'annotations' / 'validation' / f'{image.stem}.png'
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (*size, 3), np.uint8)).save(image)
    Image.fromarray(rng.integers(1, 151, size, np.uint8)).save(label)
    return image


def test_check_data_names_an_image_whose_evaluation_would_not_fit(tmp_path):
    # A 1000 x 1500 validation image: mmseg's EncoderDecoder resizes its 150 logits to 150 x 1000 x 1500 x 4 B =
    # 0.9 GB; the low-memory segmentor (reducing logits over 1 MB) needs about 46 B/px, 69 MB.
    from test_downstream_data_errors import with_data_root

    from projects.lisa.data_checks.split_check import check_config_data
    from projects.lisa.synthetic import generate
    generate('ade20k', tmp_path, num_train=1, num_val=2, size=32, seed=0)
    root = tmp_path / 'ade' / 'ADEChallengeData2016'
    image = _large_val_image(root, (1000, 1500))
    cfg = with_data_root(SEG_DEMO, root)
    cfg.model.type = 'EncoderDecoder'
    [problem] = [p for p in check_config_data(cfg, ('val_dataloader', ), workers=1, memory=500_000_000)[
        'val_dataloader'] if p.file == str(image)]
    assert problem.error and problem.problem.startswith('is 1000x1500 (HxW): evaluating it at full resolution')
    assert 'more than the 0.5 GB of memory available' in problem.problem
    assert "model.type='LowMemoryEncoderDecoder' with max_logits_bytes < 900000000" in problem.valid
    assert '--memory-limit' in problem.valid
    needed = float(problem.problem.split('needs about ')[1].split(' GB')[0])
    assert needed >= 150 * 1000 * 1500 * 4 / 1e9
    cfg.model.update(type='LowMemoryEncoderDecoder', max_logits_bytes=2**20)
    assert not [p for p in check_config_data(cfg, ('val_dataloader', ), workers=1, memory=500_000_000)[
        'val_dataloader'] if p.file == str(image)]
