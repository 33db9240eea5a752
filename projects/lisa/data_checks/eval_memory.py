"""The peak memory of evaluating one segmentation image at its full resolution: :class:`EvalMemory`.

mmseg evaluates at the image's own size: the logits of every class are resized to it (``C x H x W`` float32,
150 x 8000 x 8000 = 38.4 GB for an 8000 x 8000 ADE20K image) before the argmax, unless the model is this
project's :class:`~projects.lisa.models.segmentors.LowMemoryEncoderDecoder`. An image whose step would not fit
is named before the run, not by the OOM killer halfway through the split.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .data_problems import Problem
from .image_check import Rescale, image_size, rescaled_size, smallest_rescales

LOW_MEMORY_SEGMENTOR = 'LowMemoryEncoderDecoder'
GB = 1e9

# Bytes per pixel of the image (H x W) that the step holds, by stage (mmseg 1.x, float32 logits):
LABEL_MAP = 8
"""The ground truth as ``PackSegInputs`` stores it (int64), held through the step."""
LOADING = 3 + 1 + 8
"""The decoded image (uint8 BGR) and the label map as read (uint8) and packed (int64)."""
REDUCED = 4 + 4 + 8 + 1
"""``resized_argmax``: one resized class and the running maximum (float32), the label map (int64), a mask."""
METRIC = 8 + 1 + 8 + 8 + 1 + 8 + 4
"""``IoUMetric.process``: the prediction (int64), the valid mask, prediction and label at valid pixels (int64),
the match mask, the matching labels (int64) and one float32 copy for ``histc``."""


def memory_limit() -> int:
    """The bytes of memory of this machine, or of its cgroup where that is smaller."""
    limit = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    for path in ('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'):
        try:
            with open(path) as file:
                value = file.read().strip()
        except OSError:
            continue
        if value.isdigit():
            limit = min(limit, int(value))
    return limit


@dataclass(frozen=True)
class EvalMemory:
    """The estimated peak memory of the test step of one image, for a model of ``num_classes`` classes.

    ``rescales``: the test pipeline's resizes (the model's input size); ``max_logits_bytes``: the budget of a
    ``LowMemoryEncoderDecoder``, ``None`` for mmseg's ``EncoderDecoder`` (every class resized to full size).
    The estimate counts what grows with the image (the label maps, the full-size logits, the metric's
    temporaries) and the logits at the model's input size; the network's activations, bounded by the test
    resize, are the same for every image of a config and are not counted.
    """

    num_classes: int
    rescales: tuple[Rescale, ...] = ()
    max_logits_bytes: int | None = None

    @classmethod
    def of(cls, cfg: Mapping, dataset) -> EvalMemory | None:
        """The estimate for ``dataset`` evaluated by the model of ``cfg``; None if that is no mmseg segmentor."""
        model = cfg.get('model') or {}
        head = model.get('decode_head')
        if not isinstance(head, Mapping) or not isinstance(head.get('num_classes'), int):
            return None
        budget = None
        if model.get('type') == LOW_MEMORY_SEGMENTOR:
            from projects.lisa.models.segmentors import MAX_LOGITS_BYTES
            budget = int(model.get('max_logits_bytes', MAX_LOGITS_BYTES))
        return cls(head['num_classes'], smallest_rescales(dataset.pipeline), budget)

    def input_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """``(h, w)`` the test pipeline resizes an image of ``size`` to."""
        for _, scale, edge in self.rescales:
            size = rescaled_size(size, scale, edge)
        return size

    def peak(self, size: tuple[int, int]) -> int:
        """The estimated peak bytes of the test step of an image of ``size`` (HxW)."""
        pixels = size[0] * size[1]
        h, w = self.input_size(size)
        logits = 4 * self.num_classes * pixels
        model = 2 * 4 * self.num_classes * h * w  # the head's logits and their resize to the input size
        if self.max_logits_bytes is None or logits <= self.max_logits_bytes:
            post = logits + 8 * pixels  # the resized logits, kept as seg_logits, and their argmax
            kept = logits
        else:
            post, kept = REDUCED * pixels, 0
        stages = (LOADING * pixels, model, post, kept + METRIC * pixels)
        return LABEL_MAP * pixels + model + max(stages)

    def problems(self, infos: Sequence[Mapping], limit: int, where: str) -> list[Problem]:
        """The images of ``infos`` whose step would exceed ``limit`` bytes (``where``: the split)."""
        found = []
        for info in infos:
            try:
                size = image_size(info['img_path'])
            except (OSError, ValueError):
                continue  # an unreadable image is the sample check's
            peak = self.peak(size)
            if peak > limit:
                found.append(Problem(
                    info['img_path'], f'is {size[0]}x{size[1]} (HxW): evaluating it at full resolution ({where}) '
                    f'needs about {peak / GB:.1f} GB ({self.num_classes} classes), more than the {limit / GB:.1f} '
                    'GB of memory available', f'an image that fits: {self._advice(size)}downscale or tile the '
                    'image and its label map, or a machine with more memory (tools/check_data.py --memory-limit)'))
        return found

    def _advice(self, size: tuple[int, int]) -> str:
        """How the segmentor would evaluate an image of ``size`` without its full-size logits, if it keeps them."""
        logits = 4 * self.num_classes * size[0] * size[1]
        reduced = EvalMemory(self.num_classes, self.rescales, 0).peak(size) / GB
        if self.max_logits_bytes is None:
            return (f"model.type='{LOW_MEMORY_SEGMENTOR}' with max_logits_bytes < {logits} (its full-size logits; "
                    f'the same prediction in about {reduced:.1f} GB), or ')
        if logits <= self.max_logits_bytes:
            return f'model.max_logits_bytes < {logits} (its full-size logits; about {reduced:.1f} GB), or '
        return ''
