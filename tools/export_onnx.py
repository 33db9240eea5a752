"""Export a LiSA segmentation model (or a detector's backbone + neck) to ONNX, checked against eager.

    python tools/export_onnx.py CONFIG CKPT --shape H W [--check-shape H W] [--out FILE]

``CKPT`` is a checkpoint of the config's model, or ``none`` for random
weights. What is exported, from the image batch ``input (B, 3, H, W)``
(normalised, as the data preprocessor leaves it):

* a segmentor (mmseg ``EncoderDecoder``: Semantic FPN, UperNet): the whole
  network up to the decode head's logits ``seg_logits (B, classes, H/4, W/4)``,
  before resizing and argmax;
* a detector (mmdet): ``backbone + neck``, the multi-scale features
  ``feat0 .. featK``. The rest of a two-stage detector (proposal NMS, RoI
  Align) are mmcv's compiled ops, which torch's exporter cannot trace
  (mmdeploy rewrites them; it is not part of this project).

The exporter is the one torch recommends, ``torch.onnx.export(..., dynamo=True)``
(``torch.export`` then ONNX translation), with the height and width of the
input dynamic. Before the export every LiSA attention is switched to its
reference implementation (plain tensor operations; the fast one has a fused
CPU kernel that no exporter can represent); the eager outputs it is checked
against come from the fast implementation. An op without an ONNX translation
makes the export fail with the exporter's error; ``torch.linalg.solve`` (LiSA
with T = infinity) is translated by :func:`linalg_solve_onnx`.

The exported file is then always run by onnxruntime at ``--shape`` and at
``--check-shape`` (default: 32 pixels taller and 64 wider) and compared with
eager PyTorch: the tool exits with status 1 unless every output agrees within
``--rtol`` (``max |onnx - eager| / max |eager|``), so a graph that computes
something else never passes unnoticed.
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.utils import _pair

from projects.lisa.models.attention import set_implementation


class SegmentorLogits(nn.Module):
    """An mmseg ``EncoderDecoder`` from the input batch to the decode head's logits."""

    output_names = ('seg_logits', )

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return self.model._forward(x)


