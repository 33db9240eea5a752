"""The kernelised attentions' common part (:class:`KernelAttention`): kernel features, focusing, depthwise conv.

The registry is in :mod:`.registry`, token/grid helpers and the positional encoding in :mod:`.layers`.
Depends on torch alone so that the operator and its benchmarks run without OpenMMLab.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import fused
from .layers import PositionalEncoding, check_heads, check_tokens, merge_heads, split_heads

#: How a :class:`KernelAttention` computes: 'fast' (custom ops with analytic backward passes and
#: fused CPU kernels where built) or 'reference' (plain tensor code differentiated by autograd).
IMPLEMENTATION_NAMES = ('fast', 'reference')

FEATURE_MAPS: dict[str, Callable[[Tensor], Tensor]] = {
    'relu': F.relu,
    'elu': lambda x: F.elu(x) + 1.0,  # ELU+1, the alternative of Table 8
}


def focus(x: Tensor, p: float) -> Tensor:
    """FLatten's focusing function ``f_p(x) = ||x|| / ||x^p|| * x^p`` for ``x > 0``.

    ``f_p`` is 1-homogeneous, so it is evaluated on ``u = x / max(x)`` and
    scaled back: ``f_p(x) = max(x) ||u|| u^p / ||u^p||``. Nothing is raised
    to the p-th power above 1, so fp16 cannot overflow, and the (detached)
    rescaling leaves the value and the gradient exact.
    """
    m = x.detach().amax(dim=-1, keepdim=True)
    u = x / m
    up = u.pow(p)
    return up * (m * u.norm(dim=-1, keepdim=True) / up.norm(dim=-1, keepdim=True))


class KernelAttention(nn.Module):
    """Common part of the kernelised attentions (plain linear, FLatten, LiSA).

    Features per head (FLatten, Han et al. 2023; LiSA §3):

        q, k, v = x W_qkv                       (k += positional encoding)
        q, k   <- phi(q), phi(k)                phi = ReLU or ELU+1, so q, k >= 0
        focusing on:  q, k <- f_p((phi(.) + 1e-6) / softplus(s))   (s learnable, per channel)

    Subclasses mix ``(q, k, v)`` per head in :meth:`mix`; with ``dwc`` a
    depthwise ``kxk`` convolution of ``v`` (per head, weights shared across
    heads) is added to the mixed values before the output projection.

    ``implementation``: 'fast' (default) runs the focused ReLU features and the depthwise
    convolution by the fused CPU kernels of :mod:`.fused` where it can (each in one pass
    over the tokens, the features straight into a contiguous per-head layout); 'reference'
    in plain tensor operations (e.g. for an export that cannot represent custom ops).
    Subclasses add their own fast paths.
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
        implementation: str = 'fast',
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
        if implementation not in IMPLEMENTATION_NAMES:
            raise ValueError(f'implementation={implementation!r} is not one of {sorted(IMPLEMENTATION_NAMES)}')
        self.implementation = implementation
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
        """Non-negative ``q, k`` and ``v``, each ``(B, h, N, d)``."""
        if (self.implementation == 'fast' and self.focusing_factor is not None and self.feature_map == 'relu'
                and fused.available(fused.CPU_KERNEL, x, self.qkv.weight)):
            pos = self.positional_encoding(hw_shape) if self.positional_encoding is not None else None
            return fused.kernel_features(self.qkv(x), pos, F.softplus(self.scale).flatten(), self.num_heads,
                                         self.focusing_factor)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if self.positional_encoding is not None:
            k = k + self.positional_encoding(hw_shape)
        phi = FEATURE_MAPS[self.feature_map]
        q, k = phi(q), phi(k)
        if self.focusing_factor is not None:
            scale = F.softplus(self.scale)
            q = focus((q + 1e-6) / scale, self.focusing_factor)
            k = focus((k + 1e-6) / scale, self.focusing_factor)
        return tuple(split_heads(t, self.num_heads) for t in (q, k, v))

    def mix(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int]) -> Tensor:
        raise NotImplementedError

    def depthwise(self, v: Tensor, hw_shape: Sequence[int]) -> Tensor:
        """Depthwise conv of the grid values; prefix tokens get zero. ``(B, h, N, d)``."""
        b, h, n, d = v.shape
        p = self.num_prefix_tokens
        if self.implementation == 'fast' and fused.available(fused.CPU_KERNEL, v, self.dwc.weight):
            # channels-last on the tokens themselves; mkldnn's depthwise backward is slow on the CPU
            return fused.depthwise_conv(v, self.dwc.weight, self.dwc.bias, hw_shape, p)
        grid = v[:, :, p:].reshape(b * h, *hw_shape, d).permute(0, 3, 1, 2)
        if torch.compiler.is_compiling():
            # Inductor (torch 2.14) cannot order the symbolic strides of a permuted view that a
            # graph with dynamic shapes saves for backward; eager keeps the view (no copy).
            grid = grid.contiguous()
        out = self.dwc(grid).permute(0, 2, 3, 1).reshape(b, h, n - p, d)
        return F.pad(out, (0, 0, p, 0)) if p else out

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        check_tokens(x, hw_shape, self.num_prefix_tokens)
        q, k, v = self.features(x, hw_shape)
        if self.dwc is not None and self.implementation == 'fast':
            v = v.contiguous()  # one copy, read by the fused depthwise kernel and by mix
        out = self.mix(q, k, v, hw_shape)
        if self.dwc is not None:
            out = out + self.depthwise(v, hw_shape)
        return self.proj_drop(self.proj(merge_heads(out)))
