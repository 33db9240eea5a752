"""Segmentation from an exported ONNX file alone (tools/onnx_infer.py, projects/lisa/deploy/infer.py):
the metadata written at export, the label map against eager torch, the overlay against mmseg's
visualiser and by hand, the tool's errors. Detection: tests/test_onnx_infer_detector.py."""
from __future__ import annotations

import json
from pathlib import Path

import mmcv
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_export_onnx import ROOT, fpn_args  # the Table 3 Semantic FPN config, one block per stage
from torch import nn

from projects.lisa import deploy
from projects.lisa.deploy.infer import blend, upsample_argmax

onnx = pytest.importorskip('onnx')
from tools import export_onnx, onnx_infer  # noqa: E402  (need onnxruntime)

pytestmark = pytest.mark.usefixtures('seed_and_one_thread')
CLASSES = ('sky', 'road', 'tree')
PALETTE = ((0, 0, 255), (128, 64, 128), (0, 128, 0))
METAINFO = f'dict(classes={CLASSES}, palette={[list(c) for c in PALETTE]})'
# mmseg's ADE20K normalisation; pad_val = 1.5 (in normalised units, as mmseg pads) shows where padding enters
CONV_METADATA = deploy.Metadata(task='segmentation', mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375),
                                bgr_to_rgb=True, size_divisor=8, pad_val=1.5, align_corners=False,
                                classes=CLASSES, palette=PALETTE)


class StridedConv(nn.Module):
    """A stand-in segmentor that exports in seconds: logits ``(B, 3, H/4, W/4)`` of a 4x4, stride-4 conv."""

    output_names = ('seg_logits', )

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, len(CLASSES), 4, 4)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


@pytest.fixture(scope='module')
def conv_onnx(tmp_path_factory) -> tuple[StridedConv, Path]:
    torch.manual_seed(0)
    model = StridedConv()
    path = tmp_path_factory.mktemp('conv') / 'conv.onnx'
    deploy.export(model, (32, 32), path, opset=18, metadata=CONV_METADATA.to_props())
    return model, path


def image_file(tmp_path: Path, shape: tuple[int, int] = (21, 30)) -> tuple[np.ndarray, Path]:
    """A random BGR image of ``shape`` (sides not multiples of 8) written as PNG."""
    image = np.random.default_rng(0).integers(0, 256, (*shape, 3), dtype=np.uint8)
    mmcv.imwrite(image, str(tmp_path / 'image.png'))
    return image, tmp_path / 'image.png'


def with_props(path: Path, out: Path, **changes: str | None) -> Path:
    """A copy of the ONNX file at ``path`` with metadata entries changed (``None``: removed)."""
    model = onnx.load(str(path))
    props = {p.key: p.value for p in model.metadata_props}
    props.update(changes)
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, {k: v for k, v in props.items() if v is not None})
    onnx.save(model, str(out))
    return out


def assert_argmax_of(labels: np.ndarray, logits: torch.Tensor) -> None:
    """``labels`` is the argmax of ``logits (C, H, W)``, but where the two best are within
    rounding of each other (onnxruntime and torch sum in different orders)."""
    top2 = logits.topk(2, dim=0).values
    near_tie = (top2[0] - top2[1] < 1e-5 * logits.abs().max()).numpy()
    wrong = labels != logits.argmax(0).numpy()
    assert not (wrong & ~near_tie).any() and wrong.mean() < 0.01, f'{wrong.sum()} pixels differ'


def test_metadata_of_the_paper_config_is_ade20k_and_mmseg_s_preprocessor(tmp_path):
    from mmseg.datasets import ADE20KDataset
    meta = deploy.inference_metadata(fpn_args(tmp_path)[0])
    assert meta.classes == ADE20KDataset.METAINFO['classes']
    assert meta.palette == tuple(map(tuple, ADE20KDataset.METAINFO['palette']))
    assert (meta.mean, meta.std, meta.bgr_to_rgb) == ((123.675, 116.28, 103.53), (58.395, 57.12, 57.375), True)
    assert (meta.task, meta.size_divisor, meta.pad_val, meta.align_corners) == ('segmentation', 32, 0.0, False)
    assert meta.resize == dict(type='AlignResize', scale=(2048, 512), size_divisor=32, interpolation='bilinear')
    assert deploy.Metadata.from_props(meta.to_props(), 'x') == meta


