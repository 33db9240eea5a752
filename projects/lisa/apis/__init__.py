"""High-level entry points of the tools, as ``mmseg.apis`` / ``mmdet.apis``: a trained model on one image
(:mod:`.inference`, ``tools/image_demo.py``), what ``tools/test.py --show-dir`` / ``--out`` keep of a test run
(:mod:`.predictions`) and what a config's pipeline feeds the model (:mod:`.browse`, ``tools/browse_dataset.py``)."""
from .inference import describe, draw, inference, init_model

__all__ = ['describe', 'draw', 'inference', 'init_model']
