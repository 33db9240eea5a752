"""Attention family shared by every backbone: registry, token layout, kernel features.

Every attention maps tokens ``x`` of shape ``(B, N, C)`` to ``(B, N, C)``. The
last ``H * W`` tokens lie on an ``(H, W)`` grid (row-major); the first
``num_prefix_tokens`` (e.g. a class token) do not. This module depends on
torch alone so that the operator and its benchmarks run without OpenMMLab.
"""
from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import fused

ATTENTIONS: dict[str, type[nn.Module]] = {}
#: How a :class:`KernelAttention` computes: 'fast' (custom ops with analytic backward passes and
#: fused CPU kernels where built) or 'reference' (plain tensor code differentiated by autograd).
IMPLEMENTATION_NAMES = ('fast', 'reference')

#: Keyword arguments a backbone passes to every attention it builds, whatever its type: the
#: constructor contract is ``cls(dim, num_heads, *, qkv_bias, attn_drop, proj_drop, pos_shape,
#: num_prefix_tokens, block_index, **options)``. ``pos_shape`` is the ``(H, W)`` grid at the
#: pretraining size, ``block_index`` the block's index within its stage (Swin's window attention
#: shifts in odd blocks); an attention ignores what does not apply to it (kernel attentions
#: form no attention probabilities to drop out, softmax has no position table).
CONTEXT = ('qkv_bias', 'attn_drop', 'proj_drop', 'pos_shape', 'num_prefix_tokens', 'block_index')


