"""High-level entry points, as ``mmseg.apis`` / ``mmdet.apis``: a trained model on one image."""
from .inference import draw, inference, init_model, task_of

__all__ = ['draw', 'inference', 'init_model', 'task_of']
