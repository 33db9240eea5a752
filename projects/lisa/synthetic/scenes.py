"""Procedural scenes: flat-coloured shapes over a striped, noisy background.

An object's class fixes its colour and its shape, so a small model learns
the classes in a few hundred iterations; size, position, rotation, aspect,
brightness and pixel noise vary. Objects never overlap (their boxes keep a
margin), so every mask is the whole drawn shape.

Each shape is a polygon rasterised with pycocotools, the routine that COCO
readers decode polygon annotations with, so the painted pixels and the mask a
reader decodes from the annotation are the same pixels. A ring (a disc with a
concentric hole) has no single polygon and is annotated by its mask.

Coordinates are pixels, ``x`` to the right and ``y`` down; colours are RGB.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pycocotools import mask as mask_utils


def _regular(sides: int, phase: float = 0.0) -> np.ndarray:
    t = phase + 2 * math.pi * np.arange(sides) / sides
    return np.stack([np.cos(t), np.sin(t)], axis=1)


_ARM = 0.35  # half-width of a cross's arms, relative to its radius
UNIT_POLYGONS: dict[str, np.ndarray] = {
    'disc': _regular(32),
    'triangle': _regular(3, phase=-math.pi / 2),
    'rectangle': np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=float),
    'diamond': np.array([[0, -1], [1, 0], [0, 1], [-1, 0]], dtype=float),
    'octagon': _regular(8, phase=math.pi / 8),
    'cross': np.array([[-_ARM, -1], [_ARM, -1], [_ARM, -_ARM], [1, -_ARM], [1, _ARM],
                       [_ARM, _ARM], [_ARM, 1], [-_ARM, 1], [-_ARM, _ARM], [-1, _ARM],
                       [-1, -_ARM], [-_ARM, -_ARM]], dtype=float),
}
"""Vertices of each polygonal shape inside the unit square ``[-1, 1]^2``."""
RING_HOLE = 0.5
"""Radius of a ring's hole relative to its outer radius."""
SHAPES = (*UNIT_POLYGONS, 'ring')


@dataclass(frozen=True)
class Appearance:
    """How a class looks: its shape, its colour and the range of its aspect ratio."""

    shape: str
    colour: tuple[int, int, int]
    aspect: tuple[float, float] = (1.0, 1.0)

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f'shape must be one of {SHAPES}, got {self.shape!r}')


@dataclass(frozen=True)
class Drawn:
    """One painted object: its mask and, unless it is a ring, its outline."""

    mask: np.ndarray
    """(H, W) bool."""
    polygon: np.ndarray | None
    """(K, 2) vertices ``(x, y)``, rounded to 0.01 px; the mask is their rasterisation."""


def shape_polygon(shape: str, center: tuple[float, float], radius: float, angle: float,
                  aspect: float = 1.0) -> np.ndarray:
    """Vertices ``(K, 2)`` of ``shape`` (a ring: of its outer disc), rounded to 0.01 px.

    The unit polygon is stretched to half-extents ``(radius * aspect, radius / aspect)``,
    rotated by ``angle`` radians and moved to ``center``.
    """
    unit = UNIT_POLYGONS['disc' if shape == 'ring' else shape]
    cos, sin = math.cos(angle), math.sin(angle)
    rotation = np.array([[cos, -sin], [sin, cos]])
    vertices = (unit * [radius * aspect, radius / aspect]) @ rotation.T + center
    return vertices.round(2)


def rasterize(polygon: np.ndarray, height: int, width: int) -> np.ndarray:
    """(H, W) bool mask of a polygon, as pycocotools decodes it from an annotation."""
    rle = mask_utils.frPyObjects([polygon.ravel().tolist()], height, width)
    return mask_utils.decode(rle)[..., 0].astype(bool)


def draw_shape(shape: str, center: tuple[float, float], radius: float, angle: float,
               aspect: float, height: int, width: int) -> Drawn:
    """Rasterise one shape; a ring is its outer disc minus the hole."""
    polygon = shape_polygon(shape, center, radius, angle, aspect)
    mask = rasterize(polygon, height, width)
    if shape != 'ring':
        return Drawn(mask, polygon)
    hole = shape_polygon('disc', center, RING_HOLE * radius, angle, aspect)
    return Drawn(mask & ~rasterize(hole, height, width), None)


