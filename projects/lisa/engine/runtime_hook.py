"""The runtime-safety hook of every config: :class:`SafeRuntimeHook`.

Listed in the package's ``configs/safe_runtime.py`` (which the repo's ``configs/_base_/safe_runtime.py``
inherits, and :func:`~.runtime_config.add_safe_runtime` adds to other configs), it turns the ``CheckpointHook``
that the mm base configs declare into a :class:`~.checkpoint_hook.SafeCheckpointHook`, so a config need not
repeat ``default_hooks``; takes the work dir of a training run for that run alone (:mod:`.work_dir_lock`)
before any other hook writes to it; loads every checkpoint strictly; and stops a resume whose config changed.
"""
from __future__ import annotations

import copy
import os.path as osp
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from mmengine.dist import broadcast_object_list, is_main_process
from mmengine.hooks import CheckpointHook, Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS
from mmengine.runner import BaseLoop

from projects.lisa.models.backbones.loading import IncompleteCheckpointError, check_state_dict, model_state_dict

from .checkpoint_hook import SafeCheckpointHook
from .nonfinite import NonFiniteError, nonfinite_tensors
from .resume import optimizer_types, resume_changes
from .work_dir_lock import WorkDirLockedError, lock_work_dir, release_work_dir


class ResumeConfigError(ValueError):
    """The config of a resumed run differs from the one its checkpoint was trained with."""


def lr_summary(lrs: Sequence[float]) -> str:
    """Each learning rate once, with the number of param groups that have it."""
    return ', '.join(f'{lr} ({n} param group{"s" if n > 1 else ""})'
                     for lr, n in Counter(f'{lr:.6g}' for lr in lrs).items())


