"""Stop a run at the first non-finite value instead of training on, saving and scoring NaN.

MMEngine trains on when the loss turns NaN: every parameter becomes NaN one step
later, checkpoints store NaN weights and validation reports a plausible number
(``argmax`` over NaN logits is class 0). :class:`NonFiniteGuardHook` checks

* the floating-point inputs of each training batch (naming the batch's files),
* the gradients, right before each optimizer step (a ``register_step_pre_hook``
  on every optimizer, so after gradient clipping and the DDP all-reduce: all
  ranks decide alike), and the logged losses after it,
* the predictions of every validation / test batch, so that a metric is never
  computed from non-finite outputs.

``on_nonfinite='stop'`` (default) raises :class:`NonFiniteError` with the
iteration and what to check; ``'skip'`` drops the optimizer step (every gradient
set to ``None``: no update, no weight decay, no moment update), counts it in
``train/nonfinite_skipped`` and stops after ``max_consecutive_skips`` in a row.
With fp16 loss scaling (``AmpOptimWrapper``) the ``GradScaler`` itself skips
overflowing steps and lowers the scale; those steps are normal, reported as
``train/amp_skipped`` and only ``max_consecutive_skips`` in a row stop the run.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import torch
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.optim import AmpOptimWrapper, OptimWrapper
from mmengine.registry import HOOKS
from mmengine.structures import BaseDataElement

WHAT_TO_CHECK = ('check the learning rate and its warm-up (a smaller lr or a longer warm-up), the loss weights, '
                 'gradient clipping (optim_wrapper.clip_grad), the batch\'s files (tools/check_data.py) and, '
                 'with --amp, the fp16 range (bf16 or fp32)')


class NonFiniteError(FloatingPointError):
    """A loss, gradient, weight or prediction was NaN or infinite; the message says where and what to check."""


def nonfinite_tensors(named: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """Names of the floating-point tensors of ``named`` holding a NaN or an infinity."""
    return [name for name, t in named
            if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())]


def _prediction_tensors(sample: BaseDataElement, prefix: str = '') -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors of a data sample's predicted fields (ground truth ``gt_*`` / ``ignored_*`` left out)."""
    for key, value in sample.items():
        if key.startswith(('gt_', 'ignored_')):
            continue
        if isinstance(value, BaseDataElement):
            yield from _prediction_tensors(value, f'{prefix}{key}.')
        elif isinstance(value, torch.Tensor):
            yield f'{prefix}{key}', value


def sample_files(data_batch) -> list[str]:
    """The image files of a batch, as its data samples name them."""
    samples = data_batch.get('data_samples', []) if isinstance(data_batch, dict) else []
    return [s.metainfo.get('img_path') for s in samples
            if isinstance(s, BaseDataElement) and s.metainfo.get('img_path')]


def _optim_wrappers(optim_wrapper) -> list[OptimWrapper]:
    """The single wrappers of an ``OptimWrapper`` or an ``OptimWrapperDict``."""
    inner = getattr(optim_wrapper, 'optim_wrappers', None)
    return list(inner.values()) if isinstance(inner, dict) else [optim_wrapper]


def _uses_loss_scaling(wrapper: OptimWrapper) -> bool:
    return isinstance(wrapper, AmpOptimWrapper) and wrapper.cast_dtype in (None, torch.float16)


