"""Mixed precision on a machine without CUDA: bf16 autocast on the CPU.

MMEngine's ``AmpOptimWrapper`` asserts a GPU when it is built, that is after
the whole set-up of a run. On the CPU, autocast supports ``bfloat16`` only;
bf16 keeps fp32's exponent range, so no loss scaling is needed and
:class:`CPUAmpOptimWrapper` is a plain ``OptimWrapper`` whose forward runs
under ``torch.autocast('cpu', dtype=torch.bfloat16)``.

mmcv's CPU ops of two-stage detectors (``nms`` of the RPN's proposals, ``RoIAlign``) have
float32 kernels only and fail on the bf16 tensors autocast produces, at the first step;
:func:`enable_amp` refuses such a model at start (:func:`fp32_only_ops`).
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


#: mmcv ops without a bfloat16 CPU kernel, as ``type`` names in a model config.
FP32_ONLY_OPS = ('nms', 'soft_nms', 'nms_rotated', 'RoIAlign', 'RoIPool', 'DeformRoIPool', 'ModulatedDeformRoIPool',
                 'DCN', 'DCNv2', 'DeformConv2d', 'ModulatedDeformConv2d')


def fp32_only_ops(model_cfg, path: str = 'model') -> list[str]:
    """Where the training part of ``model_cfg`` uses an op of :data:`FP32_ONLY_OPS` (``test_cfg`` left out:
    evaluation runs outside autocast)."""
    if isinstance(model_cfg, (list, tuple)):
        return [p for i, v in enumerate(model_cfg) for p in fp32_only_ops(v, f'{path}[{i}]')]
    if not isinstance(model_cfg, dict):
        return []
    found = [f'{path}.type={model_cfg["type"]!r}'] if model_cfg.get('type') in FP32_ONLY_OPS else []
    return found + [p for k, v in model_cfg.items() if k != 'test_cfg' for p in fp32_only_ops(v, f'{path}.{k}')]


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
    ops = fp32_only_ops(cfg.get('model'))
    if ops:
        raise ValueError(f'--amp: no CUDA here, and bf16 autocast on the CPU would stop at the first step: mmcv\'s '
                         f'CPU kernels of {ops} are float32 only. Train this model without --amp on the CPU, or '
                         'with --amp on a CUDA machine')
    cfg.optim_wrapper.type = 'CPUAmpOptimWrapper'
    for key in ('loss_scale', 'dtype'):
        cfg.optim_wrapper.pop(key, None)
    return 'mixed precision: no CUDA here, so bf16 autocast on the CPU without loss scaling (CPUAmpOptimWrapper)'
