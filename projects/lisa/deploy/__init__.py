"""Deployment: ONNX export of the dense models (:mod:`.onnx`) with what inference needs as the
file's metadata (:mod:`.metadata`), segmentation and detection from that file alone
(:mod:`.infer`, :mod:`.detect`), the rewrites that keep their sizes symbolic (:mod:`.rewrites`),
exportable stand-ins of mmcv's detection ops (:mod:`.nms`, :mod:`.roi_align`) and Mask R-CNN's
post-processing written with them (:mod:`.detector`), checked against mmdet's own test by
:mod:`.agreement`. LiSA's attentions export as they are (under ``torch.export`` they trace their
plain-tensor references, :mod:`projects.lisa.models.attention.ops.backend`)."""
from .detect import Detections, OnnxDetector
from .detector import MaskRCNNDetections, paste_detections
from .infer import OnnxSegmentor
from .metadata import Metadata, MetadataError, inference_metadata
from .onnx import SegmentorLogits, build_model, export, relative_errors
from .rewrites import pooling_matrix, symbolic_adaptive_pooling, symbolic_upsampling

__all__ = ['Detections', 'MaskRCNNDetections', 'Metadata', 'MetadataError', 'OnnxDetector', 'OnnxSegmentor',
           'SegmentorLogits', 'build_model', 'export', 'inference_metadata', 'relative_errors', 'pooling_matrix',
           'symbolic_adaptive_pooling', 'symbolic_upsampling', 'paste_detections']
