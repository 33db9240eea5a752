"""Non-finite training stops (or skips, where configured), never saves NaN weights, never scores NaN predictions.

In-process runs of a toy model (``engine_toy``) for the mechanisms; subprocess
runs of ``tools/train.py`` / ``tools/test.py`` on the demo's Semantic FPN
config (slow) for the failures met in practice: a too-large learning rate (NaN from
iteration 2, NaN checkpoints), a NaN checkpoint scored as ``mIoU: 12.20``,
``--amp`` on a machine without CUDA.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import engine_toy
import pytest
import torch
from mmengine.config import Config
from mmengine.runner import Runner
from mmengine.structures import PixelData
from mmseg.structures import SegDataSample

from projects.lisa.engine.amp import enable_amp
from projects.lisa.engine.nonfinite import NonFiniteError, NonFiniteGuardHook
from projects.lisa.engine.resume import checkpoint_problem

ROOT = Path(__file__).resolve().parents[1]
SEG_DEMO = ROOT / 'configs/segmentation/demo/fpn_lisa-pvt-t_1xb4-150iter_synthetic-ade20k-96x96.py'


def toy_runner(tmp_path: Path, **kwargs) -> Runner:
    return Runner.from_cfg(Config(engine_toy.toy_config(str(tmp_path), **kwargs)))


def all_checkpoints_finite(work_dir: Path) -> dict[str, str | None]:
    return {p.name: checkpoint_problem(str(p)) for p in work_dir.glob('*.pth')}


def test_too_large_learning_rate_stops_at_the_first_nonfinite_gradient_and_saves_no_nan(tmp_path):
    runner = toy_runner(tmp_path, max_iters=12, interval=1, lr=1e6)
    with pytest.raises(NonFiniteError, match=r'iteration (\d+): non-finite (gradients|loss)') as error:
        runner.train()
    stopped_at = int(error.value.args[0].split()[1].rstrip(':'))
    assert 1 < stopped_at <= 12
    assert 'learning rate' in str(error.value)
    assert all(torch.isfinite(p).all() for p in runner.model.parameters())  # the bad step was not applied
    saved = all_checkpoints_finite(tmp_path)
    assert saved and all(problem is None for problem in saved.values()), saved
    assert len(saved) == stopped_at - 1  # one per completed iteration, none after


def test_skip_mode_drops_the_nonfinite_step_counts_it_and_trains_on(tmp_path):
    # samples 3 and 17 have NaN targets: every batch holding one of them has NaN gradients
    runner = toy_runner(tmp_path, max_iters=8, interval=8, nan_at=(3, 17), guard=dict(on_nonfinite='skip'))
    runner.train()
    skipped = runner.message_hub.get_scalar('train/nonfinite_skipped').current()
    assert 1 <= skipped < 8
    assert all(torch.isfinite(p).all() for p in runner.model.parameters())
    assert checkpoint_problem(str(tmp_path / 'iter_8.pth')) is None


def test_skip_mode_stops_after_too_many_skipped_steps_in_a_row(tmp_path):
    runner = toy_runner(tmp_path, max_iters=8, interval=8, nan_at=tuple(range(32)),
                        guard=dict(on_nonfinite='skip', max_consecutive_skips=3))
    with pytest.raises(NonFiniteError, match='iteration 3: 3 steps in a row skipped'):
        runner.train()


def test_guard_arguments_are_checked():
    with pytest.raises(ValueError, match="on_nonfinite='ignore'"):
        NonFiniteGuardHook(on_nonfinite='ignore')
    with pytest.raises(ValueError, match='max_consecutive_skips=0'):
        NonFiniteGuardHook(max_consecutive_skips=0)


def test_nonfinite_input_names_the_file_before_any_step(tmp_path):
    hook = NonFiniteGuardHook()
    runner = toy_runner(tmp_path)
    image = torch.zeros(3, 4, 4)
    image[1, 2, 3] = float('nan')
    sample = SegDataSample(metainfo=dict(img_path='data/x/ADE_train_7.jpg'))
    with pytest.raises(NonFiniteError, match=r"iteration 1: non-finite input values in \['data/x/ADE_train_7.jpg'\]"):
        hook.before_train_iter(runner, 0, dict(inputs=[torch.zeros(3, 4, 4), image],
                                               data_samples=[SegDataSample(metainfo=dict(img_path='ok.jpg')),
                                                             sample]))


def seg_sample(logits: torch.Tensor, path: str) -> SegDataSample:
    sample = SegDataSample(metainfo=dict(img_path=path))
    sample.seg_logits = PixelData(data=logits)
    sample.pred_sem_seg = PixelData(data=logits.argmax(0, keepdim=True))
    sample.gt_sem_seg = PixelData(data=torch.zeros(1, 2, 2, dtype=torch.long))
    return sample


def test_metric_from_nonfinite_predictions_fails_naming_the_sample():
    hook = NonFiniteGuardHook()
    good = seg_sample(torch.randn(3, 2, 2), 'a.jpg')
    hook.after_val_iter(None, 0, dict(data_samples=[good]), [good])  # finite: nothing happens
    bad_logits = torch.randn(3, 2, 2)
    bad_logits[:, 0, 1] = float('nan')  # argmax over NaN is class 0: a plausible-looking prediction
    bad = seg_sample(bad_logits, 'b.jpg')
    with pytest.raises(NonFiniteError, match=r"test: the metric failed: predictions \['seg_logits.data'\] of b.jpg"):
        hook.after_test_iter(None, 0, dict(data_samples=[good, bad]), [good, bad])


# end to end: the same failures through the tools ---------------------------------------------------------------------

def run_tool(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    from test_downstream_training import environment
    return subprocess.run([sys.executable, *engine_toy.from_scratch(args)], cwd=cwd, env=environment(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope='module')
def seg_workspace(tmp_path_factory) -> Path:
    from test_downstream_training import DATA

    from projects.lisa.synthetic import generate
    cwd = tmp_path_factory.mktemp('nonfinite')
    generate('ade20k', cwd / 'data' / 'synthetic', **{**DATA, 'num_train': 8, 'num_val': 2})
    return cwd


SHORT = ['train_cfg.max_iters=4', 'train_cfg.val_interval=4', 'default_hooks.checkpoint.interval=1',
         'train_dataloader.batch_size=2']


@pytest.mark.slow
def test_train_tool_with_a_diverging_learning_rate_stops_and_writes_no_nan_checkpoint(seg_workspace):
    work = seg_workspace / 'work_dirs' / 'lr'
    proc = run_tool([str(ROOT / 'tools/train.py'), str(SEG_DEMO), '--work-dir', str(work), '--cfg-options',
                     'optim_wrapper.optimizer.lr=1000.0', *SHORT], seg_workspace)
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert 'NonFiniteError: iteration' in proc.stderr and 'learning rate' in proc.stderr, proc.stderr[-3000:]
    saved = all_checkpoints_finite(work)
    assert all(problem is None for problem in saved.values()), saved


@pytest.mark.slow
def test_test_tool_refuses_a_nan_checkpoint_instead_of_printing_a_number(seg_workspace):
    # the checkpoint's weights are checked as it loads (the NaN predictions' metric failure, the
    # next line of defence, is test_metric_from_nonfinite_predictions_fails_naming_the_sample)
    work = seg_workspace / 'work_dirs' / 'nan'
    proc = run_tool([str(ROOT / 'tools/train.py'), str(SEG_DEMO), '--work-dir', str(work), '--cfg-options',
                     'train_cfg.max_iters=1', 'train_cfg.val_interval=100', 'train_dataloader.batch_size=2'],
                    seg_workspace)
    assert proc.returncode == 0, proc.stderr[-3000:]
    checkpoint = torch.load(work / 'iter_1.pth', weights_only=True)
    for value in checkpoint['state_dict'].values():
        if value.is_floating_point():
            value.fill_(float('nan'))
    torch.save(checkpoint, work / 'nan.pth')
    proc = run_tool([str(ROOT / 'tools/test.py'), str(SEG_DEMO), str(work / 'nan.pth'), '--work-dir',
                     str(work / 'test')], seg_workspace)
    assert proc.returncode != 0
    assert f'NonFiniteError: {work / "nan.pth"}:' in proc.stderr, proc.stderr[-3000:]
    assert 'weights of the checkpoint are non-finite' in proc.stderr
    assert 'mIoU:' not in proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason='the CPU path of --amp')
def test_amp_without_cuda_trains_in_bf16_autocast(seg_workspace):
    work = seg_workspace / 'work_dirs' / 'amp'
    proc = run_tool([str(ROOT / 'tools/train.py'), str(SEG_DEMO), '--amp', '--work-dir', str(work),
                     '--cfg-options', 'train_cfg.max_iters=2', 'train_cfg.val_interval=100',
                     'default_hooks.checkpoint.interval=2', 'train_dataloader.batch_size=2'], seg_workspace)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'bf16 autocast on the CPU' in proc.stderr
    assert checkpoint_problem(str(work / 'iter_2.pth')) is None


DET_DEMO = ROOT / 'configs/detection/demo/mask-rcnn_lisa-pvt-t_fpn_1xb4-12e_synthetic-coco-96.py'


def test_cpu_amp_refuses_mask_rcnn_at_start_naming_its_fp32_only_ops(monkeypatch):
    """--amp on the CPU is refused for Mask R-CNN at start, where it would crash at step 1 (mmcv nms: expected
    Float)."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    with pytest.raises(ValueError, match=r"(?s)--amp: .*'RoIAlign'.*'nms'.*float32 only"):
        enable_amp(Config.fromfile(str(DET_DEMO)))
    seg = Config.fromfile(str(SEG_DEMO))
    assert 'bf16 autocast' in enable_amp(seg) and seg.optim_wrapper.type == 'CPUAmpOptimWrapper'


def test_mmcv_nms_has_no_bf16_cpu_kernel():
    """The reason for the refusal: if mmcv gains the kernel, this fails and the refusal can go."""
    from mmcv.ops import nms
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.]])
    nms(boxes, torch.tensor([0.9, 0.8]), 0.5)  # float32 runs
    with pytest.raises(RuntimeError):
        nms(boxes.bfloat16(), torch.tensor([0.9, 0.8]).bfloat16(), 0.5)