@HOOKS.register_module()
class NonFiniteGuardHook(Hook):
    """Stop (or skip the step) at a non-finite input, gradient or loss; fail a metric on non-finite predictions.

    Args:
        on_nonfinite: ``'stop'`` raises :class:`NonFiniteError`; ``'skip'`` drops the step and counts it.
        max_consecutive_skips: skipped steps in a row (``'skip'`` or fp16 loss scaling) that stop the run.
    """

    priority = 'VERY_HIGH'
    ACTIONS = ('stop', 'skip')

    def __init__(self, on_nonfinite: str = 'stop', max_consecutive_skips: int = 20) -> None:
        if on_nonfinite not in self.ACTIONS:
            raise ValueError(f'on_nonfinite={on_nonfinite!r}: expected one of {self.ACTIONS}')
        if not isinstance(max_consecutive_skips, int) or max_consecutive_skips < 1:
            raise ValueError(f'max_consecutive_skips={max_consecutive_skips!r}: expected an integer >= 1')
        self.on_nonfinite = on_nonfinite
        self.max_consecutive_skips = max_consecutive_skips
        self._registered: set[int] = set()
        self._files: list[str] = []
        self._iter = 0
        self._skipped = self._amp_skipped = self._in_a_row = 0
        self._step_skipped = False
        self._scales: list[float | None] = []

    # training ------------------------------------------------------------------------------------
    def before_train(self, runner) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        names = {id(p): n for n, p in model.named_parameters()}
        for wrapper in _optim_wrappers(runner.optim_wrapper):
            if id(wrapper.optimizer) not in self._registered:
                self._registered.add(id(wrapper.optimizer))
                wrapper.optimizer.register_step_pre_hook(self._gradient_check(names))

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self._iter, self._files, self._step_skipped = runner.iter + 1, sample_files(data_batch), False
        inputs = data_batch.get('inputs') if isinstance(data_batch, dict) else None
        tensors = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        bad = nonfinite_tensors((self._files[i] if i < len(self._files) else f'input {i}', t)
                                for i, t in enumerate(tensors))
        if bad:
            raise NonFiniteError(f'iteration {self._iter}: non-finite input values in {bad}; fix or drop these files '
                                 '(tools/check_data.py lists every bad sample)')
        self._scales = [w.loss_scaler.get_scale() if _uses_loss_scaling(w) else None
                        for w in _optim_wrappers(runner.optim_wrapper)]

    def _batch(self) -> str:
        return f' Batch files: {self._files}.' if self._files else ''

    def _gradient_check(self, names: dict[int, str]):
        def check(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
            params = [p for group in optimizer.param_groups for p in group['params'] if p.grad is not None]
            bad = nonfinite_tensors((names.get(id(p), '?'), p.grad) for p in params)
            if not bad:
                return
            if self.on_nonfinite == 'stop':
                raise NonFiniteError(
                    f'iteration {self._iter}: non-finite gradients in {len(bad)} of {len(params)} parameters '
                    f'(first: {bad[:3]}); the step was not applied.{self._batch()} {WHAT_TO_CHECK}; '
                    'or skip such steps with NonFiniteGuardHook(on_nonfinite="skip")')
            for p in params:
                p.grad = None
            self._skipped += 1
            self._step_skipped = True
        return check

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        wrappers = _optim_wrappers(runner.optim_wrapper)
        lowered = [w.loss_scaler.get_scale() for w, s in zip(wrappers, self._scales)
                   if s is not None and w.loss_scaler.get_scale() < s]
        if lowered:  # GradScaler found inf/NaN gradients, skipped the step and lowered the scale
            self._amp_skipped += 1
            self._step_skipped = True
        losses = {k: float(torch.as_tensor(v).detach()) for k, v in (outputs or {}).items()
                  if isinstance(v, (float, int, torch.Tensor)) and torch.as_tensor(v).numel() == 1}
        bad = [(k, v) for k, v in losses.items() if not math.isfinite(v)]
        if bad and self.on_nonfinite == 'stop' and not any(s is not None for s in self._scales):
            raise NonFiniteError(f'iteration {self._iter}: non-finite loss {bad}.{self._batch()} {WHAT_TO_CHECK}')
        self._in_a_row = self._in_a_row + 1 if self._step_skipped else 0
        if self._in_a_row >= self.max_consecutive_skips:
            scale = f' (fp16 loss scale now {lowered[0]:g})' if lowered else ''
            raise NonFiniteError(f'iteration {self._iter}: {self._in_a_row} steps in a row skipped for non-finite '
                                 f'gradients{scale}; the run has diverged. {WHAT_TO_CHECK}')
        if self._skipped:  # logged with the losses from the first skipped step on
            runner.message_hub.update_scalar('train/nonfinite_skipped', self._skipped)
        if any(s is not None for s in self._scales):
            runner.message_hub.update_scalar('train/amp_skipped', self._amp_skipped)

    # evaluation ----------------------------------------------------------------------------------
    def _check_predictions(self, mode: str, batch_idx: int, data_batch, outputs) -> None:
        for i, sample in enumerate(outputs or []):
            if not isinstance(sample, BaseDataElement):
                continue
            bad = nonfinite_tensors(_prediction_tensors(sample))
            if bad:
                files = sample_files(data_batch)
                where = files[i] if i < len(files) else f'sample {i} of batch {batch_idx}'
                raise NonFiniteError(
                    f'{mode}: the metric failed: predictions {bad} of {where} are non-finite, so any score '
                    'computed from them would be meaningless. The weights or this input are broken: check the '
                    'checkpoint (tools/train.py stops on non-finite training) and this file')

    def after_val_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._check_predictions('validation', batch_idx, data_batch, outputs)

    def after_test_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._check_predictions('test', batch_idx, data_batch, outputs)
