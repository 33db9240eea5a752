"""Builds the fused CPU kernels, one extension per operator (LiSA's local branch and the walk's
token-wise passes; the kernel attentions' features and depthwise conv); the metadata is in setup.cfg.

Needs torch at build time: ``pip install --no-build-isolation -e .`` (as
``tools/install.sh`` does). ``LISA_WITH_KERNELS=0`` builds the package without them (no compiler
needed, as mmcv's ``MMCV_WITH_OPS=0``); the same math then runs in tensor operations (same results,
slower on the CPU).
"""
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

WITH_KERNELS = os.environ.get('LISA_WITH_KERNELS', '1')
if WITH_KERNELS not in ('0', '1'):
    raise SystemExit(f"LISA_WITH_KERNELS={WITH_KERNELS!r}: use '1' (build the CPU kernels, the default) or '0'")


#: The operators with a CPU kernel: ``ops/<name>.py`` beside its source ``ops/<name>_cpu.cpp``.
KERNELS = ('neighbourhood', 'features', 'depthwise', 'walk')


def kernel(name: str) -> CppExtension:
    """``projects.lisa.models.attention.ops._<name>_cpu`` from ``ops/<name>_cpu.cpp`` (loaded by the operators'
    one loader, ``ops/backend.py``); -fopenmp because at::parallel_for is OpenMP in torch's CPU builds."""
    return CppExtension(f'projects.lisa.models.attention.ops._{name}_cpu',
                        [f'projects/lisa/models/attention/ops/{name}_cpu.cpp'],
                        extra_compile_args=['-O3', '-fopenmp'], extra_link_args=['-fopenmp'])


setup(
    ext_modules=[kernel(name) for name in KERNELS] if WITH_KERNELS == '1' else [],
    cmdclass={'build_ext': BuildExtension},
)
