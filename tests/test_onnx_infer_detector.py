"""Detection from an exported Mask R-CNN file alone (projects/lisa/deploy/detect.py,
tools/onnx_infer.py): its metadata, the resize, preprocessing and mask pasting against mmdet's
own, the drawing against mmengine's visualiser, and the detections against mmdet's test."""
from __future__ import annotations

from pathlib import Path

import mmcv
import numpy as np
import pytest
import torch

from projects.lisa import deploy
from projects.lisa.deploy import agreement
from projects.lisa.deploy.detect import Detections, blend_masks, paste_mask
from projects.lisa.deploy.infer import preprocess, resize

pytest.importorskip('onnxruntime')
from test_export_detector import HEADS, TINY, detection_config  # noqa: E402

from tools import onnx_infer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / 'configs/detection/mask-rcnn_lisa-pvt-t_fpn_1x_coco.py'


def test_metadata_of_a_detector_carries_its_test_resize_and_mask_threshold():
    meta = deploy.inference_metadata(CONFIG)  # mmdet's coco_instance test pipeline and Mask R-CNN test_cfg
    assert meta.resize == dict(type='Resize', scale=(1333, 800), scale_factor=None, keep_ratio=True,
                               interpolation='bilinear', backend='cv2')
    assert meta.mask_thr == 0.5
    assert deploy.Metadata.from_props(meta.to_props(), 'x') == meta


def test_a_file_from_before_the_resize_and_mask_threshold_asks_for_re_export():
    """Its results would silently not be the test's (the segmentor's resize, the detector's all)."""
    props = deploy.inference_metadata(CONFIG).to_props()
    old = {k: v for k, v in props.items() if k not in ('resize', 'mask_thr')}
    for task, missing in (('detection', 'resize, mask_thr'), ('segmentation', 'resize')):
        with pytest.raises(deploy.MetadataError, match=rf'old\.onnx carries incomplete \(no {missing}\) inference '
                                                       'metadata: re-export it with tools/export_onnx.py'):
            deploy.Metadata.from_props({**old, 'task': f'"{task}"'}, 'old.onnx')


def test_paste_mask_is_mmdet_do_paste_mask_then_the_threshold():
    """Random 28 x 28 masks into random boxes of a 37 x 53 image, many of them partly outside it
    (mmdet's own pasting needs each box to reach within a pixel of the image), and thin ones."""
    from mmdet.models.roi_heads.mask_heads.fcn_mask_head import _do_paste_mask

    rng = np.random.default_rng(0)
    shape = (37, 53)
    outside = 0
    for _ in range(200):
        mask = rng.random((28, 28), dtype=np.float32)
        corner = rng.uniform(-15, [shape[1] - 2, shape[0] - 2])
        far = np.maximum(corner + rng.uniform(0.2, 40, 2), 0.5)  # the far corner inside, the near one maybe not
        box = np.concatenate([corner, far]).astype(np.float32)
        outside += bool(box[0] < 0 or box[1] < 0 or box[2] > shape[1] or box[3] > shape[0])
        expected, region = _do_paste_mask(torch.from_numpy(mask)[None, None], torch.from_numpy(box)[None], *shape,
                                          skip_empty=True)
        expected = expected[0].numpy()
        probabilities, where = paste_mask(mask, box, shape)
        assert where == region and probabilities.shape == expected.shape
        np.testing.assert_allclose(probabilities, expected, rtol=0, atol=1e-6)  # equal with FMA
        near = np.abs(expected - 0.5) < 1e-6
        assert np.array_equal((probabilities >= 0.5) | near, (expected >= 0.5) | near)
    assert outside > 50


def test_detections_above_the_score_threshold_keep_their_order():
    rng = np.random.default_rng(0)
    found = Detections(rng.random((5, 4), dtype=np.float32), np.array([0.9, 0.7, 0.3, 0.31, 0.1], np.float32),
                       np.arange(5), rng.random((5, 3, 4)) > 0.5)
    shown = found.above(0.3)
    assert shown.labels.tolist() == [0, 1, 3] and len(shown) == 3 and shown.masks.shape == (3, 3, 4)


