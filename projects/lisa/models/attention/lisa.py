"""LiSA: Linear Stochastic Attention (Dastani et al., arXiv 2611.04216, WACV 2027)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import KernelAttention
from .ops import geometric_weights, neighbourhood_attention, random_walk, transition_factors, untruncated_walk
from .registry import register_attention

STEP_WEIGHTS = ('adaptive', 'geometric')


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the gradient contiguous, once. The gradient of the branches'
    output reaches them as a transposed view of the projection's input gradient ``(B, N, C)``; each
    operator would otherwise copy it, and that ``(B, N, C)`` tensor would stay alive beside the copies
    until the last branch's backward."""

    @staticmethod
    def forward(x: Tensor) -> Tensor:
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs: tuple, output: Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return grad.contiguous()


def contiguous_grad(x: Tensor) -> Tensor:
    """``x``, its gradient made contiguous in the backward (:class:`_ContiguousGrad`); in eager mode with
    autograd only (a compiler plans the layouts itself)."""
    if not (x.requires_grad and torch.is_grad_enabled()) or torch.compiler.is_compiling() or torch.jit.is_tracing():
        return x
    return _ContiguousGrad.apply(x)


@register_attention('lisa')
class LiSAAttention(KernelAttention):
    """Global random walk + 3x3 local attention, fused by a learnable alpha.

    Per head, with the kernel features ``q, k >= 0`` and values ``v`` of
    :class:`KernelAttention` (FLatten's focusing function and depthwise conv
    on by default, the paper's best setting, Table 7):

    * global branch, a truncated random walk on ``S = Q~ K^T`` (Eq. 4, 8, 10)::

          Y_global,i = sum_{k=0}^{T-1} beta_k(i) (S^k V)_i

      evaluated by the low-rank recursion of :mod:`.ops.walk` in O(n d^2 + T d^3).
      ``step_weights='geometric'``: ``beta_k = (1-beta) beta^k / (1-beta^T)``.
      ``step_weights='adaptive'`` (Eq. 10): ``beta(i) = softmax(MLP([q_i; k_i]))``
      per token and head, the MLP ``2d -> hidden -> GELU -> T`` shared by the
      heads. ``num_steps=math.inf`` (geometric only) evaluates
      ``(1-beta)(I - beta S)^-1 V`` exactly through a d x d solve.
    * local branch: softmax of ``q_i.k_j / sqrt(d)`` over the 3x3 grid
      neighbourhood of token i (border-clipped); prefix tokens attend to themselves.
    * fusion: ``Y = alpha Y_global + (1 - alpha) Y_local``, ``alpha = sigmoid(a_h)``
      with one free scalar per head (``alpha_init`` at init, 0.5 by default).

    Open details of the paper, chosen here: ``beta = 0.5``; the local branch
    uses the same (focused) features as the walk with temperature ``sqrt(d)``;
    the step MLP's hidden width is ``d``: the paper does not state it, but
    its Table 1 fixes it through LiSA DeiT-T's 3.75 GFLOPs at 384x384, which
    this project's counter (:mod:`projects.lisa.benchmarks.flops`, the softmax
    row exact at 4.70) gives for width ``d`` (3.743G), not for ``d / 4``
    (3.612G) or ``2 d`` (3.917G). Its output layer starts at zero weight and
    ``log`` of the geometric weights as bias, so training starts from the
    geometric walk.

    Backends (``backend``, :func:`~.base.set_backend` for a whole model or
    :func:`.ops.use_backend` globally; :mod:`.ops.backend`): 'reference' is the
    definition, Eq. 8 and the window softmax in plain tensor code differentiated by
    autograd (:func:`~.ops.random_walk_reference`,
    :func:`~.ops.neighbourhood_attention_reference`); 'torch' runs the same math as
    custom ops with analytic backward passes in tensor operations (the local branch in
    CPU row blocks); 'cpu_kernel' those ops by the compiled CPU kernels; 'auto' (the
    default) the first that can run. All are held to the reference by the tests.
    T = infinity is plain tensor code in every backend.

    Args:
        num_steps: truncation T >= 1 (T = 1 is the self-loop), or ``math.inf`` (``'inf'`` in a config).
        beta: continuation probability in [0, 1).
        step_weights: 'adaptive' (Eq. 10) or 'geometric' (Eq. 4).
        step_mlp_hidden: hidden width of the step MLP (default: the head dim).
        use_global, use_local: keep each branch (Table 6's ablation); alpha
            exists only with both.
        local_kernel_size: odd window size of the local branch.
        alpha_init: alpha at init, in (0, 1) (the paper leaves it open).
        backend: one of :data:`.ops.CHOICES`, or None (default): the global choice (see above).
        **kwargs: :class:`KernelAttention` arguments (focusing, dwc, pos_shape, ...).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        num_steps: int | float | Literal['inf'] = 3,
        beta: float = 0.5,
        step_weights: str = 'adaptive',
        step_mlp_hidden: int | None = None,
        use_global: bool = True,
        use_local: bool = True,
        local_kernel_size: int = 3,
        backend: str | None = None,
        focusing: bool = True,
        dwc: bool = True,
        alpha_init: float = 0.5,
        **kwargs,
    ) -> None:
        super().__init__(dim, num_heads, focusing=focusing, dwc=dwc, backend=backend, **kwargs)
        if num_steps == 'inf':
            num_steps = math.inf
        if not (num_steps == math.inf or (isinstance(num_steps, int) and num_steps >= 1)):
            raise ValueError(f"num_steps={num_steps!r} must be an int >= 1 or math.inf ('inf')")
        if not 0 <= beta < 1:
            raise ValueError(f'beta={beta} must be in [0, 1)')
        if step_weights not in STEP_WEIGHTS:
            raise ValueError(f'step_weights={step_weights!r} is not one of {STEP_WEIGHTS}')
        if num_steps == math.inf and step_weights != 'geometric':
            raise ValueError("num_steps=inf needs step_weights='geometric' (Eq. 10 has one weight per step)")
        if step_weights == 'adaptive' and num_steps > 1 and beta == 0:
            raise ValueError('beta=0 puts all weight on the self-loop; adaptive step weights '
                             'start from the geometric weights and need beta in (0, 1)')
        if not (use_global or use_local):
            raise ValueError('use_global and use_local cannot both be False')
        if local_kernel_size < 1 or local_kernel_size % 2 == 0:
            raise ValueError(f'local_kernel_size={local_kernel_size} must be a positive odd int')
        if not 0 < alpha_init < 1:
            raise ValueError(f'alpha_init={alpha_init} must be in (0, 1): alpha is a sigmoid')
        if step_mlp_hidden is not None and step_mlp_hidden < 1:
            raise ValueError(f'step_mlp_hidden={step_mlp_hidden} must be a positive int')
        self.num_steps, self.beta, self.step_weights = num_steps, beta, step_weights
        self.use_global, self.use_local = use_global, use_local
        self.local_kernel_size, self.alpha_init = local_kernel_size, alpha_init

        adaptive = use_global and step_weights == 'adaptive' and num_steps > 1
        if adaptive:
            hidden = step_mlp_hidden or self.head_dim
            self.step_mlp = nn.Sequential(
                nn.Linear(2 * self.head_dim, hidden), nn.GELU(), nn.Linear(hidden, num_steps))
        else:
            self.step_mlp = None
        self.alpha = nn.Parameter(torch.zeros(num_heads)) if use_global and use_local else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.alpha is not None:
            nn.init.constant_(self.alpha, math.log(self.alpha_init / (1 - self.alpha_init)))
        if self.step_mlp is not None:
            nn.init.zeros_(self.step_mlp[-1].weight)
            with torch.no_grad():
                self.step_mlp[-1].bias.copy_(geometric_weights(self.beta, self.num_steps).log())

    def step_weights_of(self, q: Tensor, k: Tensor) -> Tensor:
        """Per-token step weights ``softmax(MLP([q_i; k_i]))``, ``(B, h, n, T)`` (Eq. 10)."""
        first, last = self.step_mlp[0], self.step_mlp[-1]
        d = self.head_dim
        # [q; k] W^T + b = (q W_q^T + b) + k W_k^T, accumulated in place: no copy of q and k.
        hidden = torch.addmm(F.linear(q, first.weight[:, :d], first.bias).flatten(0, -2),
                             k.flatten(0, -2), first.weight[:, d:].T)
        # Logits as (T, tokens): a softmax over a last dimension of size T is slow on the CPU.
        logits = torch.addmm(last.bias[:, None], last.weight, self.step_mlp[1](hidden).T)
        return logits.softmax(dim=0).T.view(*q.shape[:-1], self.num_steps)

    def global_branch(self, q: Tensor, k: Tensor, v: Tensor, weight: Tensor | None = None) -> Tensor:
        """The walk, times the per-head ``weight (1, h, 1, 1)`` when given (folded into
        the step weights: no extra pass over the tokens)."""
        if self.num_steps == math.inf:
            out = untruncated_walk(*transition_factors(q, k, self.eps), v, self.beta)
            return out if weight is None else weight * out
        if self.step_mlp is not None:
            weights = self.step_weights_of(q, k)
        else:
            weights = geometric_weights(self.beta, self.num_steps).to(v.device, torch.float32)
        return random_walk(q, k, v, weights if weight is None else weights * weight, self.eps, backend=self.backend)

    def local_branch(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int],
                     weight: Tensor | None = None) -> Tensor:
        """The 3x3 attention (prefix tokens attend to themselves), times the per-head
        ``weight (1, h, 1, 1)`` when given."""
        return neighbourhood_attention(q, k, v, hw_shape, self.head_dim ** -0.5, self.local_kernel_size, weight,
                                       self.num_prefix_tokens, backend=self.backend)

    def mix(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int]) -> Tensor:
        # Both branches read q, k, v many times; per-head contiguous copies make every pass dense.
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        if not self.use_local:
            return contiguous_grad(self.global_branch(q, k, v))
        if not self.use_global:
            return contiguous_grad(self.local_branch(q, k, v, hw_shape))
        alpha = self.alpha.sigmoid().view(1, -1, 1, 1)
        # The local branch first: autograd runs the later node's backward first, so the walk's backward
        # (the larger one) runs before the local branch's gradients of q, k, v exist.
        local = self.local_branch(q, k, v, hw_shape, 1 - alpha)
        return contiguous_grad(self.global_branch(q, k, v, alpha) + local)
