"""Builds the fused CPU kernels (LiSA's local branch and the
walk's token-wise passes; the kernel attentions' depthwise conv and features); the metadata is in setup.cfg.

Needs torch at build time: ``pip install --no-build-isolation -e .`` (as
``tools/install.sh`` does). Without the kernels the same math runs in tensor
operations (same results, slower on the CPU).
"""
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    ext_modules=[
        CppExtension(
            'projects.lisa.models.attention._neighbourhood_cpu',
            ['projects/lisa/models/attention/csrc/neighbourhood_cpu.cpp'],
            # -fopenmp: at::parallel_for is OpenMP in torch's CPU builds.
            extra_compile_args=['-O3', '-fopenmp'],
            extra_link_args=['-fopenmp']),
        CppExtension(
            'projects.lisa.models.attention._features_cpu',
            ['projects/lisa/models/attention/csrc/features_cpu.cpp'],
            extra_compile_args=['-O3', '-fopenmp'],
            extra_link_args=['-fopenmp']),
        CppExtension(
            'projects.lisa.models.attention._walk_cpu',
            ['projects/lisa/models/attention/csrc/walk_cpu.cpp'],
            extra_compile_args=['-O3', '-fopenmp'],
            extra_link_args=['-fopenmp']),
    ],
    cmdclass={'build_ext': BuildExtension},
)