def striped(rng: np.random.Generator, height: int, width: int, colour: tuple[int, int, int],
            contrast: float, period: tuple[float, float], noise: float) -> np.ndarray:
    """(H, W, 3) float texture: ``colour * (1 + contrast sin(2 pi u / period)) + noise``.

    ``u`` runs along a random direction; the period is drawn from ``period`` (px)
    and the noise is Gaussian with standard deviation ``noise``.
    """
    y, x = np.mgrid[:height, :width]
    theta = rng.uniform(0, math.pi)
    u = x * math.cos(theta) + y * math.sin(theta)
    wave = np.sin(2 * math.pi * u / rng.uniform(*period) + rng.uniform(0, 2 * math.pi))
    image = np.asarray(colour, dtype=float) * (1 + contrast * wave)[..., None]
    return image + rng.normal(0, noise, (height, width, 3))


class Canvas:
    """An image being drawn: a background, then objects at free places.

    Args:
        rng: The source of every random choice.
        background: The (H, W, 3) float background, e.g. from :func:`striped`.
        noise: Standard deviation of the per-pixel noise on objects.
        margin: The least gap (px) between the boxes of two objects.
    """

    def __init__(self, rng: np.random.Generator, background: np.ndarray, noise: float = 6.0,
                 margin: float = 3.0) -> None:
        self.rng = rng
        self.image = background
        self.noise = noise
        self.margin = margin
        self._boxes: list[np.ndarray] = []

    @property
    def shape(self) -> tuple[int, int]:
        return self.image.shape[:2]

    def paint(self, mask: np.ndarray, colour: tuple[int, int, int]) -> None:
        """Fill ``mask`` with ``colour`` at a random brightness (0.85-1.15) plus noise."""
        brightness = self.rng.uniform(0.85, 1.15)
        values = np.asarray(colour, dtype=float) * brightness
        self.image[mask] = values + self.rng.normal(0, self.noise, (int(mask.sum()), 3))

    def add(self, look: Appearance, radius: tuple[float, float],
            within: tuple[float, float, float, float] | None = None,
            attempts: int = 50) -> Drawn | None:
        """Paint an object of ``look`` at a free place; None if none was found.

        Args:
            look: The object's class appearance.
            radius: Range of the radius (px), drawn uniformly.
            within: Box ``(x0, y0, x1, y1)`` the object must lie in; default the image.
            attempts: Random placements tried before giving up.
        """
        height, width = self.shape
        x0, y0, x1, y1 = within or (0, 0, width, height)
        for _ in range(attempts):
            r = self.rng.uniform(*radius)
            angle = self.rng.uniform(0, 2 * math.pi)
            aspect = self.rng.uniform(*look.aspect)
            outline = shape_polygon(look.shape, (0.0, 0.0), r, angle, aspect)
            low, high = outline.min(0), outline.max(0)
            cx_range = (max(x0, 0) - low[0] + 1, min(x1, width) - high[0] - 1)
            cy_range = (max(y0, 0) - low[1] + 1, min(y1, height) - high[1] - 1)
            if cx_range[0] >= cx_range[1] or cy_range[0] >= cy_range[1]:
                continue
            center = np.array([self.rng.uniform(*cx_range), self.rng.uniform(*cy_range)])
            box = np.concatenate([low + center, high + center])
            if any(self._overlaps(box, taken) for taken in self._boxes):
                continue
            drawn = draw_shape(look.shape, tuple(center), r, angle, aspect, height, width)
            if not drawn.mask.any():
                continue
            self._boxes.append(box)
            self.paint(drawn.mask, look.colour)
            return drawn
        return None

    def _overlaps(self, a: np.ndarray, b: np.ndarray) -> bool:
        m = self.margin
        return bool(a[0] < b[2] + m and b[0] < a[2] + m and a[1] < b[3] + m and b[1] < a[3] + m)

    def to_uint8(self) -> np.ndarray:
        """The (H, W, 3) uint8 RGB image."""
        return np.clip(self.image.round(), 0, 255).astype(np.uint8)
