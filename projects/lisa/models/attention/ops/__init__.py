"""LiSA's operators, one file each: the walk (:mod:`.walk`), the neighbourhood attention
(:mod:`.neighbourhood`), the focused kernel features (:mod:`.features`) and the depthwise
convolution (:mod:`.depthwise`), each with its custom op, fake, autograd and plain-tensor
reference side by side, its table ``IMPLEMENTATIONS = {backend: function}`` and its CPU kernel
beside it (``<name>_cpu.cpp``, built into the extension ``_<name>_cpu``). :mod:`.backend` holds
the one backend choice (``'reference'`` | ``'torch'`` | ``'cpu_kernel'``, or ``'auto'``),
:func:`choose` (an operator's entry, once per call), :func:`can_run` and the one loader of the
compiled extensions. The attention modules call these functions, never an extension.
"""
from .backend import (
                      BACKENDS,
                      CHOICES,
                      can_run,
                      check_backend,
                      choose,
                      current_backend,
                      kernels_built,
                      resolve,
                      use_backend,
)
from .depthwise import depthwise_conv, depthwise_conv_reference
from .features import focus, kernel_features, kernel_features_reference
from .neighbourhood import neighbourhood_attention, neighbourhood_attention_reference
from .walk import (
                   geometric_weights,
                   random_walk,
                   random_walk_reference,
                   solve_unpivoted,
                   transition_factors,
                   untruncated_walk,
)

__all__ = [
    'BACKENDS', 'CHOICES', 'can_run', 'check_backend', 'choose', 'current_backend', 'kernels_built', 'resolve',
    'use_backend',
    'depthwise_conv', 'depthwise_conv_reference', 'focus', 'kernel_features', 'kernel_features_reference',
    'neighbourhood_attention', 'neighbourhood_attention_reference', 'geometric_weights',
    'random_walk', 'random_walk_reference', 'solve_unpivoted', 'transition_factors', 'untruncated_walk'
]
