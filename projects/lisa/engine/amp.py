"""Mixed precision on a machine without CUDA: bf16 autocast on the CPU.

MMEngine's ``AmpOptimWrapper`` asserts a GPU when it is built, that is after
the whole set-up of a run. On the CPU, autocast supports ``bfloat16`` only;
bf16 keeps fp32's exponent range, so no loss scaling is needed and
:class:`CPUAmpOptimWrapper` is a plain ``OptimWrapper`` whose forward runs
under ``torch.autocast('cpu', dtype=torch.bfloat16)``.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
from mmengine.config import Config
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module()
class CPUAmpOptimWrapper(OptimWrapper):
    """``OptimWrapper`` with the forward pass in CPU bf16 autocast; gradients and weights stay fp32."""

    @contextmanager
    def optim_context(self, model: torch.nn.Module):
        with super().optim_context(model), torch.autocast('cpu', dtype=torch.bfloat16):
            yield


def enable_amp(cfg: Config) -> str:
    """Switch ``cfg`` to mixed precision: fp16 with dynamic loss scaling on CUDA, bf16 autocast on the CPU.

    Returns a one-line description of what was chosen.
    """
    if cfg.optim_wrapper.get('type') not in (None, 'OptimWrapper', 'AmpOptimWrapper', 'CPUAmpOptimWrapper'):
        raise ValueError(f'--amp: optim_wrapper type {cfg.optim_wrapper["type"]!r} is not a single OptimWrapper; '
                         'set its mixed precision in the config')
    if torch.cuda.is_available():
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
        return 'mixed precision: fp16 autocast on CUDA with dynamic loss scaling (AmpOptimWrapper)'
    cfg.optim_wrapper.type = 'CPUAmpOptimWrapper'
    for key in ('loss_scale', 'dtype'):
        cfg.optim_wrapper.pop(key, None)
    return 'mixed precision: no CUDA here, so bf16 autocast on the CPU without loss scaling (CPUAmpOptimWrapper)'
