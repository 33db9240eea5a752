"""Checkpoints that survive a kill at any moment and continue the run exactly.

MMEngine's ``CheckpointHook`` deletes the oldest kept checkpoint *before* writing
the new one, writes it in place, and then points ``last_checkpoint`` at it: a
kill during a save with ``max_keep_ckpts=1`` leaves no checkpoint, or a
truncated one that ``--resume`` cannot read. :class:`SafeCheckpointHook` keeps
MMEngine's arguments and file names and changes the order of a save:

1. refuse to save non-finite weights (:class:`~.nonfinite.NonFiniteError`);
2. write ``<name>.tmp``, ``fsync`` it, rename it to ``<name>`` and ``fsync`` the folder;
3. replace ``last_checkpoint`` the same way, so it only ever names a complete file;
4. only then delete the checkpoints beyond ``max_keep_ckpts``.

It also stores the random state of every rank (:mod:`.resume`) and restores it
on ``--resume``, and keeps validation from drawing random numbers during
training, so a resumed run is the uninterrupted run, bit for bit.

:class:`SafeRuntimeHook` (listed in ``configs/_base_/safe_runtime.py``) turns the
``CheckpointHook`` that the mm base configs declare into this one, so a config
need not repeat ``default_hooks``.
"""
from __future__ import annotations

import glob
import os
import os.path as osp

from mmengine.dist import all_gather_object, get_rank, get_world_size, is_main_process
from mmengine.fileio import LocalBackend
from mmengine.hooks import CheckpointHook, Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS
from mmengine.runner import IterBasedTrainLoop

from .nonfinite import NonFiniteError, nonfinite_tensors
from .resume import RestoreAfterReplay, rng_state, set_rng_state


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
    with open(path + '.tmp', 'w') as f:
        f.write(text)
    publish(path + '.tmp', path)


@HOOKS.register_module()
class SafeCheckpointHook(CheckpointHook):
    """``CheckpointHook`` (same arguments) whose saves are atomic and whose checkpoints resume bit for bit."""

    def before_train(self, runner) -> None:
        super().before_train(runner)
        if not (is_main_process() and isinstance(self.file_backend, LocalBackend)):
            return
        for stale in glob.glob(osp.join(self.out_dir, '*.tmp')):  # a save interrupted by a kill
            runner.logger.warning(f'removing {stale}, the partial file of an interrupted save')
            os.remove(stale)
        self._remove(runner.message_hub.runtime_info.get('outdated_ckpt_ids', []))  # a removal interrupted by a kill

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

        outdated = []
        if self.max_keep_ckpts > 0 and not (self.keep_ckpt_ids and self.keep_ckpt_ids[-1] == step):
            if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
                outdated.append(self.keep_ckpt_ids.popleft())
            self.keep_ckpt_ids.append(step)
            runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))
        runner.message_hub.update_info('outdated_ckpt_ids', outdated)  # removed after this save, or on resume

        filename = self.filename_tmpl.format(step)
        self.last_ckpt = self.file_backend.join_path(self.out_dir, filename)
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        runner.save_checkpoint(
            self.out_dir, filename + '.tmp', self.file_client_args, save_optimizer=self.save_optimizer,
            save_param_scheduler=self.save_param_scheduler, meta=meta, by_epoch=self.by_epoch,
            backend_args=self.backend_args, **self.args)
        if not is_main_process():
            return
        publish(self.last_ckpt + '.tmp', self.last_ckpt)
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


@HOOKS.register_module()
class SafeRuntimeHook(Hook):
    """Turn the run's plain ``CheckpointHook`` into a :class:`SafeCheckpointHook` with the same settings.

    A custom hook because the mm base configs already define ``default_hooks``
    (a config fragment cannot override another base's key). It switches the
    class of the instance, which has no state of its own to add, in
    ``before_run``: before any save and before a resume loads its checkpoint.
    """

    priority = 'HIGHEST'

    def before_run(self, runner) -> None:
        for hook in runner.hooks:
            if type(hook) is CheckpointHook:
                hook.__class__ = SafeCheckpointHook
