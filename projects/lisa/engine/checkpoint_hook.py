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

:class:`~.runtime_hook.SafeRuntimeHook` turns the ``CheckpointHook`` of the mm base configs into this one.
"""
from __future__ import annotations

import errno
import os
import os.path as osp
import shutil

from mmengine.dist import all_gather_object, get_rank, get_world_size, is_main_process
from mmengine.fileio import LocalBackend
from mmengine.hooks import CheckpointHook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS
from mmengine.runner import IterBasedTrainLoop

from .checkpoint import (
    SPACE_MARGIN,
    SPACE_MARGIN_BYTES,
    TMP_SUFFIX,
    NoSpaceForCheckpointError,
    optimizer_bytes,
    publish,
    remove_partial_saves,
    state_bytes,
    write_text_atomically,
)
from .nonfinite import NonFiniteError, nonfinite_tensors
from .resume import RestoreAfterReplay, rng_state, set_rng_state


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
