"""ONNX export of a segmentor (to its logits) or a detector's backbone + neck, checked by onnxruntime.

What is exported, from the image batch ``input (B, 3, H, W)`` (normalised, as the data
preprocessor leaves it), with its height and width dynamic:

* a segmentor (mmseg ``EncoderDecoder``: Semantic FPN, UperNet): the whole network up to the
  decode head's logits ``seg_logits (B, classes, H/4, W/4)``, before resizing and argmax;
* a detector (mmdet): ``backbone + neck``, the multi-scale features ``feat0 .. featK``. The
  rest of a two-stage detector (proposal NMS, RoI Align) are mmcv's compiled ops, which
  torch's exporter cannot trace.

The exporter is the one torch recommends, ``torch.onnx.export(..., dynamo=True)``
(``torch.export`` then ONNX translation); LiSA's attentions trace plain tensor operations
while exporting, so nothing is switched beforehand.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from .rewrites import symbolic_adaptive_pooling, symbolic_upsampling

if TYPE_CHECKING:
    from mmengine.config import Config


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


def load_config(config: str | Path, cfg_options: dict | None = None) -> tuple[Config, str]:
    """The config (``cfg_options`` merged in) and its default scope, which must be mmseg's or
    mmdet's; the scope is made the default one."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    cfg = Config.fromfile(str(config))
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    scope = cfg.get('default_scope', 'mmseg')
    if scope not in ('mmseg', 'mmdet'):
        raise ValueError(f'default_scope={scope!r}: expected an mmseg segmentor or an mmdet detector')
    init_default_scope(scope)
    return cfg, scope


def build_model(config: str, checkpoint: str | None, cfg_options: dict | None = None) -> nn.Module:
    """The config's model in eval mode, SyncBN reverted to BN, its sizes symbolic
    (:mod:`.rewrites`), wrapped for export (:class:`SegmentorLogits`, :class:`DetectorFeatures`)."""
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import MODELS

    from projects.lisa.models.backbones.loading import load_checkpoint_strictly

    cfg, scope = load_config(config, cfg_options)
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
    return DetectorFeatures(model).eval()


def export(model: nn.Module, shape: tuple[int, int], path: Path, opset: int, batch: int = 1,
           metadata: dict[str, str] | None = None) -> None:
    """Export ``model`` (with ``output_names``) by the dynamo exporter at input ``(batch, 3, *shape)``,
    height and width dynamic, to ``path`` (weights inside the file, ``metadata`` as its
    ``metadata_props``: :meth:`.metadata.Metadata.to_props`)."""
    x = torch.randn(batch, 3, *shape)
    dynamic = {'x': {2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}}
    with torch.no_grad():
        program = torch.onnx.export(model, (x, ), dynamo=True, opset_version=opset, dynamic_shapes=dynamic,
                                    input_names=['input'], output_names=list(model.output_names))
    program.model.metadata_props.update(metadata or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path), external_data=False)


def relative_errors(model: nn.Module, path: Path, shapes: list[tuple[int, int]], batch: int = 1,
                    seed: int = 0) -> list[tuple[tuple[int, int], str, float]]:
    """``max |onnx - eager| / max |eager|`` per input shape and output, onnxruntime vs eager
    (``inf`` where the shapes differ)."""
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
