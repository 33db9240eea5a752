"""Multi-process runs through ``torchrun`` on machines without CUDA.

MMEngine's ``init_dist`` for the pytorch launcher calls
``torch.cuda.set_device`` and DDP gets ``device_ids=[LOCAL_RANK]``; neither
exists on a CPU. There we start the ``gloo`` process group ourselves (the
Runner then skips ``init_dist``) and wrap the model without device ids.
On CUDA nothing changes: MMEngine's own path (nccl) is used.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from mmengine.config import Config


def setup_cpu_distributed(cfg: Config) -> bool:
    """Prepare ``cfg`` for a gloo run if launched without CUDA; return whether it did."""
    if cfg.get('launcher', 'none') == 'none' or torch.cuda.is_available():
        return False
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo')
    wrapper = dict(cfg.get('model_wrapper_cfg') or dict(type='MMDistributedDataParallel'))
    wrapper['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper
    cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})['backend'] = 'gloo'
    return True
