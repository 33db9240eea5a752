"""A resumed run does what its config says (issue 25, items 1, 4 and 5).

The toy of ``engine_toy`` trains 4 of 8 iterations and saves; the resume changes the
config. References: the closed form of PolyLR, ``lr_t = lr * (1 - t / (T - 1)) ** 0.9``
(eta_min 0, T = 8 iterations: mmengine reaches eta_min at the last one), and the optimizer moments stored
in the checkpoint.
"""
from __future__ import annotations

import engine_toy
import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner

import projects.lisa  # noqa: F401  (registers the hooks)
from projects.lisa.engine.checkpoint_hook import ResumeConfigError
from projects.lisa.engine.resume import config_changes, find_resumable_checkpoint
from projects.lisa.models.backbones.loading import IncompleteCheckpointError


class Crash(Exception):
    pass


class FirstLr(Hook):
    priority = 'LOWEST'

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        if not hasattr(self, 'lr'):
            self.lr = runner.optim_wrapper.get_lr()['lr'][0]
            self.moments = {k: v.clone() for k, v in runner.optim_wrapper.optimizer.state_dict()['state'][0].items()}


def config(work_dir, lr: float = 0.01, model: dict | None = None, **safe_runtime) -> dict:
    cfg = engine_toy.toy_config(str(work_dir), max_iters=8, interval=4, lr=lr)
    cfg['custom_hooks'][0].update(safe_runtime)
    return {**cfg, 'model': model or cfg['model'], 'experiment_name': 'toy'}


@pytest.fixture
def four_iters(tmp_path):
    """A run stopped after its checkpoint at iteration 4."""
    class Stop(Hook):
        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
            if runner.iter + 1 == 4:  # after the save of iter_4.pth
                raise Crash
    runner = Runner.from_cfg(Config(config(tmp_path)))
    runner.register_hook(Stop(), priority='LOWEST')
    with pytest.raises(Crash):
        runner.train()
    return tmp_path / 'iter_4.pth'


def resume(checkpoint, lr: float = 0.01, **kwargs) -> FirstLr:
    runner = Runner.from_cfg(Config({**config(checkpoint.parent, lr, **kwargs), 'resume': True,
                                     'load_from': str(checkpoint)}))
    first = FirstLr()
    runner.register_hook(first)
    runner.train()
    return first


def test_resume_with_a_changed_lr_stops_and_lists_it(four_iters):
    with pytest.raises(ResumeConfigError, match=r'(?s)optim_wrapper\.optimizer\.lr: 0\.01 -> 0\.001.*--override-optim'):
        resume(four_iters, lr=0.001)


def test_override_optim_applies_the_new_lr_and_schedule_and_keeps_the_moments(four_iters):
    saved = torch.load(four_iters, weights_only=False)['optimizer']['state'][0]
    first = resume(four_iters, lr=0.001, override_optim=True)
    assert first.lr == pytest.approx(0.001 * (1 - 4 / 7) ** 0.9, rel=1e-12)
    for key, value in saved.items():
        assert torch.equal(first.moments[key], value), key


def test_accept_changes_keeps_the_restored_schedule(four_iters):
    first = resume(four_iters, lr=0.001, accept_changes=True)
    assert first.lr == pytest.approx(0.01 * (1 - 4 / 7) ** 0.9, rel=1e-12)


def test_resume_with_a_changed_model_names_the_parameters_and_the_change(four_iters):
    with pytest.raises(IncompleteCheckpointError,
                       match=r'(?s)SHAPE MISMATCH \(3\): net\.0\.weight.*model\.hidden: None -> 8'):
        resume(four_iters, model=dict(type='ToyRegressor', hidden=8))


def test_resume_does_not_need_the_pretrained_file(four_iters, tmp_path):
    missing = dict(type='Pretrained', checkpoint=str(tmp_path / 'pretrain' / 'missing.pth'))
    with pytest.raises(FileNotFoundError):  # a fresh run needs it
        Runner.from_cfg(Config(config(tmp_path / 'fresh', model=dict(type='ToyRegressor', init_cfg=missing)))).train()
    first = resume(four_iters, model=dict(type='ToyRegressor', init_cfg=missing))
    assert first.lr == pytest.approx(0.01 * (1 - 4 / 7) ** 0.9, rel=1e-12)


def test_auto_resume_does_not_follow_last_checkpoint_out_of_its_work_dir(tmp_path):
    checkpoint = dict(state_dict=dict(w=torch.zeros(1)), meta=dict())
    original, copy = tmp_path / 'original', tmp_path / 'copy'
    for folder, step in ((original, 8), (copy, 4)):
        folder.mkdir()
        torch.save(checkpoint, folder / f'iter_{step}.pth')
    (copy / 'last_checkpoint').write_text(str(original / 'iter_8.pth'))
    path, skipped = find_resumable_checkpoint(str(copy))
    assert path == str(copy / 'iter_4.pth')
    assert skipped[0][0] == str(original / 'iter_8.pth') and 'outside the work dir' in skipped[0][1]


def test_config_changes_lists_each_changed_leaf():
    old = dict(a=dict(lr=0.01, betas=(0.9, 0.999)), s=[dict(end=8)], init_cfg=dict(checkpoint='x'))
    new = dict(a=dict(lr=0.02, betas=(0.9, 0.99)), s=[dict(end=8)], init_cfg=None)
    assert config_changes(old, new) == ['a.betas[1]: 0.999 -> 0.99', 'a.lr: 0.01 -> 0.02']


def test_allow_mismatch_is_refused_on_a_resume(four_iters):
    """The restored optimizer state of a re-shaped tensor has the checkpoint's shape: a new run only."""
    with pytest.raises(IncompleteCheckpointError, match=r'(?s)initialised \(3\).*allow_mismatch is for starting a new'):
        resume(four_iters, model=dict(type='ToyRegressor', hidden=8), allow_mismatch=['net.*'])