class DetectorFeatures(nn.Module):
    """An mmdet detector's ``backbone + neck``: its multi-scale features."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.output_names = tuple(f'feat{i}' for i in range(model.neck.num_outs))

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        return tuple(self.model.extract_feat(x))


def symbolic_upsampling(model: nn.Module) -> None:
    """Make mmseg's ``Upsample`` (the Semantic FPN head's scale heads) keep the size symbolic.

    It computes its output size as ``int(t * scale_factor)``, which torch.export records as the
    constant of the traced input: at any other input size the upsampled maps would come out
    at the traced size (and be resized back, silently wrong). For an integer factor,
    ``F.interpolate(scale_factor=...)`` gives the same size and the same values.
    """
    from mmseg.models.utils import Upsample

    for m in model.modules():
        if isinstance(m, Upsample) and not m.size and float(m.scale_factor).is_integer():
            m.forward = functools.partial(F.interpolate, scale_factor=m.scale_factor, mode=m.mode,
                                          align_corners=m.align_corners)


def pooling_matrix(out_size: int, in_size, like: Tensor) -> Tensor:
    """``(out_size, in_size)`` averaging weights of adaptive average pooling: bin ``i`` averages
    inputs ``floor(i n / o) <= j < ceil((i + 1) n / o)``, as ``F.adaptive_avg_pool1d`` does."""
    i = torch.arange(out_size, device=like.device)[:, None]
    j = torch.arange(in_size, device=like.device)[None]
    inside = ((j >= i * in_size // out_size) & (j < ((i + 1) * in_size + out_size - 1) // out_size)).to(like.dtype)
    return inside / inside.sum(1, keepdim=True)


def symbolic_adaptive_pooling(model: nn.Module) -> None:
    """Make ``nn.AdaptiveAvgPool2d`` (UperNet's pyramid pooling) follow the input size.

    The exporter turns adaptive pooling into a fixed ``AveragePool`` whose kernel and stride are
    those of the traced input, wrong at any other size. The same means as two matrix products,
    ``P_h x P_w^T`` with :func:`pooling_matrix`, keep the sizes symbolic.
    """
    def pool(x: Tensor, size: tuple[int, int]) -> Tensor:
        return pooling_matrix(size[0], x.shape[-2], x) @ x @ pooling_matrix(size[1], x.shape[-1], x).T

    for m in model.modules():
        if isinstance(m, nn.AdaptiveAvgPool2d):
            size = _pair(m.output_size)
            if None in size:
                raise ValueError(f'{m}: output_size None (keep the input size) is not translated here')
            m.forward = functools.partial(pool, size=size)


def build_model(config: str, checkpoint: str | None, cfg_options: dict | None = None) -> nn.Module:
    """The config's model in eval mode, SyncBN reverted to BN, wrapped for export."""
    from mmengine.config import Config
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import MODELS, init_default_scope

    from projects.lisa.models.backbones.loading import load_checkpoint_strictly

    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    scope = cfg.get('default_scope', 'mmseg')
    init_default_scope(scope)
    cfg.model.pop('pretrained', None)
    cfg.model.backbone.init_cfg = None  # the backbone's ImageNet weights are not needed: CKPT or random
    model = MODELS.build(cfg.model)
    if checkpoint is None:
        model.init_weights()
    else:
        load_checkpoint_strictly(model, checkpoint)  # every tensor loaded, or IncompleteCheckpointError
    model = revert_sync_batchnorm(model).eval()
    symbolic_adaptive_pooling(model)
    if scope == 'mmseg':
        symbolic_upsampling(model)
        return SegmentorLogits(model).eval()
    if scope == 'mmdet':
        return DetectorFeatures(model).eval()
    raise ValueError(f'default_scope={scope!r}: expected an mmseg segmentor or an mmdet detector')


def linalg_solve_onnx(a, b, left: bool = True):
    """ONNX translation of ``torch.linalg.solve(a, b)`` (ONNX has no solve): Gauss-Jordan
    elimination of ``[a | b]`` without pivoting, unrolled over the static size ``d`` of ``a``.

    Step i divides row i by its pivot ``a_ii`` and subtracts ``a_ji`` times it from every
    other row j. Used by LiSA's T = infinity walk on ``I - beta K^T Q~``, a nonsingular
    M-matrix (``K^T Q~ >= 0`` has spectral radius <= 1 and ``beta < 1``): its pivots are
    positive and the elimination without pivoting is stable.
    """
    import onnx
    from onnxscript import opset18 as op

    if not left:
        raise NotImplementedError('linalg_solve(left=False) has no ONNX translation here')
    d = a.shape[-1]
    m = op.Concat(a, b, axis=-1)                                   # (..., d, d + k)
    rows, cols = op.Constant(value_ints=[-2]), op.Constant(value_ints=[-1])
    for i in range(d):
        start, stop = op.Constant(value_ints=[i]), op.Constant(value_ints=[i + 1])
        row = op.Slice(m, start, stop, rows)
        row = op.Div(row, op.Slice(row, start, stop, cols))        # row i / a_ii
        unit = op.CastLike(op.Constant(value=onnx.numpy_helper.from_array(np.eye(d, dtype=np.float32)[:, i:i + 1])), a)
        m = op.Sub(m, op.Mul(op.Sub(op.Slice(m, start, stop, cols), unit), row))  # row i becomes row / a_ii
    return op.Slice(m, op.Constant(value_ints=[d]), op.Constant(value_ints=[2 ** 62]), cols)


TRANSLATIONS = {torch.ops.aten.linalg_solve.default: linalg_solve_onnx}


def export(model: nn.Module, shape: tuple[int, int], path: Path, opset: int, batch: int = 1) -> None:
    """Export with the dynamo exporter, height and width dynamic, LiSA by its reference implementation."""
    x = torch.randn(batch, 3, *shape)
    dynamic = {'x': {2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}}
    set_implementation(model, 'reference')
    try:
        with torch.no_grad():
            program = torch.onnx.export(model, (x, ), dynamo=True, opset_version=opset, dynamic_shapes=dynamic,
                                        input_names=['input'], output_names=list(model.output_names),
                                        custom_translation_table=TRANSLATIONS)
    finally:
        set_implementation(model, 'fast')
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path), external_data=False)


