"""The training-dynamics study (projects/lisa/dynamics, tools/training_dynamics.py): its data draws, its
plan, the configs it writes, its statistics against hand-computed values, and one tiny end-to-end study."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import numpy as np
import pytest
from mmengine.config import Config
from PIL import Image

from projects.lisa.dynamics import document, draws, study
from projects.lisa.models.attention.lisa import LiSAAttention

ROOT = Path(__file__).resolve().parents[1]


def fake_wheel(path: Path, size: int = 512) -> tuple[Path, np.ndarray, np.ndarray]:
    """A zip holding a uint16 image and an instance mask where the stardist wheel holds its own."""
    rng = np.random.default_rng(0)
    image = rng.integers(0, 4000, (size, size)).astype(np.uint16)
    mask = np.zeros((size, size), np.uint16)
    for i in range(40):
        r, c = rng.integers(0, size - 10, 2)
        mask[r:r + 8, c:c + 8] = i + 1
    with zipfile.ZipFile(path, 'w') as archive:
        for name, array in zip(draws.NUCLEI_FILES, (image, mask)):
            buffer = BytesIO()
            Image.fromarray(array).save(buffer, format='TIFF')
            archive.writestr(name, buffer.getvalue())
    return path, image, mask


def test_nuclei_tiles_hold_out_four_per_draw_with_the_mask_as_labels(tmp_path):
    wheel, image, mask = fake_wheel(tmp_path / 'stardist-0.9.2-py3-none-any.whl')
    root = draws.write_draw('nuclei', tmp_path / 'a', 1000, wheel)
    train = sorted(p.stem for p in (root / 'annotations' / 'training').glob('*.png'))
    val = sorted(p.stem for p in (root / 'annotations' / 'validation').glob('*.png'))
    assert (len(train), len(val)) == (12, 4) and not set(train) & set(val)
    assert sorted(train + val) == [f'tile_{i:02d}' for i in range(16)]
    assert val == [f'tile_{i:02d}' for i in draws.held_out(1000, 16)]
    for stem in train[:3] + val[:1]:
        index = int(stem.split('_')[1])
        r, c = divmod(index, 4)
        labels = np.array(Image.open(next(root.glob(f'annotations/*/{stem}.png'))))
        expected = np.where(mask[r * 128:(r + 1) * 128, c * 128:(c + 1) * 128] > 0, 2, 1)
        np.testing.assert_array_equal(labels, expected)
        pixels = np.array(Image.open(next(root.glob(f'images/*/{stem}.jpg'))))
        assert pixels.shape == (128, 128, 3)
    other = draws.write_draw('nuclei', tmp_path / 'b', 1001, wheel)
    assert sorted(p.stem for p in (other / 'annotations' / 'validation').glob('*.png')) != val


def test_nuclei_scaling_is_the_percentile_normalisation(tmp_path):
    wheel, image, _ = fake_wheel(tmp_path / 'w.whl')
    scaled, labels = draws.read_nuclei(wheel)
    low, high = np.percentile(image, (1, 99.8))
    i, j = 5, 7
    expected = round(min(max((float(image[i, j]) - low) / (high - low), 0), 1) * 255)
    assert scaled.dtype == np.uint8 and abs(int(scaled[i, j]) - expected) <= 1
    assert set(np.unique(labels)) == {1, 2}


def test_a_wheel_without_the_images_is_named(tmp_path):
    bad = tmp_path / 'other.whl'
    with zipfile.ZipFile(bad, 'w') as archive:
        archive.writestr('x.txt', 'x')
    with pytest.raises(ValueError, match='img2d.tif'):
        draws.read_nuclei(bad)
    with pytest.raises(ValueError, match="'imagenet' is not one of"):
        draws.write_draw('imagenet', tmp_path, 0)


def row(dataset='nuclei', phase='test', backbone='lisa-pvt-t', variant='', lr=3e-4, draw=1000, iters=200,
        miou=80.0, loss=(1.0, 0.5)) -> dict:
    return dict(dataset=dataset, phase=phase, backbone=backbone, variant=variant, lr=lr, draw=draw, iters=iters,
                mIoU=miou, mAcc=miou, aAcc=miou, seconds=10.0, loss_step=[10, 20][:len(loss)], loss=list(loss))


def test_the_chosen_lr_is_the_best_mean_and_the_smallest_of_equals():
    rows = [row(phase='select', lr=lr, draw=d, miou=m) for lr, d, m in
            ((1e-4, 900, 70), (1e-4, 901, 80), (3e-4, 900, 90), (3e-4, 901, 60), (1e-3, 900, 76), (1e-3, 901, 74))]
    rows += [row(phase='select', backbone='pvt-t', lr=lr, draw=900, miou=50) for lr in (1e-3, 1e-4)]
    assert study.chosen_lrs(rows) == {('nuclei', 'lisa-pvt-t'): 1e-4, ('nuclei', 'pvt-t'): 1e-4}


def test_the_plan_pairs_every_model_on_the_same_draws():
    plan = study.Plan(datasets=('nuclei', ), lrs=(1e-4, 1e-3), dev_draws=2, test_draws=3, ablations=('dwc-off', ))
    select = study.items_of('select', plan, {})
    assert len(select) == 2 * 2 * 3 and {i['draw'] for i in select} == {900, 901}
    assert study.items_of('test', plan, {}) == []  # nothing chosen, nothing to test
    chosen = {('nuclei', b): 3e-4 for b in study.BACKBONES}
    test = study.items_of('test', plan, chosen)
    assert {b: sorted(i['draw'] for i in test if i['backbone'] == b) for b in study.BACKBONES} == {
        b: [1000, 1001, 1002] for b in study.BACKBONES}
    assert {i['iters'] for i in study.items_of('longer', plan, chosen)} == {400}
    ablate = study.items_of('ablate', plan, chosen)
    assert {(i['backbone'], i['variant']) for i in ablate} == {('lisa-pvt-t', 'dwc-off')} and len(ablate) == 3


def test_the_written_config_holds_the_run(tmp_path):
    item = dict(dataset='nuclei', phase='ablate', backbone='lisa-pvt-t', variant='local-off', lr=3e-4, draw=1002,
                iters=7)
    cfg = Config.fromfile(study.write_config(item, tmp_path, tmp_path / 'root'))
    assert cfg.model.backbone.attn_cfgs == dict(type='lisa', use_local=False)
    assert cfg.model.backbone.init_cfg is None and cfg.model.decode_head.num_classes == 2
    assert (cfg.optim_wrapper.optimizer.lr, cfg.train_cfg.max_iters, cfg.param_scheduler[0].end) == (3e-4, 7, 7)
    assert cfg.randomness.seed == 1002 and cfg.train_dataloader.dataset.data_root == str(tmp_path / 'root')
    assert cfg.train_dataloader.dataset.metainfo.classes == ('background', 'nucleus')
    softmax = dict(item, phase='softmax-start', backbone='pvt-t', variant='')
    cfg = Config.fromfile(study.write_config(softmax, tmp_path, tmp_path, pretrained=tmp_path / 'c.pth'))
    assert [a.sr_ratio for a in cfg.model.backbone.attn_cfgs] == [8, 4, 2, 1]
    assert cfg.model.backbone.init_cfg.checkpoint == str(tmp_path / 'c.pth')
    with pytest.raises(ValueError, match='pretrained'):
        study.write_config(softmax, tmp_path, tmp_path)


def test_alpha_starts_at_alpha_init_and_rejects_values_outside_0_1():
    attn = LiSAAttention(16, 2, alpha_init=0.1)
    np.testing.assert_allclose(attn.alpha.sigmoid().detach().numpy(), [0.1, 0.1], rtol=1e-6)
    assert LiSAAttention(16, 2).alpha.sigmoid().tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match=r'alpha_init=1.0 must be in \(0, 1\)'):
        LiSAAttention(16, 2, alpha_init=1.0)


def paired_rows() -> list[dict]:
    """LiSA 1, 2, 3 points below PVT-T on three draws; an ablation 1 point above LiSA on each (same losses)."""
    rows = []
    for k, d in enumerate((1000, 1001, 1002)):
        rows += [row(backbone='pvt-t', draw=d, miou=90.0, loss=(1.0, 0.3 + k / 10)),
                 row(draw=d, miou=89.0 - k, loss=(1.0, 0.5)),
                 row(phase='ablate', variant='dwc-off', draw=d, miou=90.0 - k)]
    return rows


def test_the_paired_difference_is_the_hand_computed_interval():
    (a, b, d), = document.comparison_rows(paired_rows(), 'nuclei', 'test')
    half = 4.302652729911275 * 1.0 / math.sqrt(3)  # t(0.975, 2) x sd 1 / sqrt(3)
    assert (a, b) == ('lisa-pvt-t', 'pvt-t')
    assert (d.mean, d.low, d.high) == pytest.approx((-2.0, -2.0 - half, -2.0 + half))
    assert document.reading(d) == 'no difference found'


def test_the_document_states_the_ablation_and_the_loss_band(tmp_path):
    rows = paired_rows()
    document.write_document(rows, tmp_path / 'dyn.md', 'python tools/training_dynamics.py --from-rows', 'my reading')
    text = (tmp_path / 'dyn.md').read_text()
    assert 'moved it: dwc-off **+1.00 [+1.00, +1.00]**' in text  # the same +1 on every draw
    assert ('| dwc-off | no depthwise conv | 89.00 [86.52, 91.48] | **+1.00 [+1.00, +1.00]** | -1.00 [-3.48, +1.48] '
            '| +0.000 [+0.000, +0.000] | 3 |') in text  # the ablation's final loss equals LiSA's on every draw
    # LiSA's final loss 0.5 against PVT-T's 0.3, 0.4, 0.5: differences +0.2, +0.1, 0, t(0.975, 2) x 0.1 / sqrt(3)
    assert '| LiSA-PVT-T - PVT-T | -2.00 [-4.48, +0.48] | no difference found | +0.100 [-0.148, +0.348] |' in text
    assert 'my reading' in text and (tmp_path / 'dyn.png').stat().st_size > 0
    steps, mean, half = document.curve_band([r for r in rows if r['backbone'] == 'pvt-t'])
    assert steps.tolist() == [10, 20] and mean[1] == pytest.approx(0.4)
    assert half[1] == pytest.approx(4.302652729911275 * 0.1 / math.sqrt(3))
    lisa, pvt = ([r for r in rows if r['backbone'] == b and r['phase'] == 'test'] for b in ('lisa-pvt-t', 'pvt-t'))
    steps, mean, half = document.curve_band(lisa, minus=pvt)  # paired by draw: 0.2, 0.1, 0.0 at step 20
    assert (mean.tolist()[0], mean[1], half[1]) == pytest.approx((0.0, 0.1, 4.302652729911275 * 0.1 / math.sqrt(3)))


def test_the_weight_decay_bound_is_one_minus_the_product_of_the_steps():
    text = document.weight_decay_bound([row(lr=1e-3, iters=400)])
    assert f'{1 - (1 - 1e-3 * 1e-4) ** 400:.1e}' in text and '4.0e-05' in text


@pytest.mark.parametrize('args, message', [(['--lrs', '0'], '--lrs [0.0]'), (['--wheel', 'nope.whl'], 'nope.whl'),
                                           (['--test-draws', '0'], 'must be >= 1')])
def test_bad_flags_are_named(args, message, capsys):
    from tools.training_dynamics import parse_args
    with pytest.raises(SystemExit):
        parse_args(args)
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_a_tiny_study_runs_resumes_and_writes_its_document(tmp_path):
    wheel, *_ = fake_wheel(tmp_path / 'stardist-0.9.2-py3-none-any.whl')
    rows, out = tmp_path / 'rows.jsonl', tmp_path / 'doc.md'
    cmd = [sys.executable, 'tools/training_dynamics.py', '--datasets', 'nuclei', '--phases', 'select', 'test',
           '--lrs', '1e-4', '--dev-draws', '1', '--test-draws', '2', '--iters', '2', '--wheel', str(wheel),
           '--rows', str(rows), '--out', str(out), '--data', str(tmp_path / 'data'), '--work-dir',
           str(tmp_path / 'work')]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    first = [json.loads(line) for line in rows.read_text().splitlines()]
    assert sorted((r['phase'], r['backbone'], r['draw']) for r in first) == sorted(
        [('select', b, 900) for b in study.BACKBONES] + [('test', b, d) for b in study.BACKBONES for d in (1000, 1001)])
    assert all(0 <= r['mIoU'] <= 100 and r['loss'] for r in first)
    assert not list((tmp_path / 'work').rglob('*.pth'))
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)  # resumes: nothing left to run
    assert len(rows.read_text().splitlines()) == len(first)
    assert 'LiSA-PVT-T - PVT-T' in out.read_text()
