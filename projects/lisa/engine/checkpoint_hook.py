"""Checkpoints that survive a kill at any moment and continue the run exactly.

MMEngine's ``CheckpointHook`` deletes the oldest kept checkpoint *before* writing
the new one, writes it in place, and then points ``last_checkpoint`` at it: a
kill during a save with ``max_keep_ckpts=1`` leaves no checkpoint, or a
truncated one that ``--resume`` cannot read. :class:`SafeCheckpointHook` keeps
MMEngine's arguments and file names and changes the order of a save:

1. refuse to save non-finite weights (:class:`~.nonfinite.NonFiniteError`), and refuse a save the
   disk has no room for (:class:`NoSpaceForCheckpointError`: the previous checkpoint's size, or before
   the first one the size of the model's and optimizer's tensors (the optimizer's as its first step makes
   them), plus a margin must be free; checked
   also when a run starts, and a write that fills the disk ends with the same message);
2. write ``<name>.<run>.tmp`` (a name of this run's own), ``fsync`` it, rename it to ``<name>`` and
   ``fsync`` the folder (a write that fails removes its ``.tmp``);
3. replace ``last_checkpoint`` the same way, so it only ever names a complete file;
4. only then delete the checkpoints beyond ``max_keep_ckpts``.

It also stores the random state of every rank (:mod:`.resume`) and restores it
on ``--resume``, and keeps validation from drawing random numbers during
training, so a resumed run is the uninterrupted run, bit for bit.

:class:`SafeRuntimeHook` (listed in ``configs/_base_/safe_runtime.py``) turns the
``CheckpointHook`` that the mm base configs declare into this one, so a config
need not repeat ``default_hooks``. It also takes the work dir of a training run for that run alone
(:mod:`.work_dir_lock`), before any other hook writes to it.
"""
from __future__ import annotations

import copy
import errno
import glob
import os
import os.path as osp
import re
import secrets
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence

import torch
from mmengine.dist import all_gather_object, broadcast_object_list, get_rank, get_world_size, is_main_process
from mmengine.fileio import LocalBackend
from mmengine.hooks import CheckpointHook, Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS
from mmengine.runner import BaseLoop, IterBasedTrainLoop

from projects.lisa.models.backbones.loading import IncompleteCheckpointError, check_state_dict, model_state_dict

from .nonfinite import NonFiniteError, nonfinite_tensors
from .resume import RestoreAfterReplay, optimizer_types, resume_changes, rng_state, set_rng_state
from .work_dir_lock import WorkDirLockedError, lock_work_dir, release_work_dir

#: The suffix of this process's partial files: two processes never write the same temporary file.
TMP_SUFFIX = f'.{os.getpid()}-{secrets.token_hex(2)}.tmp'


