"""Deployment: ONNX export of the dense models (:mod:`.onnx`) with what inference needs as the
file's metadata (the format and its reader :mod:`.metadata`, written from the config by
:mod:`.config_metadata`), segmentation and detection from that file alone (:mod:`.infer`,
:mod:`.detect`, the test resize in :mod:`.resize`), the rewrites that keep their sizes symbolic
(:mod:`.rewrites`), exportable stand-ins of mmcv's detection ops (:mod:`.nms`, :mod:`.roi_align`)
and Mask R-CNN's post-processing written with them (:mod:`.detector`), checked against mmdet's own
test by :mod:`.agreement`. LiSA's attentions export as they are (under ``torch.export`` they trace
their plain-tensor references, :mod:`projects.lisa.models.attention.ops.backend`), in the formulations
that :mod:`.shaped` writes for onnxruntime (same values, fewer and larger ops).

Two sides with their own needs: inference from the file (:mod:`.infer`, :mod:`.detect`,
:mod:`.metadata`, :mod:`.resize`) imports onnxruntime, numpy and OpenCV only; the export side torch,
MMEngine and the mm libraries. So the names below are imported on first use (``deploy.export``,
``from projects.lisa.deploy import OnnxSegmentor``), each from its module, and importing this package
imports neither side.
"""
from __future__ import annotations

import importlib

#: Each public name and the module that defines it.
EXPORTS = {
    'Detections': 'detect', 'OnnxDetector': 'detect',
    'MaskRCNNDetections': 'detector', 'paste_detections': 'detector',
    'OnnxSegmentor': 'infer',
    'Metadata': 'metadata', 'MetadataError': 'metadata',
    'inference_metadata': 'config_metadata',
    'SegmentorLogits': 'onnx', 'build_model': 'onnx', 'export': 'onnx', 'relative_errors': 'onnx',
    'gemm_linears': 'rewrites', 'pooling_matrix': 'rewrites', 'symbolic_adaptive_pooling': 'rewrites',
    'symbolic_upsampling': 'rewrites',
    'export_formulations': 'shaped',
}
__all__ = sorted(EXPORTS)


def __getattr__(name: str):
    if name not in EXPORTS:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    return getattr(importlib.import_module(f'.{EXPORTS[name]}', __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})
