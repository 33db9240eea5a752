"""What inference from an exported ONNX file needs besides the graph, stored in the file's
``metadata_props`` (ONNX's key/value metadata, one JSON value per key).

The graph maps a normalised image batch to logits (:mod:`.onnx`); to run it on an image one
needs the data preprocessor's normalisation (``mean``, ``std``, ``bgr_to_rgb``), what the sides
must be multiples of and the value padding them (``size_divisor``, ``pad_val``), how the decode
head resizes its logits (``align_corners``), the dataset's ``classes`` and ``palette``, and the
``task`` (``'segmentation'``, or ``'detection'`` for a Mask R-CNN), the test pipeline's resize
(``resize``: mmcv's ``Resize`` or PVT's ``AlignResize``, with the arguments that act on the
image; a detector's boxes are divided by its scale factor, a segmentor's logits resized back to
the image) and a detector's mask threshold (``mask_thr``, ``test_cfg.rcnn.mask_thr_binary``).
:func:`inference_metadata` reads them from the config; :meth:`Metadata.from_props` reads them
back with json alone (no torch, no OpenMMLab import). A file without the fields its task needs
(:data:`TASK_FIELDS`) is refused (re-export it), since its results would silently not be the test's.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

#: The fields a task needs beyond those every file carries (which have no default).
TASK_FIELDS = {'segmentation': ('resize', ), 'detection': ('resize', 'mask_thr')}


class MetadataError(ValueError):
    """An ONNX file without (complete) inference metadata."""


@dataclass(frozen=True)
class Metadata:
    """Inference metadata of an exported model (see the module docstring)."""

    task: str
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    bgr_to_rgb: bool
    size_divisor: int | None
    pad_val: float
    align_corners: bool
    classes: tuple[str, ...]
    palette: tuple[tuple[int, int, int], ...]
    resize: dict | None = None
    mask_thr: float | None = None

    def to_props(self) -> dict[str, str]:
        """The ``metadata_props`` of the ONNX file: each field as JSON."""
        return {k: json.dumps(v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_props(cls, props: dict[str, str], source: str) -> Metadata:
        """Read back :meth:`to_props`; :class:`MetadataError` naming ``source`` if a key that every
        file or the file's task needs is missing."""
        fields = dataclasses.fields(cls)
        names = [f.name for f in fields if f.default is dataclasses.MISSING]
        task = json.loads(props['task']) if 'task' in props else None
        needed = names + list(TASK_FIELDS.get(task, ()))
        missing = [name for name in needed if name not in props]
        if missing:
            what = 'no' if missing == needed else f'incomplete (no {", ".join(missing)})'
            raise MetadataError(f'{source} carries {what} inference metadata: re-export it with tools/export_onnx.py')
        values = {f.name: json.loads(props[f.name]) for f in fields if f.name in props}
        for name in ('mean', 'std', 'classes'):
            values[name] = None if values[name] is None else tuple(values[name])
        values['palette'] = tuple(tuple(c) for c in values['palette'])
        if values.get('resize') is not None:  # mmcv's Resize takes tuples, not lists
            values['resize'] = {k: tuple(v) if isinstance(v, list) else v for k, v in values['resize'].items()}
        return cls(**values)
