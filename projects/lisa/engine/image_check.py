"""The rules of a sample's image: decodable in full, not shrunk to 0 px by the pipeline's aspect-keeping
resizes, not constant, and 16-bit only where it decodes to 8 bits with content; :class:`ImageCheck` applies
them to the samples of detection and classification datasets.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from PIL import Image

from .data_problems import Problem
from .loaded_classes import is_loaded_instance

EXIF_ORIENTATION = 0x0112
TRANSPOSED_ORIENTATIONS = (5, 6, 7, 8)
"""EXIF orientations that swap width and height; OpenCV (mmcv's default image decoder) applies them."""
MIN_16_BIT_LEVELS = 16
"""The fewest 8-bit levels a 16-bit image may decode to. A 16-bit image decoding to fewer spans less than 12 bits
and decodes near black (values 0..1000 to 0..3), which training learns nothing from; 12-bit data (0..4095)
decodes to the 16 levels 0..15."""


def image_size(path: str) -> tuple[int, int]:
    """``(height, width)`` of an image as OpenCV decodes it (EXIF orientation applied), from its header."""
    with Image.open(path) as image:
        return oriented_size(image)


def oriented_size(image: Image.Image) -> tuple[int, int]:
    """``(height, width)`` of an opened image as OpenCV decodes it (EXIF orientation applied)."""
    width, height = image.size
    if image.getexif().get(EXIF_ORIENTATION, 1) in TRANSPOSED_ORIENTATIONS:
        width, height = height, width
    return height, width


def is_16_bit(image: Image.Image) -> bool:
    """Whether an opened (not yet loaded) image stores 16 bits per channel.

    Pillow opens a 16-bit colour PNG as 8-bit ``'RGB'``; the raw mode of its tiles (``'RGB;16B'``, ``'I;16B'``)
    tells the stored depth, and ``load()`` drops the tiles.
    """
    return any(';16' in (tile.args if isinstance(tile.args, str) else tile.args[0]) for tile in image.tile)


def unreadable_image(path: str, reason: str) -> Problem:
    """The problem of an image the loader cannot decode in full, ``reason`` saying why."""
    return Problem(path, f'cannot be read as an image ({reason})',
                   'a complete JPEG or PNG file (copy or export it again, or remove the sample)')


Rescale = tuple[str, tuple[int, int]]
"""An aspect-keeping resize of a pipeline and the smallest target ``scale`` it draws."""


def smallest_rescales(pipeline) -> tuple[Rescale, ...]:
    """The aspect-keeping resizes of a built pipeline, each with the smallest ``scale`` it may draw.

    ``Resize(keep_ratio=True)`` and PVT's ``AlignResize`` use their ``scale``; ``RandomResize`` draws
    ``(int(s0 * r), int(s1 * r))`` for ``r`` in ``ratio_range`` (smallest at ``r = min(ratio_range)``) or
    each edge between two scales (smallest: the minimum of each). mmcv's ``rescale_size`` grows with the
    scale, so the smallest scale gives the smallest image.
    """
    from mmcv.transforms import RandomResize, Resize
    from mmengine.utils import is_seq_of
    found = []
    for transform in getattr(pipeline, 'transforms', []):
        scale = getattr(transform, 'scale', None)
        if isinstance(transform, RandomResize):
            if not getattr(transform.resize, 'keep_ratio', False):
                continue
            if is_seq_of(scale, int) and transform.ratio_range is not None:
                low = min(transform.ratio_range)
                scale = (int(scale[0] * low), int(scale[1] * low))
            elif is_seq_of(scale, Sequence):
                scale = (min(s[0] for s in scale), min(s[1] for s in scale))
        elif not ((isinstance(transform, Resize) and transform.keep_ratio)
                  or is_loaded_instance(transform, 'projects.lisa.datasets.transforms', 'AlignResize')):
            continue
        if is_seq_of(scale, int) and len(scale) == 2:  # else a scale_factor or a form mmcv itself refuses
            found.append((type(transform).__name__, (int(scale[0]), int(scale[1]))))
    return tuple(found)


def rescale_problems(path: str, size: tuple[int, int], rescales: Sequence[Rescale]) -> list[Problem]:
    """An image that an aspect-keeping resize of the pipeline shrinks to a side of 0 px (OpenCV fails).

    mmcv rescales an ``h x w`` image to ``scale`` by ``f = min(max(scale) / max(h, w), min(scale) / min(h, w))``
    and rounds each side as ``int(side * f + 0.5)``: the short side reaches 0 when
    ``max(h, w) / min(h, w) > 2 max(scale)``.
    """
    from mmcv.image import rescale_size
    height, width = size
    for name, scale in rescales:
        new_w, new_h = rescale_size((width, height), scale)
        if min(new_w, new_h) < 1:
            return [Problem(path, f'is {height}x{width} (HxW), which {name} rescales at its smallest scale {scale} '
                                  f'to {new_h}x{new_w}: OpenCV cannot resize to 0 px and training stops there',
                            f'an aspect ratio (long / short side) of at most 2 x {max(scale)} = {2 * max(scale)} '
                            'for this pipeline: crop or pad the image (and its labels), or remove the sample')]
    return []


def image_problems(path: str, rescales: Sequence[Rescale] = ()) -> list[Problem]:
    """What the pipeline makes of an image: not decodable in full, too small for its resizes, constant, or 16-bit.

    The image is decoded as ``LoadImageFromFile`` does (``mmcv.imread``: OpenCV, 8-bit colour) and in full by
    Pillow, since OpenCV decodes a file cut short to nothing (OpenCV 5) or to the rows it holds, grey below
    (OpenCV 4). A constant image carries no signal (usually a broken export). OpenCV converts a 16-bit value to
    8 bits as ``value // 256``: an image whose values stay below 256 decodes to all zeros, one whose values span
    less than about 12 bits to fewer than :data:`MIN_16_BIT_LEVELS` levels (near black), and any 16-bit image
    loses its low 8 bits.
    """
    import mmcv
    try:
        with Image.open(path) as image:
            sixteen_bit = is_16_bit(image)
            image.load()  # Image.open reads the header only: a file cut short fails here
            problems = rescale_problems(path, oriented_size(image), rescales)
    except (OSError, ValueError) as error:
        return [unreadable_image(path, f'{type(error).__name__}: {error}')]
    decoded = mmcv.imread(path, 'color')
    if decoded is None:
        return [unreadable_image(path, "OpenCV, the decoder of mmcv's LoadImageFromFile, decodes no image from it: "
                                       'the file is truncated or corrupt')]
    constant = bool((decoded == decoded[0, 0]).all())
    rgb = tuple(decoded[0, 0, ::-1].tolist())
    if not sixteen_bit:
        if constant:
            problems.append(Problem(path, f'decodes to the constant colour {rgb} (RGB) in every pixel: it carries '
                                          'no signal',
                                    'an image with content (a constant one is usually a broken export: export it '
                                    'again or remove the sample)'))
        return problems
    stored = mmcv.imread(path, 'unchanged')
    kind = 'greyscale' if stored.ndim == 2 else 'colour'
    if stored.ndim == 3:
        stored = stored[..., :3]  # the colour loader drops an alpha channel
    decodes = (f'is a 16-bit {kind} image of values {stored.min()}..{stored.max()}, which the 8-bit colour loader '
               '(value // 256) decodes to')
    valid = ("an 8-bit image, a 16-bit one that spans the 16-bit range, or color_type='unchanged' in "
             'LoadImageFromFile with a normalisation for its range')
    lo, hi = int(decoded.min()), int(decoded.max())
    if constant:
        value = f'the constant {lo}' if kind == 'greyscale' else f'the constant colour {rgb} (RGB)'
        return problems + [Problem(path, f'{decodes} {value} in every pixel: it carries no signal', valid)]
    if hi - lo + 1 < MIN_16_BIT_LEVELS:
        return problems + [Problem(path, f'{decodes} {lo}..{hi}: {hi - lo + 1} of 256 levels, a near-black image '
                                         'that training learns nothing from', valid)]
    return problems + [Problem(path, f'{decodes} {lo}..{hi}', 'an 8-bit image (the loader drops the low 8 bits)',
                               error=False)]


@dataclass(frozen=True)
class ImageCheck:
    """The check of a sample's image alone (detection and classification datasets)."""

    rescales: tuple[Rescale, ...] = ()

    @classmethod
    def of(cls, dataset) -> ImageCheck:
        return cls(smallest_rescales(dataset.pipeline))

    def inspect(self, info: Mapping) -> tuple[list[Problem], frozenset[int]]:
        """The problems of one sample, and the classes its files hold (none: they are in the annotations)."""
        return self(info), frozenset()

    def __call__(self, info: Mapping) -> list[Problem]:
        return image_problems(info['img_path'], self.rescales)