@pytest.mark.parametrize('transform', [None, "dict(type='Resize', scale_factor=1.25, keep_ratio=True)",
                                    "dict(type='Resize', scale=(100, 60), keep_ratio=False)"])
def test_resize_and_preprocess_are_mmdet_s_test_pipeline_and_data_preprocessor(transform, tmp_path):
    """The config's own test Resize ((1333, 800), keep ratio) and two others; mmdet's
    ``DetDataPreprocessor`` (RGB, normalised, padded to 32) on the pipeline's output."""
    from mmcv.transforms import Compose
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    from mmengine.config import Config

    register_all_modules()
    config = CONFIG
    if transform is not None:
        config = tmp_path / 'resize.py'
        config.write_text(f"_base_ = '{CONFIG}'\n"
                          f"test_pipeline = [{transform} if t['type'] == 'Resize' else t\n"
                          '                 for t in _base_.test_pipeline]\n'
                          'test_dataloader = dict(dataset=dict(pipeline=test_pipeline))\n')
    cfg = Config.fromfile(str(config))
    image = np.random.default_rng(1).integers(0, 256, (45, 61, 3), dtype=np.uint8)
    mmcv.imwrite(image, str(tmp_path / 'image.png'))
    pipeline = Compose([t for t in cfg.test_dataloader.dataset.pipeline if t['type'] != 'LoadAnnotations'])
    packed = pipeline(dict(img_path=str(tmp_path / 'image.png'), img_id=0))
    data = MODELS.build(cfg.model.data_preprocessor)(dict(inputs=[packed['inputs']],
                                                          data_samples=[packed['data_samples']]), False)
    expected = data['data_samples'][0]

    meta = deploy.inference_metadata(config)
    resized, scale_factor = resize(image, meta)
    assert resized.shape[:2] == expected.img_shape and scale_factor == expected.scale_factor
    x = preprocess(resized, meta)
    assert x.shape == tuple(data['inputs'].shape) and np.array_equal(x, data['inputs'].numpy())


def test_masks_are_blended_as_mmengine_s_visualiser_blends_them():
    from mmengine.visualization import Visualizer

    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    masks = rng.random((3, 20, 30)) > 0.6
    colours = [(220, 20, 60), (0, 0, 142), (119, 11, 32)]
    visualiser = Visualizer(name='onnx_infer_detector_test', image=image)
    visualiser.draw_binary_masks(masks, colors=colours, alphas=0.8)
    np.testing.assert_array_equal(blend_masks(image, masks, colours, 0.8), visualiser.get_image())


@pytest.mark.parametrize('argv, message', [
    (['{model}', '{image}', '--score-thr', '1.5'], '--score-thr=1.5 must be between 0 and 1'),
    (['{model}', '{image}', '--score-thr', '-0.1'], '--score-thr=-0.1 must be between 0 and 1'),
    (['{model}', '{image}', '--opacity', '-1'], '--opacity=-1.0 must be between 0 and 1'),
])
def test_tool_refuses_bad_detector_arguments_naming_them(argv, message, tmp_path, capsys):
    for name in ('model.onnx', 'image.png'):
        (tmp_path / name).write_bytes(b'')
    with pytest.raises(SystemExit):
        onnx_infer.parse_args([a.format(model=tmp_path / 'model.onnx', image=tmp_path / 'image.png') for a in argv])
    assert message in capsys.readouterr().err


@pytest.fixture(scope='module')
def exported(tmp_path_factory) -> tuple[deploy.MaskRCNNDetections, Path, object]:
    """A tiny LiSA-PVT Mask R-CNN (random weights, box classifier made confident in the generated
    images' classes so that detections pass the score threshold) testing on 3 generated COCO
    images enlarged 1.25 times, exported with its metadata; with its test loader."""
    from projects.lisa.synthetic.synthetic import generate

    out = tmp_path_factory.mktemp('mrcnn')
    generate('coco', out, num_train=1, num_val=3, size=96, seed=7)
    backbone, widths = TINY['pvt']
    config = detection_config(CONFIG, out / 'coco', out / 'tiny.py',
                              f'{backbone}, neck=dict(in_channels={widths}, out_channels=16), {HEADS}')
    loader = agreement.detection_loader(config)
    torch.manual_seed(0)
    wrapped = deploy.build_model(str(config), None)
    agreement.make_confident(wrapped, agreement.drawn_classes(loader))
    path = out / 'mrcnn.onnx'
    deploy.export(wrapped, (64, 96), path, opset=18, metadata=deploy.inference_metadata(config).to_props())
    return wrapped, path, loader


