"""The installed stack: registries, mim, mmcv's compiled ops, weights-only checkpoints."""
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import projects.lisa.registry  # noqa: F401  (registers the LiSA modules)
from projects.lisa.models import backbones

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCOPES = ('mmseg', 'mmdet', 'mmpretrain')


@pytest.mark.parametrize('scope', SCOPES)
def test_every_lisa_backbone_is_registered_in_each_library(scope):
    registry = __import__(f'{scope}.registry', fromlist=['MODELS']).MODELS
    assert backbones.__all__, 'no backbone is exported'
    for name in backbones.__all__:
        assert registry.get(name) is getattr(backbones, name)


@pytest.mark.slow
def test_custom_imports_in_a_config_registers_lisa(tmp_path):
    # A fresh interpreter that never imported projects.lisa: the config's
    # custom_imports alone must make the LiSA names resolvable.
    cfg = tmp_path / 'cfg.py'
    cfg.write_text("custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)\n")
    code = (
        'from mmengine.config import Config\n'
        f'Config.fromfile({str(cfg)!r})\n'
        'import mmseg.registry, mmdet.registry, mmpretrain.registry\n'
        'for r in (mmseg.registry.MODELS, mmdet.registry.MODELS, mmpretrain.registry.MODELS):\n'
        f'    assert all(r.get(n) is not None for n in {backbones.__all__!r}), r\n'
        'print("resolved")\n')
    out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert 'resolved' in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize('scope', SCOPES)
def test_mim_in_the_venv_runs_the_library_training_script(scope):
    # `mim run SCOPE train` executes SCOPE/.mim/tools/train.py (the script `mim train`
    # uses) with the venv's python; without a config its argparse prints its usage.
    out = subprocess.run([str(BIN / 'mim'), 'run', scope, 'train'], capture_output=True, text=True, timeout=120)
    assert f"'{sys.executable}', '" in out.stderr and f'{scope}/.mim/tools/train.py' in out.stderr
    assert 'usage: train.py' in out.stderr and '--work-dir' in out.stderr
    assert 'the following arguments are required: config' in out.stderr


def test_mim_and_mmengine_import_pkg_resources_without_a_warning():
    # openmim imports pkg_resources on every command and mmengine reloads it in is_installed (config bases
    # such as mmseg::); from setuptools 80.9 on each of these prints a UserWarning (tools/install.sh pins below).
    out = subprocess.run([str(BIN / 'mim'), 'list'], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and 'mmsegmentation' in out.stdout
    assert out.stderr == ''
    code = 'from mmengine.utils import is_installed; assert is_installed("mmseg")'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stderr) == (0, '')


def test_mmcv_nms_runs_on_cpu_and_suppresses_the_overlapping_box():
    from mmcv.ops import nms
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 11., 11.], [20., 20., 30., 30.]])
    scores = torch.tensor([0.9, 0.8, 0.7])
    # IoU(box0, box1) = 81 / 119 = 0.68 > 0.5: box1 goes; box2 does not overlap.
    dets, keep = nms(boxes, scores, iou_threshold=0.5)
    assert keep.tolist() == [0, 2]
    assert torch.equal(dets[:, 4], scores[[0, 2]])


def test_mmcv_roi_align_runs_on_cpu_and_averages_a_linear_ramp():
    from mmcv.ops import RoIAlign
    # Feature = x coordinate of each pixel centre; bilinear sampling of a
    # linear function is exact, so each output bin holds its centre's x.
    w = 16
    feat = (torch.arange(w, dtype=torch.float32) + 0.5).expand(1, 1, w, w).contiguous()
    rois = torch.tensor([[0., 2., 3., 10., 11.]])  # x1=2 .. x2=10: bins of width 4
    out = RoIAlign((2, 2), spatial_scale=1.0, sampling_ratio=2, aligned=True)(feat, rois)
    expected = torch.tensor([[4., 8.], [4., 8.]])
    assert torch.allclose(out[0, 0], expected, atol=1e-5)


def _toy_runner(work_dir, max_iters, resume=False):
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    class Toy(BaseModel):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def forward(self, x, y, mode='loss'):
            return dict(loss=((self.linear(x) - y) ** 2).mean())

    data = [dict(x=torch.randn(2), y=torch.randn(1)) for _ in range(8)]
    return Runner(
        model=Toy(), work_dir=str(work_dir), resume=resume,
        train_dataloader=dict(dataset=data, sampler=dict(type='InfiniteSampler'), batch_size=4,
                              collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=2, by_epoch=False)))


def test_mmengine_checkpoints_load_weights_only_and_resume_continues(tmp_path):
    _toy_runner(tmp_path, max_iters=4).train()
    ckpt = torch.load(tmp_path / 'iter_4.pth', weights_only=True)
    assert ckpt['meta']['iter'] == 4
    assert ckpt['message_hub']['log_scalars']['train/loss'].current() > 0
    runner = _toy_runner(tmp_path, max_iters=6, resume=True)
    runner.train()
    assert runner.iter == 6
    assert (tmp_path / 'iter_6.pth').exists()


@pytest.mark.parametrize('owner, name', [('HistoryBuffer', '__init__'), ('ndarray', 'tofile')])
def test_weights_only_loading_still_refuses_other_getattr_calls(tmp_path, owner, name):
    import numpy as np
    from mmengine.logging import HistoryBuffer
    target = {'HistoryBuffer': HistoryBuffer, 'ndarray': np.ndarray}[owner]

    class Sneaky:
        def __reduce__(self):
            return getattr, (target, name)

    torch.save({'payload': Sneaky()}, tmp_path / 'sneaky.pth')
    with pytest.raises(pickle.UnpicklingError, match='refusing getattr'):
        torch.load(tmp_path / 'sneaky.pth', weights_only=True)


def test_cpu_distributed_setup_leaves_single_process_configs_alone():
    from mmengine.config import Config

    from projects.lisa.engine.dist import setup_cpu_distributed
    cfg = Config(dict(launcher='none'))
    assert setup_cpu_distributed(cfg) is False
    assert 'model_wrapper_cfg' not in cfg