def test_metadata_takes_the_config_s_metainfo_and_test_padding_and_a_detector_s_task(tmp_path):
    config = tmp_path / 'metainfo.py'
    config.write_text(f"_base_ = '{fpn_args(tmp_path)[0]}'\n"
                      'model = dict(data_preprocessor=dict(test_cfg=dict(size_divisor=16)))\n'
                      f'test_dataloader = dict(dataset=dict(metainfo={METAINFO}))\n')
    meta = deploy.inference_metadata(config)
    assert (meta.classes, meta.palette, meta.size_divisor) == (CLASSES, PALETTE, 16)
    detector = deploy.inference_metadata(ROOT / 'configs/detection/mask-rcnn_lisa-pvt-t_fpn_1x_coco.py')
    assert (detector.task, len(detector.classes), detector.size_divisor) == ('detection', 80, 32)


@pytest.mark.parametrize('align_corners', [False, True])
@pytest.mark.parametrize('size, crop', [((24, 32), (21, 30)), ((7, 9), (7, 9)), ((40, 13), (33, 13))])
@pytest.mark.parametrize('out', [None, (17, 45), (150, 20)])
def test_upsample_argmax_is_the_argmax_of_torch_bilinear_interpolation(size, crop, out, align_corners):
    """Resized to ``size``, cropped, and (as mmseg's test after a test resize) resized to ``out``."""
    logits = torch.randn(5, 6, 8)
    ref = F.interpolate(logits[None], size=size, mode='bilinear', align_corners=align_corners)[:, :, :crop[0], :crop[1]]
    if out is not None:
        ref = F.interpolate(ref, size=out, mode='bilinear', align_corners=align_corners)
    assert_argmax_of(upsample_argmax(logits.numpy(), size, crop, align_corners, out), ref[0])


def test_label_map_is_the_argmax_of_the_eager_model_on_mmseg_s_preprocessing(conv_onnx, tmp_path):
    """Channels to RGB, normalised, padded to multiples of 8 with pad_val, logits resized to the
    padded size, padding cut off (mmseg's ``SegDataPreProcessor`` and ``EncoderDecoder.predict``)."""
    model, path = conv_onnx
    image, _ = image_file(tmp_path)
    m = CONV_METADATA
    x = (torch.from_numpy(image[..., ::-1].copy()).float() - torch.tensor(m.mean)) / torch.tensor(m.std)
    x = F.pad(x.permute(2, 0, 1)[None], (0, 2, 0, 3), value=m.pad_val)  # 21 x 30 -> 24 x 32
    with torch.no_grad():
        logits = F.interpolate(model(x), size=(24, 32), mode='bilinear', align_corners=False)[0, :, :21, :30]
    labels = deploy.OnnxSegmentor(path)(image)
    assert labels.shape == (21, 30) and len(np.unique(labels)) > 1
    assert_argmax_of(labels, logits)


@pytest.mark.parametrize('args', [
    dict(type='Resize', scale=(40, 30), keep_ratio=True), dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='Resize', scale=(100, 60), keep_ratio=False), dict(type='Resize', scale=37, keep_ratio=False),
    dict(type='Resize', scale_factor=1.25, keep_ratio=True), dict(type='Resize', scale_factor=(0.5, 1.5)),
    dict(type='Resize', scale=(50, 20), keep_ratio=True, interpolation='nearest'),
    dict(type='Resize', scale=(64, 48), keep_ratio=True, interpolation='area'),
    dict(type='Resize', scale=(50, 40), keep_ratio=True, backend='pillow'),
    dict(type='AlignResize', scale=(60, 36), size_divisor=8), dict(type='AlignResize'),
    dict(type='AlignResize', scale=(33, 97), size_divisor=7, interpolation='bicubic')])
@pytest.mark.parametrize('shape', [(21, 30), (45, 61), (61, 45), (1, 3)])
def test_the_resize_without_mmcv_is_mmcv_s_resize_and_pvt_s_align_resize(args, shape):
    """:mod:`projects.lisa.deploy.resize` (numpy, OpenCV or Pillow) against the transforms themselves:
    the same pixels and the same scale factor."""
    from mmcv.transforms import Resize

    from projects.lisa.datasets.transforms import AlignResize
    from projects.lisa.deploy.resize import RESIZES

    image = np.random.default_rng(shape[0]).integers(0, 256, (*shape, 3), dtype=np.uint8)
    kwargs = {k: v for k, v in args.items() if k != 'type'}
    transform = (AlignResize if args['type'] == 'AlignResize' else Resize)(**kwargs)
    expected = transform.transform(dict(img=image.copy()))
    resized, scale_factor = RESIZES[args['type']](image, **kwargs)
    np.testing.assert_array_equal(resized, expected['img'])
    assert scale_factor == tuple(expected['scale_factor'])


