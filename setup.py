"""Builds the fused CPU kernel of LiSA's local branch; the metadata is in setup.cfg.

Needs torch at build time: ``pip install --no-build-isolation -e .`` (as
``tools/install.sh`` does). Without the kernel the local branch falls back to
tensor operations (same results, slower on the CPU).
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
            extra_link_args=['-fopenmp'])
    ],
    cmdclass={'build_ext': BuildExtension},
)