@pytest.mark.slow
def test_onnx_detector_on_an_image_file_gives_mmdet_s_own_test_detections(exported):
    """From the image file and the ONNX file alone: mmdet's ``test_step`` (the config's pipeline,
    data preprocessor and rescaled, pasted results) on the same images. About a minute (the export)."""
    wrapped, path, loader = exported
    detector = deploy.OnnxDetector(path)
    found = []
    for batch in loader:
        with torch.no_grad():
            eager = wrapped.model.test_step(batch)[0]
        onnx = detector(mmcv.imread(eager.img_path))
        assert onnx.masks.shape[1:] == eager.ori_shape
        found.append(agreement.agreement(eager, dict(bboxes=torch.from_numpy(onnx.boxes),
                                                     scores=torch.from_numpy(onnx.scores),
                                                     labels=torch.from_numpy(onnx.labels),
                                                     masks=torch.from_numpy(onnx.masks))))
    total = agreement.summary(found)
    assert not agreement.failures(total), (agreement.failures(total), total)  # failures include no detection


@pytest.mark.slow
def test_tool_draws_the_detections_at_the_image_s_size_and_prints_those_above_the_threshold(exported, tmp_path,
                                                                                           capsys):
    _, path, loader = exported
    image_path = Path(loader.dataset[0]['data_samples'].img_path)
    image = mmcv.imread(str(image_path))
    out = tmp_path / 'drawn.png'
    found = deploy.OnnxDetector(path)(image)
    threshold = f'{np.sort(found.scores)[-6]:.4f}'  # about the 5 best shown
    assert onnx_infer.main([str(path), str(image_path), '--out', str(out), '--score-thr', threshold]) == 0
    printed = capsys.readouterr().out
    shown = found.above(float(threshold))
    assert 0 < len(shown) < len(found)
    assert (f'{image_path}: {len(shown)} of {len(found)} detections above --score-thr={float(threshold):g}, '
            f'drawn to {out}') in printed
    classes = deploy.OnnxDetector(path).metadata.classes
    lines = [line for line in printed.splitlines() if line.startswith('  ')]
    assert lines == [f'  {classes[label]}: {score:.3f} at ({", ".join(f"{v:.1f}" for v in box)})'
                     for box, score, label in zip(shown.boxes, shown.scores, shown.labels)]
    drawn = mmcv.imread(str(out))
    assert drawn.shape == image.shape and not np.array_equal(drawn, image)
    outside = ~shown.masks.any(0)  # away from every box's lines and label, the image is untouched
    for x1, y1, x2, y2 in shown.boxes.astype(int):
        outside[max(y1 - 4, 0):y2 + 5, max(x1 - 4, 0):x2 + 5] = False
        outside[max(y1 - 4, 0):y1 + 20, max(x1 - 4, 0):] = False  # the label runs right of small boxes
    assert outside.any() and np.array_equal(drawn[outside], image[outside])


@pytest.mark.slow
@pytest.mark.parametrize('change, message', [
    (dict(mask_thr='null'), 'carries no mask threshold (mask_thr): re-export it'),
    (dict(mask_thr=None, resize=None), 'carries incomplete (no resize, mask_thr) inference metadata: re-export it'),
])
def test_tool_refuses_a_detector_file_without_what_mmdet_s_test_needs(change, message, exported, tmp_path, capsys):
    from test_onnx_infer import with_props

    _, path, loader = exported
    changed = with_props(path, tmp_path / 'changed.onnx', **change)
    assert onnx_infer.main([str(changed), loader.dataset[0]['data_samples'].img_path]) == 1
    assert f'error: {changed} {message}' in capsys.readouterr().err