def fsync_path(path: str) -> None:
    """Flush a file's (or a folder's) data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(tmp: str, path: str) -> None:
    """Make the complete, flushed file ``tmp`` appear as ``path`` in one step (POSIX ``rename``)."""
    fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(osp.dirname(osp.abspath(path)))


def write_text_atomically(path: str, text: str) -> None:
    with open(path + TMP_SUFFIX, 'w') as f:
        f.write(text)
    publish(path + TMP_SUFFIX, path)


def remove_partial_saves(folder: str, log=print) -> None:
    """Delete the ``*.tmp`` files an interrupted save left in ``folder`` (a kill, a full disk)."""
    for stale in glob.glob(osp.join(folder, '*.tmp')):
        log(f'removing {stale}, the partial file of an interrupted save')
        os.remove(stale)


class NoSpaceForCheckpointError(OSError):
    """The disk cannot hold the next checkpoint beside the kept ones."""


def state_bytes(state) -> int:
    """The bytes of the tensors in a (nested) state dict."""
    if isinstance(state, torch.Tensor):
        return state.nbytes
    if isinstance(state, Mapping):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return 0


def first_step_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """The bytes of the state that the first ``step`` of ``optimizer`` creates (AdamW: two moments of each
    trained parameter and its step count), from one step of the same optimizer on meta-device copies of the
    parameters (no memory, no change to the model); twice the trained parameters' bytes (the Adam family's
    moments) for an optimizer that cannot step there."""
    trained = [[p for p in group['params'] if p.requires_grad] for group in optimizer.param_groups]
    twins = [[torch.empty_like(p, device='meta') for p in params] for params in trained]
    for twin in (t for group in twins for t in group):
        twin.grad = torch.empty_like(twin)
    groups = [{**{k: v for k, v in group.items() if k != 'params'}, 'params': params}
              for group, params in zip(optimizer.param_groups, twins)]
    try:
        twin = type(optimizer)(groups)
        with torch.no_grad():
            twin.step()
        return state_bytes(twin.state_dict()['state'])
    except Exception:  # an optimizer that needs other arguments, or real values
        return 2 * sum(p.nbytes for params in trained for p in params)


def optimizer_bytes(optim_wrapper) -> int:
    """The bytes of an optim wrapper's state in a checkpoint; an optimizer that has not stepped yet counted
    with the state its first step creates (:func:`first_step_state_bytes`)."""
    wrappers = getattr(optim_wrapper, 'optim_wrappers', {'': optim_wrapper})  # an OptimWrapperDict, or one
    return state_bytes(optim_wrapper.state_dict()) + sum(
        first_step_state_bytes(w.optimizer) for w in wrappers.values() if not w.optimizer.state)


#: Free space asked for beyond the size of the previous checkpoint: it grows a little as the
#: message hub's history grows.
SPACE_MARGIN = 0.05
SPACE_MARGIN_BYTES = 1 << 20


@HOOKS.register_module()
class SafeCheckpointHook(CheckpointHook):
    """``CheckpointHook`` (same arguments) whose saves are atomic and whose checkpoints resume bit for bit."""

    def before_train(self, runner) -> None:
        super().before_train(runner)
        if not (is_main_process() and isinstance(self.file_backend, LocalBackend)):
            return
        remove_partial_saves(self.out_dir, runner.logger.warning)
        self._remove(runner.message_hub.runtime_info.get('outdated_ckpt_ids', []))  # a removal interrupted by a kill
        previous = self._previous_checkpoint(runner)  # stop now rather than at a save
        self._check_space(f'the checkpoint after {osp.basename(previous)}' if previous else 'the first checkpoint',
                          self._space_needed(runner))

    def _previous_checkpoint(self, runner) -> str | None:
        path = self.last_ckpt or runner.message_hub.get_info('last_ckpt')
        return path if path and osp.isfile(path) else None

    def _space_needed(self, runner) -> tuple[int, str]:
        """The free bytes the next checkpoint needs (its estimated size plus the margin), and the estimate's basis:
        the previous checkpoint's size, else the bytes of the model's and optimizer's tensors (before the first
        step, those it will create: :func:`optimizer_bytes`)."""
        previous = self._previous_checkpoint(runner)
        if previous:
            size = osp.getsize(previous)
            basis = f'the previous checkpoint took {size} bytes'
        else:
            model = runner.model.module if is_model_wrapper(runner.model) else runner.model
            size = state_bytes(model.state_dict()) + (optimizer_bytes(runner.optim_wrapper) if self.save_optimizer
                                                      else 0)
            basis = f'the model and optimizer state take {size} bytes'
        return int(size * (1 + SPACE_MARGIN)) + SPACE_MARGIN_BYTES, basis

    def _no_space(self, filename: str, space: tuple[int, str], why: str = '') -> NoSpaceForCheckpointError:
        """The error for a save of ``filename`` that ``out_dir`` has no room for; ``space``: of
        :meth:`_space_needed`, ``why``: what happened."""
        needed, basis = space
        keep = self.max_keep_ckpts
        advice = (f'max_keep_ckpts={keep}: an atomic save holds max_keep_ckpts + 1 = {keep + 1} checkpoints '
                  f'at once, so the disk needs about {(keep + 1) * needed} bytes for them' if keep > 0 else
                  'max_keep_ckpts=-1 keeps every checkpoint: set max_keep_ckpts')
        return NoSpaceForCheckpointError(
            f'not saving {filename}{why}: {shutil.disk_usage(self.out_dir).free} bytes free in {self.out_dir}, it '
            f'needs about {needed} ({basis} + margin). {advice}. Free space, lower max_keep_ckpts, or set out_dir on '
            'a larger disk; then run again with --resume.')

    def _check_space(self, filename: str, space: tuple[int, str]) -> None:
        """Raise :class:`NoSpaceForCheckpointError` unless ``out_dir`` has room for ``space``
        (of :meth:`_space_needed`)."""
        if shutil.disk_usage(self.out_dir).free < space[0]:
            raise self._no_space(filename, space)

    def _remove(self, steps: list[int]) -> None:
        for step in steps:
            path = self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(step))
            if osp.isfile(path):
                os.remove(path)

    # saving -------------------------------------------------------------------------------------
    def _save_checkpoint_with_step(self, runner, step, meta) -> None:
        if not isinstance(self.file_backend, LocalBackend):
            runner.logger.warning('SafeCheckpointHook: atomic saving needs a local out_dir; saving as MMEngine does')
            return super()._save_checkpoint_with_step(runner, step, meta)
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        bad = nonfinite_tensors(model.state_dict().items())
        if bad:
            raise NonFiniteError(f'not saving {self.filename_tmpl.format(step)}: {len(bad)} of '
                                 f'{len(model.state_dict())} weights are non-finite (first: {bad[:3]}); the last '
                                 'checkpoint with finite weights is kept')
        self._rng_states = all_gather_object(rng_state())  # every rank, before the master-only save
        filename = self.filename_tmpl.format(step)
        space = self._space_needed(runner)
        if is_main_process():
            self._check_space(filename, space)

        outdated = []
        if self.max_keep_ckpts > 0 and not (self.keep_ckpt_ids and self.keep_ckpt_ids[-1] == step):
            if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
                outdated.append(self.keep_ckpt_ids.popleft())
            self.keep_ckpt_ids.append(step)
            runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))
        runner.message_hub.update_info('outdated_ckpt_ids', outdated)  # removed after this save, or on resume

        self.last_ckpt = self.file_backend.join_path(self.out_dir, filename)
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        try:
            runner.save_checkpoint(
                self.out_dir, filename + TMP_SUFFIX, self.file_client_args, save_optimizer=self.save_optimizer,
                save_param_scheduler=self.save_param_scheduler, meta=meta, by_epoch=self.by_epoch,
                backend_args=self.backend_args, **self.args)
        except BaseException as error:  # a full disk, a kill: the partial file goes, the kept checkpoints stay
            if is_main_process() and osp.isfile(self.last_ckpt + TMP_SUFFIX):
                os.remove(self.last_ckpt + TMP_SUFFIX)
            if isinstance(error, OSError) and error.errno == errno.ENOSPC:
                raise self._no_space(filename, space, f': the disk filled up during the save ({error})') from error
            raise
        if not is_main_process():
            return
        publish(self.last_ckpt + TMP_SUFFIX, self.last_ckpt)
        write_text_atomically(osp.join(runner.work_dir, 'last_checkpoint'), self.last_ckpt)
        self._remove(outdated)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        states = getattr(self, '_rng_states', None)
        if states is not None:
            checkpoint['rng_states'] = states
            self._rng_states = None

    # resuming -----------------------------------------------------------------------------------
    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        states = checkpoint.get('rng_states')
        if states is not None and len(states) != get_world_size():
            runner.logger.warning(f'the checkpoint holds the random state of {len(states)} processes, this run has '
                                  f'{get_world_size()}: it continues, but not as the same random sequence')
            states = None
        self._resumed_rng = states[get_rank()] if states is not None else None

    def before_train_epoch(self, runner) -> None:
        state, self._resumed_rng = getattr(self, '_resumed_rng', None), None
        loop = runner.train_loop
        if state is None or (loop.iter == 0 and loop.epoch == 0):  # load_from starts a new run
            return
        if isinstance(loop, IterBasedTrainLoop):
            loop.dataloader_iterator = RestoreAfterReplay(loop.dataloader_iterator, loop.iter, state)
        else:  # epoch-based loops resume at an epoch boundary, before the epoch's data loader starts
            set_rng_state(state)

    # validation during training draws no random numbers of the training run ------------------------
    def before_val_epoch(self, runner) -> None:
        self._before_val = rng_state()

    def after_val_epoch(self, runner, metrics) -> None:
        state, self._before_val = getattr(self, '_before_val', None), None
        if state is not None:  # first, so that a best-checkpoint save stores the training run's state
            set_rng_state(state)
        super().after_val_epoch(runner, metrics)


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