def relative_errors(model: nn.Module, path: Path, shapes: list[tuple[int, int]], batch: int = 1,
                    seed: int = 0) -> list[tuple[tuple[int, int], str, float]]:
    """``max |onnx - eager| / max |eager|`` per input shape and output, onnxruntime vs eager (fast implementation)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    generator = torch.Generator().manual_seed(seed)
    errors = []
    for shape in shapes:
        x = torch.randn(batch, 3, *shape, generator=generator)
        with torch.no_grad():
            eager = model(x)
        eager = eager if isinstance(eager, tuple) else (eager, )
        outs = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        for name, ref, out in zip(model.output_names, eager, outs):
            ref = ref.numpy()
            if out.shape != ref.shape:
                errors.append((shape, name, float('inf')))
                continue
            errors.append((shape, name, float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))))
    return errors


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config', help='an mmseg segmentor or mmdet detector config')
    parser.add_argument('checkpoint', help="the model's checkpoint, or 'none' for random weights")
    parser.add_argument('--shape', type=int, nargs=2, required=True, metavar=('H', 'W'), help='export input size')
    parser.add_argument('--check-shape', type=int, nargs=2, metavar=('H', 'W'),
                        help='second input size of the check (default: H + 32, W + 64)')
    parser.add_argument('--out', type=Path, help='ONNX file (default: work_dirs/onnx/<config name>.onnx)')
    parser.add_argument('--opset', type=int, default=18, help='ONNX opset (>= 17)')
    parser.add_argument('--rtol', type=float, default=1e-4, help='largest relative error accepted by the check')
    parser.add_argument('--seed', type=int, default=0, help='random weights (CKPT none) and check inputs')
    args = parser.parse_args(argv)
    if args.opset < 17:
        parser.error(f'--opset={args.opset} must be >= 17')
    for name in ('shape', 'check_shape'):
        size = getattr(args, name)
        if size is not None and min(size) < 32:
            parser.error(f'--{name.replace("_", "-")}={size}: both sides must be >= 32 (the output stride)')
    if not args.rtol > 0:
        parser.error(f'--rtol={args.rtol} must be > 0')
    args.checkpoint = None if args.checkpoint.lower() == 'none' else args.checkpoint
    if args.checkpoint is not None and not Path(args.checkpoint).is_file():
        parser.error(f'checkpoint {args.checkpoint!r} is not a file (or pass none for random weights)')
    args.check_shape = tuple(args.check_shape or (args.shape[0] + 32, args.shape[1] + 64))
    args.shape = tuple(args.shape)
    args.out = args.out or Path('work_dirs/onnx') / (Path(args.config).stem + '.onnx')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    model = build_model(args.config, args.checkpoint)
    export(model, args.shape, args.out, args.opset)
    print(f'exported {args.out} (opset {args.opset}, input height and width dynamic)')
    errors = relative_errors(model, args.out, [args.shape, args.check_shape], seed=args.seed)
    worst = max(e for _, _, e in errors)
    for shape, name, error in errors:
        print(f'  onnxruntime vs eager at {shape[0]}x{shape[1]}, {name}: relative error {error:.2e}')
    if not worst <= args.rtol:
        print(f'FAILED: relative error {worst:.2e} > --rtol={args.rtol:g}: the ONNX graph does not compute the '
              'model', file=sys.stderr)
        return 1
    print(f'OK: every output within {args.rtol:g} relative of eager')
    return 0


if __name__ == '__main__':
    sys.exit(main())
