"""High-level entry points, as ``mmseg.apis`` / ``mmdet.apis``: a trained model on one image."""
from .inference import describe, draw, inference, init_model

__all__ = ['describe', 'draw', 'inference', 'init_model']