@HOOKS.register_module()
class SafeRuntimeHook(Hook):
    """Checkpoints saved safely and loaded strictly, and a resume that does what its config says.

    - ``before_run`` of a training run: takes its work dir (:func:`~.work_dir_lock.lock_work_dir`, by the
      main process; every process stops with :class:`~.work_dir_lock.WorkDirLockedError` while another
      run holds it), released ``after_run``; turns the run's plain ``CheckpointHook`` into a
      :class:`SafeCheckpointHook` with the same settings (a custom hook because the mm
      base configs already define ``default_hooks``; the class of the instance, which
      has no state of its own to add, is switched before any save or load). On a
      resume from a file, the ``Pretrained`` ``init_cfg`` of the model's modules is
      skipped: the checkpoint restores every tensor (checked when it loads).
    - every checkpoint load (``load_from``, ``--resume``, ``tools/test.py``): refuses
      non-finite weights, naming the file, and loads only through the strict report of
      :func:`~projects.lisa.models.backbones.loading.check_state_dict` (every tensor
      loaded, unless named in ``allow_new`` / ``allow_unused``; ``allow_mismatch`` names the
      tensors of another shape that keep the model's initialisation, for ``load_from`` only).
    - on a resume, compares the config with the one stored in the checkpoint
      (:func:`~.resume.resume_changes`) and stops on a change, unless
      ``override_optim`` (the config's optimizer settings and schedule replace the
      restored ones; the optimizer's moments are kept, or with another optimizer type
      the optimizer starts afresh) or ``accept_changes`` (continue with the changed
      model / data, and the checkpoint's optimizer and schedule) says how to proceed;
      either way the changes are logged.
    """

    priority = 'HIGHEST'

    def __init__(self, allow_new: str | Sequence[str] = (), allow_unused: str | Sequence[str] = (),
                 allow_mismatch: str | Sequence[str] = (), override_optim: bool = False,
                 accept_changes: bool = False) -> None:
        for name, flag in dict(override_optim=override_optim, accept_changes=accept_changes).items():
            if not isinstance(flag, bool):
                raise ValueError(f'SafeRuntimeHook: {name}={flag!r} must be True or False')
        self.allow_new, self.allow_unused, self.allow_mismatch = allow_new, allow_unused, allow_mismatch
        self.override_optim, self.accept_changes = override_optim, accept_changes
        self._replay_schedule = False

    def before_run(self, runner) -> None:
        if isinstance(runner._train_loop, BaseLoop):  # built by Runner.train() only, before this call
            self._lock(runner)
        for hook in runner.hooks:
            if type(hook) is CheckpointHook:
                hook.__class__ = SafeCheckpointHook
        if runner._resume and runner._load_from and osp.isfile(runner._load_from):
            model = runner.model.module if is_model_wrapper(runner.model) else runner.model
            for name, module in model.named_modules():
                init_cfg = getattr(module, 'init_cfg', None)
                if isinstance(init_cfg, Mapping) and init_cfg.get('type') == 'Pretrained':
                    runner.logger.info(f'resuming from {runner._load_from}: {name}.init_cfg '
                                       f'({init_cfg.get("checkpoint")}) skipped, the checkpoint restores every tensor')
                    module.init_cfg = None

    def _lock(self, runner) -> None:
        """Lock the work dir in the main process; raise in every process if another run holds it."""
        refusal = [None]
        if is_main_process():
            try:
                self._locked = lock_work_dir(runner.work_dir, runner.logger.warning)
            except WorkDirLockedError as error:
                refusal = [str(error)]
        broadcast_object_list(refusal)
        if refusal[0] is not None:
            raise WorkDirLockedError(refusal[0])

    def after_run(self, runner) -> None:
        if getattr(self, '_locked', None):
            release_work_dir(runner.work_dir)
            self._locked = None

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        source = runner._load_from or 'the checkpoint resumed from'
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        state_dict = {re.sub(r'^module\.', '', k): v for k, v in model_state_dict(checkpoint).items()}
        bad = nonfinite_tensors(state_dict.items())
        if bad:
            raise NonFiniteError(f'{source}: {len(bad)} of {len(state_dict)} weights of the checkpoint are '
                                 f'non-finite (first: {bad[:3]}); the run that saved it had diverged. Load or resume '
                                 'an earlier checkpoint: the weights, not the gradients or the lr of this run, are '
                                 'the cause')
        saved_cfg = checkpoint.get('meta', {}).get('cfg') if runner._resume else None
        optim, run = resume_changes(saved_cfg, runner.cfg) if saved_cfg else ([], [])
        try:
            report, to_load = check_state_dict(model, state_dict, source, self.allow_new, self.allow_unused,
                                               self.allow_mismatch)
        except IncompleteCheckpointError as error:
            if runner._resume and error.report.mismatched:
                error = IncompleteCheckpointError(f'{error}\n{self._no_mismatch_on_resume(source)}', error.report)
            if run:
                raise IncompleteCheckpointError(f'{error}\nthe config changed since the checkpoint:\n  '
                                                + '\n  '.join(run), error.report) from None
            raise error from None
        if runner._resume and report.allowed_mismatch:
            raise IncompleteCheckpointError(f'{report}\n{self._no_mismatch_on_resume(source)}', report)
        checkpoint['state_dict'] = to_load  # what was checked
        runner.logger.info(str(report))
        if saved_cfg:
            self._check_changes(runner, checkpoint, source, optim, run, optimizer_types(saved_cfg, runner.cfg))

    @staticmethod
    def _no_mismatch_on_resume(source: str) -> str:
        return ('allow_mismatch does not apply to a resume: the restored optimizer state has the checkpoint\'s '
                f'shapes. To fine-tune the changed model, start a new run from {source} (load_from, another work '
                'dir) with allow_mismatch.')

    def _check_changes(self, runner, checkpoint: dict, source: str, optim: list[str], run: list[str],
                       types: tuple[str | None, str | None]) -> None:
        """Stop on the changes that no flag covers; apply ``override_optim``; log the changes."""
        stop_optim = bool(optim) and not (self.override_optim or self.accept_changes)
        stopping = (optim if stop_optim else []) + ([] if self.accept_changes else run)
        if stopping:
            if stop_optim:  # --override-optim helps only with these
                ways = ('On a resume the checkpoint\'s optimizer and scheduler state replace the config\'s. Resume '
                        'with --override-optim to apply the new optimizer settings and schedule to the restored '
                        'state, with --accept-changes to continue with the changed settings (optimizer and schedule '
                        'as restored)')
            else:
                ways = 'Resume with --accept-changes to continue with the changed settings'
            raise ResumeConfigError(
                f'--resume: the config differs from the one {source} was trained with:\n  ' + '\n  '.join(stopping)
                + f'\n{ways}, or start a new run from the checkpoint (load_from, another work dir).')
        old_type, new_type = types
        if old_type != new_type and not self.override_optim:
            raise ResumeConfigError(
                f'--accept-changes: the optimizer type changed ({old_type!r} -> {new_type!r}), so the restored '
                f'optimizer state of {source} does not fit this config\'s optimizer. Resume with --override-optim '
                'to start it from a fresh optimizer state, or keep the optimizer type.')
        if optim and self.override_optim:
            if old_type != new_type:
                checkpoint.pop('optimizer', None)  # the config's optimizer as built: no state
                what = (f'optimizer type changed ({old_type!r} -> {new_type!r}): starting from a fresh optimizer '
                        'state with the config\'s settings and schedule')
            else:
                self._override_param_groups(runner, checkpoint.get('optimizer', {}), source)
                what = ('applying the config\'s optimizer settings and schedule to the restored state (optimizer '
                        'moments kept)')
            checkpoint.pop('param_schedulers', None)  # rebuilt from the config, replayed in before_train
            self._replay_schedule = True
            runner.logger.warning(f'--override-optim: {what}:\n  ' + '\n  '.join(optim))
        elif optim:
            runner.logger.warning('--accept-changes: these optimizer / schedule settings are overridden by the '
                                  'restored state:\n  ' + '\n  '.join(optim))
        if run:
            runner.logger.warning('--accept-changes: continuing with the changed settings:\n  ' + '\n  '.join(run))

    @staticmethod
    def _override_param_groups(runner, restored: dict, source: str) -> None:
        """The config's param group settings (lr, weight decay, ...) in the restored optimizer state."""
        if 'param_groups' not in restored or len(restored['param_groups']) != len(
                runner.optim_wrapper.optimizer.param_groups):
            raise ResumeConfigError(f'--override-optim: {source} holds no optimizer state with the '
                                    'param groups of this config\'s optimizer')
        restored['param_groups'] = [
            {**{k: copy.deepcopy(v) for k, v in fresh.items() if k != 'params'}, 'params': saved['params']}
            for fresh, saved in zip(runner.optim_wrapper.optimizer.param_groups, restored['param_groups'])]
        # the logged base_lr: the config's, which the schedule is replayed on (the restored one was stepped already)
        restored.pop('base_param_settings', None)

    def before_train(self, runner) -> None:
        """After ``--override-optim``: step the config's schedulers to the resumed iteration / epoch."""
        if not self._replay_schedule:
            return
        self._replay_schedule = False
        schedulers = runner.param_schedulers or []
        schedulers = [s for group in schedulers.values() for s in group] if isinstance(schedulers, dict) \
            else list(schedulers)
        for steps, by_epoch in ((runner.iter, False), (runner.epoch, True)):
            for _ in range(steps):
                for scheduler in schedulers:
                    if scheduler.by_epoch == by_epoch:
                        scheduler.step()
        runner.logger.warning(f'--override-optim: schedule replayed to iteration {runner.iter}, '
                              f'lr {lr_summary(runner.optim_wrapper.get_lr()["lr"])}')