def register_attention(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Register an attention class under ``name`` for :func:`build_attention`.

    The class must accept ``dim``, ``num_heads`` and the keywords of :data:`CONTEXT`.
    """

    def wrap(cls: type[nn.Module]) -> type[nn.Module]:
        if name in ATTENTIONS:
            raise KeyError(f'attention {name!r} is already registered')
        params = inspect.signature(cls).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            lacking = [k for k in ('dim', 'num_heads', *CONTEXT) if k not in params]
            if lacking:
                raise TypeError(f'attention {name!r} ({cls.__name__}) must accept the keyword arguments '
                                f'{lacking} of the attention contract (projects.lisa.models.attention.CONTEXT)')
        ATTENTIONS[name] = cls
        return cls

    return wrap


def check_attention_type(cfg: object, where: str) -> dict:
    """``cfg`` as a dict if it is ``dict(type=NAME, ...)`` with NAME registered now, else raise."""
    if not isinstance(cfg, Mapping) or cfg.get('type') not in ATTENTIONS:
        raise ValueError(f'{where}={cfg!r}: expected dict(type=NAME, ...) with NAME one of {sorted(ATTENTIONS)}')
    return dict(cfg)


def build_attention(cfg: Mapping | str, dim: int, num_heads: int, **context) -> nn.Module:
    """Build an attention from ``dict(type=NAME, **kwargs)`` (or just ``NAME``).

    ``context`` holds the keywords of :data:`CONTEXT` that the caller (a backbone)
    supplies; keys in ``cfg`` override them.
    """
    cfg = {'type': cfg} if isinstance(cfg, str) else dict(cfg)
    name = cfg.pop('type', None)
    if name not in ATTENTIONS:
        raise KeyError(f'unknown attention type {name!r}; valid types: {sorted(ATTENTIONS)}')
    return ATTENTIONS[name](dim=dim, num_heads=num_heads, **{**context, **cfg})


def check_heads(dim: int, num_heads: int) -> int:
    """Return the head width, or raise if ``num_heads`` does not divide ``dim``."""
    if num_heads < 1 or dim % num_heads:
        raise ValueError(f'num_heads={num_heads} must be a positive divisor of dim={dim}')
    return dim // num_heads


def check_tokens(x: Tensor, hw_shape: Sequence[int], num_prefix_tokens: int) -> None:
    """Raise unless ``x`` holds ``num_prefix_tokens + H * W`` tokens."""
    if x.dim() != 3:
        raise ValueError(f'expected tokens of shape (B, N, C), got {tuple(x.shape)}')
    h, w = hw_shape
    if x.shape[1] != num_prefix_tokens + h * w:
        raise ValueError(
            f'N={x.shape[1]} tokens do not match hw_shape=({h}, {w}) '
            f'with {num_prefix_tokens} prefix tokens (expected {num_prefix_tokens + h * w})')


def pad_grid(x: Tensor, hw_shape: Sequence[int], multiple: int) -> Tensor:
    """Grid tokens ``(B, H*W, C)`` (no prefix tokens) as a ``(B, Hp, Wp, C)`` map, zero-padded at the
    bottom/right so that ``Hp`` and ``Wp`` are multiples of ``multiple`` (window and region attentions)."""
    check_tokens(x, hw_shape, 0)
    h, w = hw_shape
    return F.pad(x.view(x.shape[0], h, w, x.shape[-1]), (0, 0, 0, -w % multiple, 0, -h % multiple))


def partition(x: Tensor, rows: int, cols: int) -> Tensor:
    """A ``(B, Hp, Wp, C)`` map as ``(B, Hp/rows * Wp/cols, rows * cols, C)`` blocks of ``rows x cols``
    tokens (windows, regions), blocks and the tokens inside each in row-major order."""
    b, hp, wp, c = x.shape
    return x.view(b, hp // rows, rows, wp // cols, cols, c).transpose(2, 3).reshape(
        b, hp // rows * (wp // cols), rows * cols, c)


def merge_partitions(x: Tensor, hp: int, wp: int, rows: int, cols: int) -> Tensor:
    """The inverse of :func:`partition`: ``(B, nBlocks, rows * cols, C)`` back to the ``(B, Hp, Wp, C)`` map."""
    b, c = x.shape[0], x.shape[-1]
    return x.view(b, hp // rows, wp // cols, rows, cols, c).transpose(2, 3).reshape(b, hp, wp, c)


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(B, N, h*d) -> (B, h, N, d)``."""
    b, n, c = x.shape
    return x.view(b, n, num_heads, c // num_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, h, N, d) -> (B, N, h*d)``."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)


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


RESIZE_MODES = ('bilinear', 'bicubic')


@functools.lru_cache(maxsize=256)
def interpolation_matrix(size_in: int, size_out: int, mode: str, device: torch.device,
                         dtype: torch.dtype) -> Tensor:
    """``(size_out, size_in)`` matrix ``A`` of 1-D resizing: ``A x`` is ``F.interpolate(x, mode=mode,
    align_corners=False)`` along one axis (half-pixel centres, border replicated).

    Read off ``F.interpolate`` itself by resizing the unit vectors in float64 (the other axis
    of size 1 stays exact). Cached per size, outside inference mode (so that a matrix made
    at test time can still take part in training).
    """
    with torch.inference_mode(False), torch.no_grad():
        units = torch.eye(size_in, dtype=torch.float64).view(1, size_in, size_in, 1)  # channel j: e_j
        matrix = F.interpolate(units, size=(size_out, 1), mode=mode, align_corners=False)[0, :, :, 0].T
        return matrix.to(device, dtype)


def static_sizes(*sizes: int) -> bool:
    """Whether every size is a plain int, not a symbol of a trace with dynamic shapes (where a
    comparison such as ``size == pos_shape`` would pin the traced graph to one size)."""
    return all(type(s) is int for s in sizes)


def resize_grid(grid: Tensor, size: Sequence[int], mode: str) -> Tensor:
    """Resize a ``(h, w, C)`` grid to ``size = (H, W)``: ``F.interpolate(..., mode, align_corners=False)``.

    Bilinear and bicubic resizing are separable and linear, ``out = A_y G A_x^T`` per channel,
    so eagerly the grid goes through two small matmuls with cached matrices of
    :func:`interpolation_matrix` (forward and backward are dense products, no
    channels-first copy). Under tracing (``torch.compile``, ``torch.export``, ONNX) the
    size may be symbolic and ``F.interpolate`` itself is recorded.
    """
    if mode not in RESIZE_MODES:
        raise ValueError(f'mode={mode!r} is not one of {RESIZE_MODES}')
    h, w, c = grid.shape
    out_h, out_w = size
    if torch.compiler.is_compiling() or torch.jit.is_tracing() or not static_sizes(h, w, out_h, out_w):
        chw = grid.permute(2, 0, 1).unsqueeze(0)
        return F.interpolate(chw, size=(out_h, out_w), mode=mode, align_corners=False)[0].permute(1, 2, 0)
    a_y = interpolation_matrix(h, out_h, mode, grid.device, grid.dtype)
    a_x = interpolation_matrix(w, out_w, mode, grid.device, grid.dtype)
    rows = (a_y @ grid.reshape(h, w * c)).view(out_h, w, c)  # along y
    return a_x @ rows                                         # along x: (W, w) @ (H, w, C) -> (H, W, C)


class PositionalEncoding(nn.Module):
    """Learnable positional encoding for ``num_prefix_tokens + H0 * W0`` tokens.

    For another grid ``(H, W)`` the grid part is resized bicubically
    (:func:`resize_grid`); the prefix part is used as it is.
    """

    def __init__(self, dim: int, pos_shape: Sequence[int], num_prefix_tokens: int = 0) -> None:
        super().__init__()
        if len(pos_shape) != 2 or min(pos_shape) < 1:
            raise ValueError(f'pos_shape must be two positive ints (H, W), got {pos_shape}')
        self.pos_shape = tuple(int(s) for s in pos_shape)
        self.num_prefix_tokens = num_prefix_tokens
        self.weight = nn.Parameter(torch.zeros(1, num_prefix_tokens + math.prod(self.pos_shape), dim))

    def forward(self, hw_shape: Sequence[int]) -> Tensor:
        hw_shape = tuple(hw_shape)
        if static_sizes(*hw_shape) and hw_shape == self.pos_shape:
            return self.weight
        p = self.num_prefix_tokens
        grid = resize_grid(self.weight[0, p:].view(*self.pos_shape, -1), hw_shape, 'bicubic')
        grid = grid.reshape(1, -1, grid.shape[-1])
        return torch.cat([self.weight[:, :p], grid], dim=1) if p else grid


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