@pytest.mark.parametrize('resize', [dict(type='Resize', scale=(40, 30), keep_ratio=True),
                                    dict(type='AlignResize', scale=(60, 36), size_divisor=8)])
def test_label_map_follows_the_test_resize_and_comes_back_to_the_image_s_size(resize, conv_onnx, tmp_path):
    """mmseg's test with a resize: the image resized (mmcv's ``imrescale``; ``AlignResize``:
    ``imresize`` to sides rounded up to 8), preprocessed, the logits resized to the padded
    input, the padding cut off, then resized back to the image's size."""
    model, path = conv_onnx
    args = dict(resize, interpolation='bilinear', **({'backend': 'cv2'} if resize['type'] == 'Resize' else {}))
    changed = with_props(path, tmp_path / 'resized.onnx', resize=json.dumps(args))
    image, _ = image_file(tmp_path)  # 21 x 30
    if resize['type'] == 'Resize':
        resized = mmcv.imrescale(image, (40, 30))  # 28 x 40
    else:  # fits in 60 x 36 at 51 x 36, sides rounded up to 8
        w, h = mmcv.rescale_size((30, 21), (60, 36))
        resized = mmcv.imresize(image, (-w // 8 * -8, -h // 8 * -8))  # 40 x 56
    m = CONV_METADATA
    x = (torch.from_numpy(resized[..., ::-1].copy()).float() - torch.tensor(m.mean)) / torch.tensor(m.std)
    h, w = resized.shape[:2]
    x = F.pad(x.permute(2, 0, 1)[None], (0, -w % 8, 0, -h % 8), value=m.pad_val)
    with torch.no_grad():
        logits = F.interpolate(model(x), size=x.shape[2:], mode='bilinear', align_corners=False)[:, :, :h, :w]
        logits = F.interpolate(logits, size=image.shape[:2], mode='bilinear', align_corners=False)[0]
    labels = deploy.OnnxSegmentor(changed)(image)
    assert labels.shape == image.shape[:2] and len(np.unique(labels)) > 1
    assert_argmax_of(labels, logits)


def test_overlay_is_mmseg_s_visualiser_without_labels():
    from mmengine.structures import PixelData
    from mmseg.visualization import SegLocalVisualizer
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (9, 11, 3), dtype=np.uint8)
    labels = rng.integers(0, 3, (9, 11))
    visualiser = SegLocalVisualizer(name='onnx_infer_test', alpha=0.3)
    expected = visualiser._draw_sem_seg(image, PixelData(data=torch.from_numpy(labels)[None]), CLASSES, PALETTE,
                                        with_labels=False)
    np.testing.assert_array_equal(blend(image, labels, PALETTE, 0.3), expected)


def test_tool_writes_the_overlay_at_the_image_s_size_and_prints_the_classes(conv_onnx, tmp_path, capsys):
    _, path = conv_onnx
    image, image_path = image_file(tmp_path)
    out = tmp_path / 'overlay.png'
    assert onnx_infer.main([str(path), str(image_path), '--out', str(out), '--opacity', '0.25']) == 0
    printed = capsys.readouterr().out
    labels = deploy.OnnxSegmentor(path)(image)
    overlay = mmcv.imread(str(out))  # BGR
    assert overlay.shape == image.shape
    for y, x in [(0, 0), (10, 17), (20, 29)]:  # floor(0.75 * pixel + 0.25 * class colour), channels reversed
        colour = PALETTE[labels[y, x]][::-1]
        assert overlay[y, x].tolist() == [int(0.75 * int(v) + 0.25 * c) for v, c in zip(image[y, x], colour)]
    counts = np.bincount(labels.ravel(), minlength=3)
    for name, count in zip(CLASSES, counts):
        assert (f'  {name}: {100 * count / labels.size:.1f} %' in printed) == (count > 0)
    assert f'21x30 label map, overlay written to {out}' in printed


@pytest.mark.parametrize('change, message', [
    ({f: None for f in CONV_METADATA.to_props()}, 'carries no inference metadata: re-export it with '
                                                  'tools/export_onnx.py'),
    (dict(task=None, palette=None), 'carries incomplete (no task, palette) inference metadata: re-export it'),
    (dict(task='"classification"'), "holds task 'classification'; only 'segmentation' or 'detection' models run "
                                    'here'),
    (dict(task='"detection"', resize=None, mask_thr=None), 'carries incomplete (no resize, mask_thr) inference '
                                                           'metadata: re-export it'),
    (dict(task='"detection"'), "gives outputs ('seg_logits',), not a Mask R-CNN's ('boxes', 'scores', 'labels', "
                               "'masks')"),
    (dict(classes='["a", "b"]'), 'gives 3 logit channels for 2 classes'),
])
def test_tool_refuses_a_model_without_usable_metadata(change, message, conv_onnx, tmp_path, capsys):
    model = with_props(conv_onnx[1], tmp_path / 'changed.onnx', **change)
    assert onnx_infer.main([str(model), str(image_file(tmp_path)[1])]) == 1
    assert f'error: {model} {message}' in capsys.readouterr().err


def test_tool_refuses_files_that_are_not_what_it_needs(conv_onnx, tmp_path, capsys):
    (tmp_path / 'text.png').write_text('not an image')
    assert onnx_infer.main([str(conv_onnx[1]), str(tmp_path / 'text.png')]) == 1
    assert f"error: image '{tmp_path / 'text.png'}' is not an image OpenCV can read" in capsys.readouterr().err
    assert onnx_infer.main([str(tmp_path / 'text.png'), str(image_file(tmp_path)[1])]) == 1
    assert f"error: {tmp_path / 'text.png'} is not an ONNX model" in capsys.readouterr().err


@pytest.mark.parametrize('argv, message', [
    (['no/such.onnx', '{image}'], "model 'no/such.onnx' is not a file"),
    (['{model}', 'no/such.png'], "image 'no/such.png' is not a file"),
    (['{model}', '{image}', '--opacity', '1.5'], '--opacity=1.5 must be between 0 and 1'),
])
def test_tool_refuses_bad_arguments_naming_them(argv, message, conv_onnx, tmp_path, capsys):
    names = dict(model=conv_onnx[1], image=image_file(tmp_path)[1])
    with pytest.raises(SystemExit):
        onnx_infer.parse_args([a.format(**names) for a in argv])
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_exported_lisa_segmentor_segments_as_mmseg_s_own_test_step(tmp_path, monkeypatch, capsys):
    """tools/export_onnx.py on a small LiSA-PVT Semantic FPN (two stages, random weights), then
    tools/onnx_infer.py: the labels are those of the eager model's ``test_step`` on the same image
    through the config's test pipeline (``AlignResize`` to 512 x 736) and data preprocessor, the
    logits resized back to the image."""
    config = tmp_path / 'tiny.py'
    config.write_text(
        f"_base_ = '{fpn_args(tmp_path)[0]}'\n"
        'model = dict(\n'
        '    backbone=dict(arch=dict(_delete_=True, embed_dims=[8, 16], depths=[1, 1], num_heads=[1, 2],\n'
        "                            mlp_ratios=[2, 2]), patch_sizes=(4, 2), out_indices=(0, 1),\n"
        "                  attn_cfgs=[dict(type='lisa', num_steps=3)] * 2),\n"
        '    neck=dict(in_channels=[8, 16], out_channels=8, num_outs=2),\n'
        '    decode_head=dict(in_channels=[8, 8], in_index=[0, 1], feature_strides=[4, 8], channels=8,\n'
        '                     num_classes=3))\n'
        f'test_dataloader = dict(dataset=dict(metainfo={METAINFO}))\n')
    built = []

    def build_model(*args, **kwargs) -> nn.Module:  # the tool's model, kept as the eager reference
        built.append(deploy.build_model(*args, **kwargs))
        return built[0]

    monkeypatch.setattr(export_onnx, 'build_model', build_model)
    assert export_onnx.main([str(config), 'none', '--shape', '64', '64', '--out', str(tmp_path / 'fpn.onnx')]) == 0
    image, image_path = image_file(tmp_path, (50, 70))
    assert onnx_infer.main([str(tmp_path / 'fpn.onnx'), str(image_path), '--out', str(tmp_path / 'o.png')]) == 0
    assert mmcv.imread(str(tmp_path / 'o.png')).shape == image.shape and '50x70 label map' in capsys.readouterr().out

    from mmengine.config import Config
    from mmengine.dataset import Compose
    from mmseg.utils import register_all_modules

    register_all_modules()
    pipeline = Compose([t for t in Config.fromfile(str(config)).test_dataloader.dataset.pipeline
                        if t['type'] != 'LoadAnnotations'])
    packed = pipeline(dict(img_path=str(image_path)))
    assert packed['data_samples'].img_shape == (512, 736)
    with torch.no_grad():
        ref = built[0].model.test_step(dict(inputs=[packed['inputs']], data_samples=[packed['data_samples']]))[0]
    assert ref.seg_logits.data.shape[1:] == (50, 70)
    assert_argmax_of(deploy.OnnxSegmentor(tmp_path / 'fpn.onnx')(image), ref.seg_logits.data)
