"""A resumed run does what its config says.

The toy of ``engine_toy`` trains 4 of 8 iterations and saves; the resume changes the
config. References: the closed form of PolyLR, ``lr_t = lr * (1 - t / (T - 1)) ** 0.9``
(eta_min 0, T = 8 iterations: mmengine reaches eta_min at the last one), and the optimizer moments stored
in the checkpoint.
"""
from __future__ import annotations

import sys

import engine_toy
import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner

import projects.lisa.registry  # noqa: F401  (registers the hooks)
from projects.lisa.engine.resume import config_changes, find_resumable_checkpoint
from projects.lisa.engine.runtime_hook import ResumeConfigError
from projects.lisa.models.backbones.loading import IncompleteCheckpointError


class Crash(Exception):
    pass


class FirstLr(Hook):
    priority = 'LOWEST'

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        if not hasattr(self, 'lr'):
            self.lrs = runner.optim_wrapper.get_lr()
            self.lr = self.lrs['lr'][0]
            self.optimizer = runner.optim_wrapper.optimizer
            self.moments = {k: v.clone() for k, v in self.optimizer.state_dict()['state'].get(0, {}).items()}


#: One param group per parameter (mmengine's ``paramwise_cfg``), the output layer's at a tenth of the lr.
GROUPED = dict(paramwise_cfg=dict(custom_keys={'net.3': dict(lr_mult=0.1)}))
SGD = dict(optimizer=dict(type='SGD', lr=0.01, momentum=0.9))


def config(work_dir, lr: float = 0.01, model: dict | None = None, optim_wrapper: dict | None = None,
           **safe_runtime) -> dict:
    cfg = engine_toy.toy_config(str(work_dir), max_iters=8, interval=4, lr=lr)
    cfg['custom_hooks'][0].update(safe_runtime)
    return {**cfg, 'model': model or cfg['model'], 'experiment_name': 'toy',
            'optim_wrapper': {**cfg['optim_wrapper'], **(optim_wrapper or {})}}


def stopped_run(work_dir, **kwargs):
    """A run stopped after its checkpoint at iteration 4; the checkpoint."""
    class Stop(Hook):
        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
            if runner.iter + 1 == 4:  # after the save of iter_4.pth
                raise Crash
    runner = Runner.from_cfg(Config(config(work_dir, **kwargs)))
    runner.register_hook(Stop(), priority='LOWEST')
    with pytest.raises(Crash):
        runner.train()
    return work_dir / 'iter_4.pth'


@pytest.fixture
def four_iters(tmp_path):
    return stopped_run(tmp_path)


def resume(checkpoint, lr: float = 0.01, log=None, **kwargs) -> FirstLr:
    """Resume ``checkpoint`` with the config of these arguments; ``log``: a handler that the run's logger gets."""
    runner = Runner.from_cfg(Config({**config(checkpoint.parent, lr, **kwargs), 'resume': True,
                                     'load_from': str(checkpoint)}))
    first = FirstLr()
    runner.register_hook(first)
    if log is not None:
        runner.logger.addHandler(log)
    try:
        runner.train()
    finally:
        runner.logger.removeHandler(log)
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
                       match=r'(?s)SHAPE MISMATCH \(3\): net\.0\.weight.*new run.*model\.hidden: default -> 8'):
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
    with pytest.raises(IncompleteCheckpointError,
                       match=r'(?s)initialised \(3\).*allow_mismatch does not apply to a resume'):
        resume(four_iters, model=dict(type='ToyRegressor', hidden=8), allow_mismatch=['net.*'])


def test_override_optim_logs_the_new_base_lr_and_each_lr_once_with_its_count(tmp_path, caplog):
    checkpoint = stopped_run(tmp_path, optim_wrapper=GROUPED)
    first = resume(checkpoint, lr=0.001, optim_wrapper=GROUPED, override_optim=True, log=caplog.handler)
    factor = (1 - 4 / 7) ** 0.9
    assert first.lrs['base_lr'] == [pytest.approx(0.001 * factor, rel=1e-12)]
    assert first.lrs['lr'] == pytest.approx([0.001 * factor] * 2 + [0.0001 * factor] * 2, rel=1e-12)
    assert (f'schedule replayed to iteration 4, lr {0.001 * factor:.6g} (2 param groups), '
            f'{0.0001 * factor:.6g} (2 param groups)') in caplog.text


def test_tools_train_prints_a_resume_refusal_and_exits_1(four_iters, tmp_path, monkeypatch, capsys):
    from tools import train as tools_train
    config_file = tmp_path / 'changed.py'
    cfg = config(tmp_path, lr=0.001)
    cfg['custom_hooks'] = []  # tools/train.py adds the safe runtime itself
    Config(cfg).dump(str(config_file))
    monkeypatch.setattr(sys, 'argv', ['train.py', str(config_file), '--work-dir', str(tmp_path),
                                      '--resume', str(four_iters)])
    with pytest.raises(SystemExit) as stop:
        tools_train.main()
    assert stop.value.code == 1
    assert 'optim_wrapper.optimizer.lr: 0.01 -> 0.001' in capsys.readouterr().err


def test_a_model_only_change_suggests_accept_changes_not_override_optim(four_iters):
    with pytest.raises(ResumeConfigError) as error:
        resume(four_iters, model=dict(type='ToyRegressor', dropout=0.1))
    assert 'model.dropout: default -> 0.1' in str(error.value)
    assert '--accept-changes' in str(error.value) and '--override-optim' not in str(error.value)


def test_config_changes_say_default_for_an_unset_option():
    assert config_changes(dict(attn=dict(type='lisa')), dict(attn=dict(type='lisa', beta=0.7))) == [
        'attn.beta: default -> 0.7']
    assert config_changes(dict(beta=0.7), dict()) == ['beta: 0.7 -> default']
    assert config_changes(dict(window_size=7), dict(window_size=None)) == ['window_size: 7 -> None']


def test_override_optim_with_another_optimizer_type_starts_a_fresh_state(four_iters, caplog):
    first = resume(four_iters, optim_wrapper=SGD, override_optim=True, log=caplog.handler)
    assert type(first.optimizer).__name__ == 'SGD'
    assert first.moments == {}  # no AdamW moments carried into SGD
    assert 'optimizer moments kept' not in caplog.text
    assert "optimizer type changed ('AdamW' -> 'SGD'): starting from a fresh optimizer state" in caplog.text
    assert first.lr == pytest.approx(0.01 * (1 - 4 / 7) ** 0.9, rel=1e-12)


def test_accept_changes_with_another_optimizer_type_stops(four_iters):
    with pytest.raises(ResumeConfigError, match=r"(?s)optimizer type changed \('AdamW' -> 'SGD'\).*--override-optim"):
        resume(four_iters, optim_wrapper=SGD, accept_changes=True)


def test_auto_resume_of_a_dir_without_checkpoints_says_so(tmp_path):
    from tools.train import choose_resume
    work, elsewhere = tmp_path / 'work', tmp_path / 'other' / 'iter_8.pth'
    work.mkdir()
    (work / 'last_checkpoint').write_text(str(elsewhere))
    with pytest.raises(SystemExit) as stop:
        choose_resume(Config(dict(work_dir=str(work))), 'auto')
    assert f'--resume: no checkpoint in {work} to resume from' in str(stop.value.code)
    assert 'none of the' not in str(stop.value.code)
