"""Workaround for an inductor bug of torch 2.14: stride orders of symbolic strides sorted without a ShapeEnv.

Inductor's lowering (``GraphLowering.run_node``) orders the strides of a view that a graph
outputs, e.g. ``q`` of shape ``(B, 1, N, d)`` that LiSA's walk saves for backward, by
``ir.get_stride_order(strides)`` without the graph's ``ShapeEnv``, so plain SymPy compares
them. With ``N = (H // 4) * (W // 4)`` after a stride-4 patch embedding, SymPy cannot tell
``8 * N < 1`` (``N`` might be 0 for all it knows) and inductor raises ``TypeError: cannot
determine truth value of Relational`` (pytorch/pytorch#172204, #185510; the fix proposed
upstream, #185871, recovers the ShapeEnv of the active graph, as done here).

:func:`install` wraps ``ir.get_fill_order``: when it raises that ``TypeError`` without a
ShapeEnv inside an inductor lowering, the order is computed again with the graph's ShapeEnv
(``argsort_sym``, which decides by the size hints and guards). Whatever torch computed
before is unchanged; only the comparisons it failed on are answered. Eager code never
reaches it. Nothing installs it on import: call :func:`install` right before ``torch.compile``
(it is idempotent).
"""
from __future__ import annotations

import functools
import inspect


def install() -> bool:
    """Wrap ``torch._inductor.ir.get_fill_order`` once; False where this torch has no such function."""
    try:
        from torch._inductor import ir
        from torch._inductor.virtualized import V
    except ImportError:
        return False
    original = getattr(ir, 'get_fill_order', None)
    if original is None or 'shape_env' not in inspect.signature(original).parameters:
        return False
    if getattr(original, '_lisa_shape_env_fallback', False):
        return True

    @functools.wraps(original)
    def get_fill_order(seq, shape_env=None):
        try:
            return original(seq, shape_env)
        except TypeError:
            sizevars = getattr(V.graph, 'sizevars', None)  # a NullHandler outside a lowering
            if shape_env is not None or sizevars is None:
                raise
            return original(seq, sizevars.shape_env)

    get_fill_order._lisa_shape_env_fallback = True
    ir.get_fill_order = get_fill_order
    return True
