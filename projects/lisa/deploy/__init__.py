"""Deployment: ONNX export of the dense models (:mod:`.onnx`), the rewrites that keep their sizes
symbolic (:mod:`.rewrites`) and exportable stand-ins of mmcv's detection ops (:mod:`.nms`).
LiSA's attentions export as they are (under ``torch.export`` they trace plain tensor operations,
:mod:`projects.lisa.models.attention.fused`)."""
from .onnx import DetectorFeatures, SegmentorLogits, build_model, export, relative_errors
from .rewrites import pooling_matrix, symbolic_adaptive_pooling, symbolic_upsampling

__all__ = ['DetectorFeatures', 'SegmentorLogits', 'build_model', 'export', 'relative_errors', 'pooling_matrix',
           'symbolic_adaptive_pooling', 'symbolic_upsampling']
