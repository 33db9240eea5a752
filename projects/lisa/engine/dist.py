"""Multi-process runs through ``torchrun`` or Slurm's ``srun`` on machines without CUDA.

MMEngine's ``init_dist`` for the pytorch and slurm launchers calls
``torch.cuda.set_device`` and DDP gets ``device_ids=[LOCAL_RANK]``; neither
exists on a CPU. There we start the ``gloo`` process group ourselves (the
Runner then skips ``init_dist``), under Slurm from the variables ``srun`` sets
as MMEngine reads them, and wrap the model without device ids.
On CUDA nothing changes: MMEngine's own path (nccl) is used.
"""
from __future__ import annotations

import os
import subprocess

import torch
import torch.distributed as dist
from mmengine.config import Config

SLURM_VARIABLES = ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_NODELIST')


def slurm_environment() -> None:
    """Set torch's ``env://`` variables (rank, world size, master address and port) from Slurm's, as
    MMEngine's slurm launcher does: the master is the first node of ``scontrol show hostname``."""
    missing = [name for name in SLURM_VARIABLES if name not in os.environ]
    if missing:
        raise RuntimeError(f'--launcher slurm without {", ".join(missing)} in the environment: start the job '
                           'with srun (tools/slurm_train.sh, tools/slurm_test.sh), or use --launcher none / pytorch')
    os.environ['RANK'] = os.environ['SLURM_PROCID']
    os.environ['WORLD_SIZE'] = os.environ['SLURM_NTASKS']
    os.environ['LOCAL_RANK'] = os.environ.get('SLURM_LOCALID', '0')
    os.environ.setdefault('MASTER_PORT', '29500')
    if 'MASTER_ADDR' not in os.environ:
        nodes = os.environ['SLURM_NODELIST']
        os.environ['MASTER_ADDR'] = subprocess.run(['scontrol', 'show', 'hostname', nodes], capture_output=True,
                                                   text=True, check=True).stdout.split()[0]


def setup_cpu_distributed(cfg: Config) -> bool:
    """Prepare ``cfg`` for a gloo run if launched without CUDA; return whether it did."""
    if cfg.get('launcher', 'none') == 'none' or torch.cuda.is_available():
        return False
    if not dist.is_initialized():
        if cfg.launcher == 'slurm':
            slurm_environment()
        dist.init_process_group(backend='gloo')
    wrapper = dict(cfg.get('model_wrapper_cfg') or dict(type='MMDistributedDataParallel'))
    wrapper['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper
    cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})['backend'] = 'gloo'
    return True
