"""Brute-force references for the attention family, written from the papers' definitions.

Everything is computed explicitly per token pair: the n x n transition matrix
``S`` and its powers, the n x n inverse of the untruncated walk, the 3x3
neighbourhood softmax as masked dense attention, the depthwise conv and
the bicubic resize as explicit sums. Only the modules' parameters and
configuration attributes are read; none of their helper functions is called.
Intended for float64 and tiny sizes.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def heads(x: Tensor, num_heads: int) -> Tensor:
    """``(B, N, h*d) -> (B, h, N, d)``."""
    b, n, c = x.shape
    return x.reshape(b, n, num_heads, c // num_heads).permute(0, 2, 1, 3)


def unheads(x: Tensor) -> Tensor:
    """``(B, h, N, d) -> (B, N, h*d)``."""
    b, h, n, d = x.shape
    return x.permute(0, 2, 1, 3).reshape(b, n, h * d)


def cubic_weight(t: float, a: float = -0.75) -> float:
    """Keys' cubic convolution kernel (``a = -0.75``, as PyTorch's bicubic mode)."""
    t = abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    if t < 2:
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a
    return 0.0


def bicubic_matrix(n_in: int, n_out: int) -> Tensor:
    """``(n_out, n_in)`` matrix of 1-D bicubic resizing, half-pixel centres, edge replicated."""
    m = torch.zeros(n_out, n_in, dtype=torch.float64)
    for i in range(n_out):
        src = (i + 0.5) * n_in / n_out - 0.5
        i0 = math.floor(src)
        for j in range(i0 - 1, i0 + 3):
            m[i, min(max(j, 0), n_in - 1)] += cubic_weight(src - j)
    return m


def positional_encoding(weight: Tensor, pos_shape, hw_shape, num_prefix_tokens: int) -> Tensor:
    """The encoding of ``num_prefix_tokens + H*W`` tokens, grid resized as ``My G Mx^T``."""
    p = num_prefix_tokens
    (h0, w0), (h, w) = pos_shape, hw_shape
    grid = weight[0, p:].reshape(h0, w0, -1)
    grid = torch.einsum('yi,ijc,xj->yxc', bicubic_matrix(h0, h).to(weight), grid,
                        bicubic_matrix(w0, w).to(weight))
    return torch.cat([weight[0, :p], grid.reshape(h * w, -1)])[None]


def kernel_features(m: nn.Module, x: Tensor, hw_shape) -> tuple[Tensor, Tensor, Tensor]:
    """FLatten's features, as published: ``(B, h, N, d)`` each.

    ``k += pos``; ``q, k <- phi(.) + 1e-6``, divided by ``softplus(scale)``,
    then ``f_p(x) = ||x|| / ||x^p|| x^p`` over all C channels.
    """
    c = x.shape[-1]
    qkv = x @ m.qkv.weight.T + (m.qkv.bias if m.qkv.bias is not None else 0)
    q, k, v = qkv[..., :c], qkv[..., c:2 * c], qkv[..., 2 * c:]
    if m.positional_encoding is not None:
        pe = m.positional_encoding
        k = k + positional_encoding(pe.weight, pe.pos_shape, hw_shape, m.num_prefix_tokens)
    phi = {'relu': torch.relu, 'elu': lambda t: torch.where(t > 0, t + 1, torch.exp(t))}[m.feature_map]
    q, k = phi(q), phi(k)
    if m.focusing_factor is not None:
        p = m.focusing_factor
        scale = torch.log1p(torch.exp(m.scale))
        q, k = (q + 1e-6) / scale, (k + 1e-6) / scale
        q = q.norm(dim=-1, keepdim=True) / (q ** p).norm(dim=-1, keepdim=True) * q ** p
        k = k.norm(dim=-1, keepdim=True) / (k ** p).norm(dim=-1, keepdim=True) * k ** p
    return heads(q, m.num_heads), heads(k, m.num_heads), heads(v, m.num_heads)


def depthwise(m: nn.Module, v: Tensor, hw_shape) -> Tensor:
    """``sum_{dy,dx} w[c, dy, dx] v[y+dy, x+dx, c] + b[c]`` on the grid (zero outside); prefix -> 0."""
    b, h, n, d = v.shape
    p = m.num_prefix_tokens
    (hh, ww), ks = hw_shape, m.dwc.kernel_size[0]
    r = ks // 2
    grid = F.pad(v[:, :, p:].reshape(b, h, hh, ww, d), (0, 0, r, r, r, r))
    weight = m.dwc.weight[:, 0]  # (d, ks, ks)
    out = m.dwc.bias.expand(b, h, hh, ww, d).clone()
    for dy in range(ks):
        for dx in range(ks):
            out = out + weight[:, dy, dx] * grid[:, :, dy:dy + hh, dx:dx + ww]
    return torch.cat([torch.zeros_like(v[:, :, :p]), out.reshape(b, h, hh * ww, d)], dim=2)


def transition_matrix(q: Tensor, k: Tensor, eps: float) -> Tensor:
    """``S_ij = q_i.k_j / (sum_l q_i.k_l + eps n max(q_i) max(K))``, explicit ``(B, h, n, n)``.

    A row with ``q_i = 0`` (0/0) is taken as zero.
    """
    n = k.shape[-2]
    a = q @ k.transpose(-2, -1)
    denom = a.sum(-1, keepdim=True) + eps * n * q.amax(-1, keepdim=True) * k.amax((-2, -1), keepdim=True)
    return torch.where(denom > 0, a / denom.clamp_min(1e-300), torch.zeros_like(a))


def step_weights(m: nn.Module, q: Tensor, k: Tensor) -> Tensor:
    """``(B, h, n, T)``: geometric ``c_k`` broadcast, or ``softmax(MLP([q_i; k_i]))``."""
    t = m.num_steps
    if m.step_mlp is None:
        c = torch.tensor([(1 - m.beta) * m.beta ** i / (1 - m.beta ** t) for i in range(t)], dtype=q.dtype)
        return c.expand(*q.shape[:-1], t)
    first, last = m.step_mlp[0], m.step_mlp[2]
    hidden = torch.cat([q, k], dim=-1) @ first.weight.T + first.bias
    hidden = 0.5 * hidden * (1 + torch.erf(hidden / math.sqrt(2)))  # exact GELU
    return torch.softmax(hidden @ last.weight.T + last.bias, dim=-1)


def walk(s: Tensor, v: Tensor, weights: Tensor) -> Tensor:
    """``Y_i = sum_k w_k(i) (S^k V)_i`` with explicit matrix powers."""
    out, power = torch.zeros_like(v), v
    for i in range(weights.shape[-1]):
        out = out + weights[..., i:i + 1] * power
        power = s @ power
    return out


def untruncated_walk(s: Tensor, v: Tensor, beta: float) -> Tensor:
    """``(1 - beta) (I - beta S)^-1 V`` by an explicit n x n inverse."""
    eye = torch.eye(s.shape[-1], dtype=s.dtype)
    return (1 - beta) * torch.linalg.inv(eye - beta * s) @ v


def neighbourhood(q: Tensor, k: Tensor, v: Tensor, hw_shape, num_prefix_tokens: int, kernel_size: int) -> Tensor:
    """Softmax of ``q_i.k_j / sqrt(d)`` over the in-image ``kernel_size^2`` window; prefix -> v.

    Dense n x n attention restricted by an explicit mask ``|y_i - y_j|, |x_i - x_j| <= r``.
    """
    p, (hh, ww), r = num_prefix_tokens, hw_shape, kernel_size // 2
    ys, xs = torch.arange(hh).repeat_interleave(ww), torch.arange(ww).repeat(hh)
    near = ((ys[:, None] - ys).abs() <= r) & ((xs[:, None] - xs).abs() <= r)
    qg, kg, vg = q[:, :, p:], k[:, :, p:], v[:, :, p:]
    logits = (qg @ kg.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~near, -math.inf)
    return torch.cat([v[:, :, :p], torch.softmax(logits, dim=-1) @ vg], dim=2)


def lisa(m: nn.Module, x: Tensor, hw_shape) -> Tensor:
    """LiSA: ``alpha * walk + (1 - alpha) * local`` (+ dwc), projected."""
    q, k, v = kernel_features(m, x, hw_shape)
    if m.use_global:
        s = transition_matrix(q, k, m.eps)
        if m.num_steps == math.inf:
            glob = untruncated_walk(s, v, m.beta)
        else:
            glob = walk(s, v, step_weights(m, q, k))
    if m.use_local:
        loc = neighbourhood(q, k, v, hw_shape, m.num_prefix_tokens, m.local_kernel_size)
    if m.use_global and m.use_local:
        alpha = torch.sigmoid(m.alpha).view(1, -1, 1, 1)
        out = alpha * glob + (1 - alpha) * loc
    else:
        out = glob if m.use_global else loc
    if m.dwc is not None:
        out = out + depthwise(m, v, hw_shape)
    return unheads(out) @ m.proj.weight.T + m.proj.bias


def linear(m: nn.Module, x: Tensor, hw_shape) -> Tensor:
    """One hop: ``Y = A V / (A 1 + n eps)`` with the explicit ``A = Q K^T`` (+ dwc)."""
    q, k, v = kernel_features(m, x, hw_shape)
    a = q @ k.transpose(-2, -1)
    out = a @ v / (a.sum(-1, keepdim=True) + k.shape[-2] * m.eps)
    if m.dwc is not None:
        out = out + depthwise(m, v, hw_shape)
    return unheads(out) @ m.proj.weight.T + m.proj.bias


def flatten(m: nn.Module, x: Tensor, hw_shape) -> Tensor:
    """FLatten as published: ``z = 1 / (q . mean_j k_j + 1e-6)``,
    ``kv = (K^T n^-1/2)(V n^-1/2)``, ``Y = (q kv) z + DWC(V)``."""
    q, k, v = kernel_features(m, x, hw_shape)
    n = k.shape[-2]
    z = 1 / (q @ k.mean(dim=-2, keepdim=True).transpose(-2, -1) + 1e-6)
    kv = (k.transpose(-2, -1) * n ** -0.5) @ (v * n ** -0.5)
    out = q @ kv * z + depthwise(m, v, hw_shape)
    return unheads(out) @ m.proj.weight.T + m.proj.bias


def softmax(m: nn.Module, x: Tensor, hw_shape) -> Tensor:
    """``softmax(Q K^T / sqrt(d)) V``; with ``sr > 1`` keys/values from the grid reduced by
    a stride-sr patch projection and a LayerNorm (PVT), prefix tokens unreduced."""
    c, p = x.shape[-1], m.num_prefix_tokens
    w, bias = m.qkv.weight, m.qkv.bias
    q = x @ w[:c].T + bias[:c]
    src = x
    if m.sr_ratio > 1:
        b, (hh, ww), sr = x.shape[0], hw_shape, m.sr_ratio
        patches = x[:, p:].reshape(b, hh // sr, sr, ww // sr, sr, c)
        red = torch.einsum('byixjc,ocij->byxo', patches, m.sr.weight) + m.sr.bias
        red = red.reshape(b, -1, c)
        mu, var = red.mean(-1, keepdim=True), red.var(-1, unbiased=False, keepdim=True)
        red = (red - mu) / torch.sqrt(var + m.norm.eps) * m.norm.weight + m.norm.bias
        src = torch.cat([x[:, :p], red], dim=1)
    kv = src @ w[c:].T + bias[c:]
    q, k, v = (heads(t, m.num_heads) for t in (q, kv[..., :c], kv[..., c:]))
    attn = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return unheads(attn @ v) @ m.proj.weight.T + m.proj.bias
