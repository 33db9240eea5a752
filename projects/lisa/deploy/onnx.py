"""ONNX export of a segmentor (to its logits) or a Mask R-CNN (to its detections), checked by onnxruntime.

What is exported, from the image batch ``input (B, 3, H, W)`` (normalised, as the data
preprocessor leaves it), with its height and width dynamic:

* a segmentor (mmseg ``EncoderDecoder``: Semantic FPN, UperNet): the whole network up to the
  decode head's logits ``seg_logits (B, classes, H/4, W/4)``, before resizing and argmax;
* a detector (mmdet Mask R-CNN, batch 1, with ``img_shape`` as a second input): RPN, NMS,
  RoI Align, box decoding and mask head, to a data-dependent number of ``boxes``, ``scores``,
  ``labels`` and 28 x 28 ``masks`` (:mod:`.detector`, whose exportable stand-ins of mmcv's ops
  the exporter translates by :data:`.detector.TRANSLATIONS`).

The exporter is the one torch recommends, ``torch.onnx.export(..., dynamo=True)``
(``torch.export`` then ONNX translation); LiSA's attentions trace plain tensor operations
while exporting, so no backend is switched beforehand. What they trace is shaped for onnxruntime
(:func:`.shaped.export_formulations`: the same values in fewer, larger ops), and every ``nn.Linear``
exports as one ``Gemm`` (:func:`.rewrites.gemm_linears`).
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from .detector import TRANSLATIONS, MaskRCNNDetections
from .rewrites import gemm_linears, symbolic_adaptive_pooling, symbolic_upsampling
from .shaped import export_formulations

if TYPE_CHECKING:
    from mmengine.config import Config


class SegmentorLogits(nn.Module):
    """An mmseg ``EncoderDecoder`` from the input batch to the decode head's logits."""

    input_names = ('input', )
    output_names = ('seg_logits', )

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return self.model._forward(x)


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


def build_model(config: str, checkpoint: str | None, cfg_options: dict | None = None,
                allow_new: Sequence[str] = (), allow_unused: Sequence[str] = (),
                allow_mismatch: Sequence[str] = ()) -> nn.Module:
    """The config's model in eval mode, SyncBN reverted to BN, its sizes symbolic and its linear layers
    on rows (:mod:`.rewrites`), wrapped for export (:class:`SegmentorLogits`, :class:`.detector.MaskRCNNDetections`).
    ``allow_*``: the exceptions of the strict load of ``checkpoint`` (:func:`~projects.lisa.models.backbones.
    loading.check_state_dict`)."""
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
        # every tensor loaded, or IncompleteCheckpointError
        load_checkpoint_strictly(model, checkpoint, allow_new, allow_unused, allow_mismatch)
    model = revert_sync_batchnorm(model).eval()
    symbolic_adaptive_pooling(model)
    gemm_linears(model)
    if scope == 'mmseg':
        symbolic_upsampling(model)
        return SegmentorLogits(model).eval()
    return MaskRCNNDetections(model).eval()


def model_inputs(model: nn.Module, x: Tensor) -> tuple[Tensor, ...]:
    """The inputs of ``model`` for the image batch ``x``: its ``example_inputs(x)``, else ``(x,)``."""
    return model.example_inputs(x) if hasattr(model, 'example_inputs') else (x, )


def export(model: nn.Module, shape: tuple[int, int], path: Path, opset: int, batch: int = 1,
           metadata: dict[str, str] | None = None, shaped: bool = True) -> None:
    """Export ``model`` (with ``output_names``) by the dynamo exporter at input ``(batch, 3, *shape)``,
    height and width dynamic, LiSA's operators as :func:`.shaped.export_formulations` writes them (with
    ``shaped=False``: their references as they are, the graph before the shaping, for comparison), to
    ``path`` (weights inside the file, ``metadata`` as its ``metadata_props``:
    :meth:`.metadata.Metadata.to_props`)."""
    inputs = model_inputs(model, torch.randn(batch, 3, *shape))
    dynamic = ({2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}, ) + (None, ) * (len(inputs) - 1)
    with torch.no_grad(), export_formulations() if shaped else contextlib.nullcontext():
        program = torch.onnx.export(model, inputs, dynamo=True, opset_version=opset, dynamic_shapes=dynamic,
                                    input_names=list(getattr(model, 'input_names', ['input'])),
                                    output_names=list(model.output_names), custom_translation_table=TRANSLATIONS)
    program.model.metadata_props.update(metadata or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path), external_data=False)


def ort_session(path: str | Path, threads: int | None = None):
    """An onnxruntime CPU session of ``path``, with ``threads`` intra-op threads (and one
    inter-op thread) if given."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])


def relative_errors(model: nn.Module, path: Path, shapes: list[tuple[int, int]], batch: int = 1,
                    seed: int = 0) -> list[tuple[tuple[int, int], str, float]]:
    """``max |onnx - eager| / max |eager|`` per input shape and output, onnxruntime vs eager
    (``inf`` where the shapes differ)."""
    session = ort_session(path)
    generator = torch.Generator().manual_seed(seed)
    errors = []
    for shape in shapes:
        inputs = model_inputs(model, torch.randn(batch, 3, *shape, generator=generator))
        with torch.no_grad():
            eager = model(*inputs)
        eager = eager if isinstance(eager, tuple) else (eager, )
        outs = session.run(None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)})
        for name, ref, out in zip(model.output_names, eager, outs):
            ref = ref.numpy()
            if out.shape != ref.shape:
                errors.append((shape, name, float('inf')))
                continue
            error = np.abs(out - ref).max(initial=0) / max(np.abs(ref).max(initial=0), 1e-30)  # 0 if empty
            errors.append((shape, name, float(error)))
    return errors
