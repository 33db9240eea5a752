"""Classes of the mm libraries (and of this project's datasets), looked up only where their module is already
imported: a check of segmentation data does not import mmdet, nor one of detection data mmseg.
"""
from __future__ import annotations

import sys


def loaded_class(module: str, name: str) -> type | None:
    """The class ``module.name`` if ``module`` is imported, else None (nothing is imported)."""
    return getattr(sys.modules.get(module), name, None)


def is_loaded_instance(obj, module: str, name: str) -> bool:
    """``isinstance(obj, module.name)`` without importing a library that is not in use."""
    cls = loaded_class(module, name)
    return cls is not None and isinstance(obj, cls)
