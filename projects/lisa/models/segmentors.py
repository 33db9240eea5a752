"""Segmentors of the recipes, registered into mmseg's MODELS.

mmseg's ``EncoderDecoder`` resizes the logits of every class to the image's full resolution before it takes the
argmax: an 8000 x 8000 image of ADE20K's 150 classes asks for 150 x 8000 x 8000 float32 = 38.4 GB.
:class:`LowMemoryEncoderDecoder` gives the same prediction with memory of the order of the label map.
"""
from __future__ import annotations

import torch
from mmengine.logging import print_log
from mmengine.structures import PixelData
from mmseg.models.segmentors import EncoderDecoder
from mmseg.models.utils import resize
from mmseg.registry import MODELS
from torch import Tensor

MAX_LOGITS_BYTES = 2**30
"""Full-resolution logits up to this size are kept as mmseg keeps them (``seg_logits``)."""


def resized_argmax(logits: Tensor, size: tuple[int, int], align_corners: bool) -> Tensor:
    """``resize(logits, size).argmax(dim=1)`` of ``logits`` (``1 x C x h x w``), resized one class at a time.

    Each class is resized into one buffer and reduced into a running maximum: the memory is 17 bytes per output
    pixel (the resized class and the running maximum, float32; the int64 label map; a mask), not ``4 C``. Ties
    and NaNs are resolved as ``argmax`` does (the first maximum; NaN above any number). The bilinear resize is
    the one ``F.interpolate(logits, size, mode='bilinear')`` runs (as mmseg's ``resize``), which computes each
    output value of an NCHW tensor alone, so the result is bit for bit that of one call. Only for outputs with
    ``H + W <= 128`` does PyTorch's CPU kernel vectorise over the classes (and round differently): those (a few
    kB) are resized in one call. Returns the ``1 x H x W`` int64 label map.
    """
    if size[0] + size[1] <= 128:
        return resize(logits, size=size, mode='bilinear', align_corners=align_corners, warning=False)[0].argmax(
            dim=0, keepdim=True)
    resized = logits.new_empty((1, 1, *size))
    values, best = resized[0, 0], logits.new_empty(size)
    better = torch.empty(size, dtype=torch.bool, device=logits.device)
    label = torch.zeros(size, dtype=torch.long, device=logits.device)
    for index in range(logits.shape[1]):
        # F.interpolate's own kernel (size given, no scale factor), writing into the buffer
        torch._C._nn.upsample_bilinear2d(logits[:, index:index + 1], size, align_corners, None, None, out=resized)
        if index == 0:
            best.copy_(values)
            continue
        torch.gt(values, best, out=better)
        if torch.isnan(values.sum()):  # a NaN (or +inf and -inf) among the values: NaN ranks first
            better |= values.isnan() & ~best.isnan()
        label.masked_fill_(better, index)
        torch.maximum(best, values, out=best)
    return label[None]


@MODELS.register_module()
class LowMemoryEncoderDecoder(EncoderDecoder):
    """mmseg's ``EncoderDecoder`` whose prediction at full resolution holds memory to the order of the label map.

    Where the logits resized to the image's size (``C x H x W``) fit in ``max_logits_bytes``, the result is
    mmseg's, ``seg_logits`` included. Larger ones are never built: the label map is computed one class at a
    time by :func:`resized_argmax`, bit for bit the same, and the logits are kept at the model's resolution (padding
    removed, flip undone) as ``unresized_seg_logits`` instead of ``seg_logits``. The other arguments are
    ``EncoderDecoder``'s.
    """

    def __init__(self, *args, max_logits_bytes: int = MAX_LOGITS_BYTES, **kwargs) -> None:
        if isinstance(max_logits_bytes, bool) or not isinstance(max_logits_bytes, int) or max_logits_bytes < 0:
            raise ValueError(f'max_logits_bytes must be an integer >= 0 (bytes), got {max_logits_bytes!r}')
        super().__init__(*args, **kwargs)
        self.max_logits_bytes = max_logits_bytes
        self._warned = False

    def postprocess_result(self, seg_logits: Tensor, data_samples=None):
        if data_samples is None or seg_logits.shape[1] == 1:  # no size to restore, or a sigmoid head
            return super().postprocess_result(seg_logits, data_samples)
        for i, sample in enumerate(data_samples):
            height, width = sample.metainfo['ori_shape'][:2]
            if seg_logits.shape[1] * height * width * seg_logits.element_size() <= self.max_logits_bytes:
                super().postprocess_result(seg_logits[i:i + 1], [sample])
                continue
            logits = self._unpadded(seg_logits[i:i + 1], sample.metainfo)
            label = resized_argmax(logits, (height, width), self.align_corners)
            sample.set_data(dict(unresized_seg_logits=PixelData(data=logits[0]), pred_sem_seg=PixelData(data=label)))
            if not self._warned:
                self._warned = True
                print_log(f'{sample.metainfo.get("img_path", "an image")} ({height}x{width}): its {seg_logits.shape[1]}'
                          f' logits at full resolution would exceed max_logits_bytes={self.max_logits_bytes}, so '
                          'they are kept at the model\'s resolution (unresized_seg_logits), not as seg_logits; '
                          'the prediction is the same. Raise model.max_logits_bytes to keep them.', logger='current')
        return data_samples

    @staticmethod
    def _unpadded(logits: Tensor, meta: dict) -> Tensor:
        """The logits of one image with the padding removed and the flip undone, as mmseg does before resizing."""
        left, right, top, bottom = meta.get('img_padding_size', meta.get('padding_size', [0] * 4))
        logits = logits[..., top:logits.shape[-2] - bottom, left:logits.shape[-1] - right]
        if meta.get('flip'):
            direction = meta.get('flip_direction')
            if direction not in ('horizontal', 'vertical'):
                raise ValueError(f"flip_direction must be 'horizontal' or 'vertical', got {direction!r}")
            logits = logits.flip(dims=(3, ) if direction == 'horizontal' else (2, ))
        return logits
