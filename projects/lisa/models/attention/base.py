"""The kernelised attentions' common part (:class:`KernelAttention`): kernel features, focusing, depthwise conv.

The registry is in :mod:`.registry`, token/grid helpers and the positional encoding in :mod:`.layers`.
Depends on torch alone so that the operator and its benchmarks run without OpenMMLab.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import ops
from .layers import PositionalEncoding, check_heads, check_tokens, merge_heads

FEATURE_MAPS: dict[str, Callable[[Tensor], Tensor]] = {
    'relu': F.relu,
    'elu': lambda x: F.elu(x) + 1.0,  # ELU+1, the alternative of Table 8
}


def set_backend(model: nn.Module, name: str | None) -> nn.Module:
    """Set the operators' backend of every :class:`KernelAttention` of ``model`` (LiSA, FLatten, linear)
    to ``name`` (one of :data:`.ops.CHOICES`, or None: the global choice of :func:`.ops.use_backend`);
    returns ``model``. E.g. ``'reference'`` for the plain-autograd definition."""
    name = None if name is None else ops.check_backend(name)
    for m in model.modules():
        if isinstance(m, KernelAttention):
            m.backend = name
    return model


class KernelAttention(nn.Module):
    """Common part of the kernelised attentions (plain linear, FLatten, LiSA).

    Features per head (FLatten, Han et al. 2023; LiSA §3):

        q, k, v = x W_qkv                       (k += positional encoding)
        q, k   <- phi(q), phi(k)                phi = ReLU or ELU+1, so q, k >= 0
        focusing on:  q, k <- f_p((phi(.) + 1e-6) / softplus(s))   (s learnable, per channel)

    Subclasses mix ``(q, k, v)`` per head in :meth:`mix`; with ``dwc`` a
    depthwise ``kxk`` convolution of ``v`` (per head, weights shared across
    heads) is added to the mixed values before the output projection.

    ``backend``: the backend of its operators (:mod:`.ops`: the focused ReLU features, the
    depthwise convolution, and a subclass's own), one of :data:`.ops.CHOICES`; None (default)
    follows the global choice of :func:`.ops.use_backend` (``'auto'`` outside it).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        proj_drop: float = 0.0,
        feature_map: str = 'relu',
        focusing: bool = False,
        focusing_factor: float = 3.0,
        dwc: bool = False,
        dwc_kernel_size: int = 5,
        pos_shape: Sequence[int] | None = None,
        num_prefix_tokens: int = 0,
        eps: float = 1e-6,
        attn_drop: float = 0.0,
        block_index: int = 0,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        del attn_drop, block_index  # context of the contract (CONTEXT) that a kernel attention has no use for
        self.head_dim = check_heads(dim, num_heads)
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f'feature_map={feature_map!r} is not one of {sorted(FEATURE_MAPS)}')
        if focusing and not focusing_factor >= 1:
            raise ValueError(f'focusing_factor={focusing_factor} must be >= 1')
        if dwc and (dwc_kernel_size < 1 or dwc_kernel_size % 2 == 0):
            raise ValueError(f'dwc_kernel_size={dwc_kernel_size} must be a positive odd int')
        if num_prefix_tokens < 0:
            raise ValueError(f'num_prefix_tokens={num_prefix_tokens} must be >= 0')
        if not eps > 0:
            raise ValueError(f'eps={eps} must be > 0')
        self.backend = None if backend is None else ops.check_backend(backend)
        self.dim, self.num_heads = dim, num_heads
        self.feature_map = feature_map
        self.focusing_factor = focusing_factor if focusing else None
        self.num_prefix_tokens = num_prefix_tokens
        self.eps = eps

        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.scale = nn.Parameter(torch.zeros(1, 1, dim)) if focusing else None
        self.positional_encoding = (
            PositionalEncoding(dim, pos_shape, num_prefix_tokens) if pos_shape is not None else None)
        self.dwc = (
            nn.Conv2d(self.head_dim, self.head_dim, dwc_kernel_size,
                      padding=dwc_kernel_size // 2, groups=self.head_dim) if dwc else None)

    def features(self, x: Tensor, hw_shape: Sequence[int]) -> tuple[Tensor, Tensor, Tensor]:
        """Non-negative ``q, k`` and ``v``, each ``(B, h, N, d)`` (:func:`.ops.kernel_features`)."""
        qkv = self.qkv(x)
        pos = self.positional_encoding(hw_shape) if self.positional_encoding is not None else None
        s = F.softplus(self.scale).flatten() if self.focusing_factor is not None else None
        if s is not None and self.feature_map == 'relu':
            return ops.kernel_features(qkv, pos, s, self.num_heads, self.focusing_factor, backend=self.backend)
        return ops.kernel_features_reference(qkv, pos, s, self.num_heads, self.focusing_factor,
                                             FEATURE_MAPS[self.feature_map])

    def mix(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int]) -> Tensor:
        raise NotImplementedError

    def depthwise(self, v: Tensor, hw_shape: Sequence[int]) -> Tensor:
        """Depthwise conv of the grid values; prefix tokens get zero. ``(B, h, N, d)`` (:func:`.ops.depthwise_conv`)."""
        return ops.depthwise_conv(v, self.dwc.weight, self.dwc.bias, hw_shape, self.num_prefix_tokens,
                                  backend=self.backend)

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        check_tokens(x, hw_shape, self.num_prefix_tokens)
        q, k, v = self.features(x, hw_shape)
        if self.dwc is not None:
            v = v.contiguous()  # one copy, read by mix and by the depthwise conv (its CPU kernel takes it as it is)
        out = self.mix(q, k, v, hw_shape)
        if self.dwc is not None:
            out = out + self.depthwise(v, hw_shape)
        return self.proj_drop(self.proj(merge_heads(out)))
