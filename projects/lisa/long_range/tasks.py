"""Long-range probes: tasks whose labels are decided far from the pixel they label.

Two families, each deterministic by seed (image ``i`` of a split draws from its own
stream keyed by (seed, task, split, i)) and written in the formats mm datasets read:

* **Lookup** (segmentation, :func:`lookup_scene`). The image is a grid of
  ``cell``-pixel cells (one patch token each for a backbone of that patch size) over a
  grey noisy background. A *cue* (white ring, centre colour ``c_0``) starts a chain of
  pointers through *relays* (ring colour = the relay's name, one of 4 pointer colours;
  centre colour = where it points): ``c_0 -> relay named c_0 -> its centre c_1 -> ...``
  until a colour names no relay; that colour ``c_{h-1}`` (red or green) selects the
  answer. Every image holds ``relays`` relays with distinct ring colours, so the
  chain is unique and the others are distractors. Solid cells (*shapes*, half of
  them red, half green: their own colour says nothing) are all labelled with the
  answer, 0 (red) or 1 (green); every other pixel is 255 (ignored).
  ``h`` (the *hops*: lookups from the cue to the answer) is drawn per image from
  ``hops``; a shape's *distance* is the Euclidean distance in pixels from its cell
  centre to the cue's, and ``distance=(lo, hi)`` (in cells) bounds where shapes lie.
  A model whose receptive field does not reach from a shape to the cue (and through
  the relays) sees a cell whose colour says nothing about its label: chance is 50 %.
* **Pointer** (segmentation, :func:`pointer_scene`): a lookup whose hops cannot be
  short-cut by one attention. A per-image random pointer map over ``symbols`` colours
  (relays: ring = name, centre = target, names and targets distinct, none points at
  itself); the cue's centre ``c_0`` starts the chain and the answer is the symbol reached
  after ``h`` hops (an A-way label) carried by plain black *query* cells. Every symbol
  is a relay centre once, so the relays seen all at once say nothing: only the binding
  of the cue's colour to a ring, then of that ring to its centre, gives the answer
  (see :func:`pointer_scene` for the argument). Same files and side-car as the lookup.
* **Connectivity** (Pathfinder-style, :func:`pathfinder_scene`). Smooth dashed curves
  that never touch; segmentation: the pixels of the curve holding the marker (a
  disc at one of its ends) are 1, the other curves' pixels 0, the background 255
  (ignored); classification: two markers on the ends of one curve ("connected") or
  of two ("disconnected"). On the marked curve a pixel's distance is its arc length
  (px) from the marker and its hops the dash gaps crossed on the way (a local model
  must bridge each gap); on the others, the Euclidean distance to the marker and 0
  hops. An image's are those of the marker pair (the path between them for connected
  pairs, the Euclidean distance and 0 hops otherwise).

On disk (``write_probe``): segmentation (lookup, pointer) ``img_dir/{train,val}/%06d.png``,
``ann_dir/{train,val}/%06d.png`` (uint8 labels) and ``probe/{train,val}/%06d.npy``
(uint16 ``(2, H, W)``: distance in px rounded, hops), read by mmseg's
``BaseSegDataset`` and :class:`~projects.lisa.long_range.metric.LongRangeAccuracy`;
classification ``{train,val}/{connected,disconnected}/%06d.png`` (mmpretrain's
``CustomDataset``, classes in folder order) and ``meta/{train,val}.json`` (file ->
distance, hops).
"""
from __future__ import annotations

import json
import math
import shutil
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image
from scipy.ndimage import binary_dilation

PALETTE = np.array([(230, 40, 40), (40, 200, 60), (50, 80, 235), (240, 220, 40), (220, 60, 220),
                    (40, 220, 230)], dtype=float)
"""The colours of cue centres, relays and shapes (red, green, blue, yellow, magenta, cyan)."""
SHAPE_COLOURS = (0, 1)
"""Shapes are red or green; the other colours name relays."""
CUE_RING = (255, 255, 255)
IGNORE = 255
LOOKUP_CLASSES = ('red', 'green')
PATHFINDER_SEG_CLASSES = ('distractor', 'connected')
PATHFINDER_CLS_CLASSES = ('connected', 'disconnected')  # label order = sorted folder names
TASKS = ('lookup', 'pathfinder_seg', 'pathfinder_cls', 'pointer')
SYMBOLS = np.array([(228, 228, 128), (228, 28, 128), (28, 228, 128), (28, 28, 128), (228, 128, 228),
                    (228, 128, 28), (28, 128, 228), (28, 128, 28), (128, 228, 228), (128, 228, 28),
                    (128, 28, 228), (128, 28, 28)], dtype=float)
"""The pointer probe's symbols: grey (128) plus 100 on two channels with signs -- the 12 vertices of a
cuboctahedron around the background grey, so every two are >= 60 degrees (141 RGB units) apart and all
lie as far from the grey; :func:`pointer_scene` uses the first ``symbols`` of them."""
POINTER_CLASSES = ('cream', 'rose', 'spring', 'navy', 'orchid', 'orange', 'azure', 'forest', 'aqua', 'lime',
                   'violet', 'maroon')
QUERY_FILL = (20, 20, 20)
"""The pointer probe's query cells: solid near-black (no symbol, no ring)."""
HOP_MARKS = ((20, 20, 20), (255, 255, 255), (128, 128, 128))
"""In a pointer image with several hop counts, the 2x2 centre of a query cell shows its own: solid
near-black for 1 hop, a white centre for 2, a grey one for 3."""


def rng_for(seed: int, task: str, split: str, index: int) -> np.random.Generator:
    """The random stream of one image: keyed by (seed, task, split, index)."""
    return np.random.default_rng([seed, zlib.crc32(f'{task}/{split}'.encode()), index])


def _check_range(name: str, value: Sequence[float], low: float) -> tuple[float, float]:
    if len(value) != 2 or not low <= value[0] <= value[1]:
        raise ValueError(f'{name}={tuple(value)} must be (lo, hi) with {low} <= lo <= hi')
    return float(value[0]), float(value[1])


class _CellScene:
    """The canvas of the cell probes (lookup, pointer): a ``size``-px noisy grey image of ``cell``-px
    cells, a cue cell, ``relays`` relay cells and the other cells within ``distance`` (in cells) of the
    cue, in one random order (:attr:`free`), with the labels and the probe side-car to fill."""

    def __init__(self, rng: np.random.Generator, size: int, cell: int, relays: int, needed: int,
                 distance: Sequence[float], what: str) -> None:
        self.cell, self.grid = cell, size // cell
        cells = rng.permutation(self.grid * self.grid)
        self.cue, self.relays, rest = cells[0], cells[1:1 + relays], cells[1 + relays:]
        self.cy, self.cx = divmod(int(self.cue), self.grid)
        ry, rx = np.divmod(rest, self.grid)
        dist_cells = np.hypot(ry - self.cy, rx - self.cx)
        self.free = rest[(dist_cells >= float(distance[0])) & (dist_cells <= float(distance[1]))]
        if len(self.free) < needed:
            raise ValueError(f'distance={tuple(distance)}: only {len(self.free)} free cells lie in range, '
                             f'{needed} {what} needed')
        self.image = np.full((size, size, 3), 128.0) + rng.normal(0, 12, (1, 1, 3))
        self.label = np.full((size, size), IGNORE, np.uint8)
        self.probe = np.zeros((2, size, size), np.uint16)

    def box(self, c: int) -> tuple[slice, slice]:
        y, x = divmod(int(c), self.grid)
        return slice(y * self.cell, (y + 1) * self.cell), slice(x * self.cell, (x + 1) * self.cell)

    def ringed(self, c: int, ring: Sequence[float], centre: Sequence[float]) -> None:
        """Cell ``c`` in colour ``ring`` around a 2x2 ``centre``."""
        inner = slice(self.cell // 2 - 1, self.cell // 2 + 1)
        patch = np.empty((self.cell, self.cell, 3))
        patch[:] = ring
        patch[inner, inner] = centre
        self.image[self.box(c)] = patch

    def labelled(self, c: int, label: int, hops: int) -> None:
        """Cell ``c`` labelled ``label``, its side-car its distance to the cue (px) and ``hops``."""
        ys, xs = self.box(c)
        self.label[ys, xs] = label
        y, x = divmod(int(c), self.grid)
        self.probe[0, ys, xs] = round(self.cell * math.hypot(y - self.cy, x - self.cx))
        self.probe[1, ys, xs] = hops

    def finish(self, rng: np.random.Generator, noise: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The image with pixel noise of std ``noise``, as uint8, the labels and the side-car."""
        self.image += rng.normal(0, noise, self.image.shape)
        return np.clip(self.image.round(), 0, 255).astype(np.uint8), self.label, self.probe


def lookup_scene(rng: np.random.Generator, size: int = 96, cell: int = 4, hops: Sequence[int] = (1, 1),
                 relays: int = 3, shapes: int = 16, distance: Sequence[float] = (0, math.inf),
                 noise: float = 8.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """One lookup image ``(H, W, 3)`` uint8, labels ``(H, W)`` uint8, probe ``(2, H, W)`` uint16
    (distance px, hops) and its hop count (see the module docstring).

    Args:
        size: image side (px), a multiple of ``cell``.
        cell: cell side (px), >= 4 (a ring around a 2x2 centre fits).
        hops: inclusive range of the hop count, drawn uniformly per image; ``hi <= relays + 1``.
        relays: relays per image (chain and distractors), at most 4 (the pointer colours).
        shapes: shape cells per image (even: half targets).
        distance: range (in cells) of a shape's distance to the cue.
        noise: standard deviation of the pixel noise.
    """
    if cell < 4 or size % cell or size < 8 * cell:
        raise ValueError(f'size={size}, cell={cell}: need cell >= 4 and size a multiple of cell, >= 8 cells')
    lo_h, hi_h = (int(h) for h in _check_range('hops', hops, 1))
    if not 0 <= relays <= len(PALETTE) - len(SHAPE_COLOURS):
        raise ValueError(f'relays={relays} must be in [0, {len(PALETTE) - len(SHAPE_COLOURS)}]')
    if hi_h > relays + 1:
        raise ValueError(f'hops={tuple(hops)}: {hi_h} hops need >= {hi_h - 1} relays, got relays={relays}')
    if shapes < 2 or shapes % 2:
        raise ValueError(f'shapes={shapes} must be an even number >= 2')
    _check_range('distance', distance, 0)
    h = int(rng.integers(lo_h, hi_h + 1))
    # Chain c_0 .. c_{h-1}: distinct pointer colours, then a shape colour; relays named c_0 .. c_{h-2}
    # point along it, the distractors are named by the other pointer colours.
    order = len(SHAPE_COLOURS) + rng.permutation(len(PALETTE) - len(SHAPE_COLOURS))
    answer = int(rng.integers(len(SHAPE_COLOURS)))
    chain, spare = [*order[:h - 1], answer], order[h - 1:]
    named = [*chain[:-1], *spare[:relays - (h - 1)]]
    points = [*chain[1:], *(int(rng.choice([c for c in range(len(PALETTE)) if c != n]))
                            for n in spare[:relays - (h - 1)])]

    scene = _CellScene(rng, size, cell, relays, shapes, distance, 'shapes')
    colours = np.concatenate([np.full(shapes // 2, answer), np.full(shapes - shapes // 2, 1 - answer)])
    scene.ringed(scene.cue, CUE_RING, PALETTE[chain[0]])
    for c, n, p in zip(scene.relays, named, points):
        scene.ringed(c, PALETTE[n], PALETTE[p])
    for c, colour in zip(scene.free[:shapes], colours):
        scene.image[scene.box(c)] = PALETTE[colour]
        scene.labelled(c, answer, h)
    return (*scene.finish(rng, noise), h)


def _pointer_map(rng: np.random.Generator, names: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``targets`` in an order in which no name meets itself: a uniform fixed-point-free matching
    (rejection sampling: a random order has none with probability >= ~1/e, so ~e draws)."""
    for _ in range(1000):
        order = rng.permutation(targets)
        if not (order == names).any():
            return order
    raise RuntimeError(f'no fixed-point-free map from {names.tolist()} to {targets.tolist()}')


def pointer_scene(rng: np.random.Generator, size: int = 64, cell: int = 4, hops: int | Sequence[int] = 2,
                  symbols: int = 10, relays: int | None = None, queries: int = 16,
                  distance: Sequence[float] = (0, math.inf), noise: float = 8.0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """One pointer image ``(H, W, 3)`` uint8, labels ``(H, W)`` uint8 (the answer symbol on the query
    cells, 255 elsewhere), probe ``(2, H, W)`` uint16 (distance px to the cue, hops) and its (largest)
    hop count.

    **Scene.** ``cell``-pixel cells on the lookup's grey noisy background. An alphabet of
    ``A = symbols`` colours (:data:`SYMBOLS`). ``R = relays`` relay cells (ring = name, 2x2 centre =
    target) draw a per-image random pointer map ``f``: the names are ``R`` distinct symbols, the
    targets ``R`` distinct symbols, and no relay points at itself. The cue (white ring) has the
    centre ``c_0``; the chain ``c_0 -> c_1 = f(c_0) -> ... -> c_{h-1}`` runs through ``h``
    distinct symbols (so for h >= 2 the answer is never ``c_0``), and the answer ``c_{h-1}``, the
    symbol reached after ``h`` hops, is the label (0 .. A-1) of every pixel of the ``queries``
    solid near-black query cells (:data:`QUERY_FILL`). ``h = 1``: the cue's centre is the answer
    (the control any global attention must pass); ``h = 2``: one relay, the one named ``c_0``;
    ``h = 3``: two. The rest of ``f`` (the distractors) is drawn at random under those
    constraints. With ``R = A`` (the default) every symbol names a relay, so the chain never
    ends and ``h`` is not visible in the image: a data set has one hop count (``hops = h`` or
    ``(h, h)``), unless the queries show it: with a range ``hops = (lo, hi)`` (``hi <= 3``) each query
    cell asks its own hop count (the range's values dealt evenly over the queries, in random order),
    drawn as the centre of the query cell (:data:`HOP_MARKS`), and is labelled with ``c_{k-1}`` for
    its ``k`` (the chain runs through ``hi`` distinct symbols). Mixing 1 and 2 hops gives each image
    a 1-hop signal (read the cue) besides the 2-hop one. A query's *distance* is the Euclidean
    distance (px) from its cell centre to the cue's, bounded by ``distance = (lo, hi)`` cells, as in
    :func:`lookup_scene`.

    **Why one attention layer cannot (fully) short-cut it** (unlike the lookup, whose answer is one bit).
    A query cell's content is the same in every image, so in one layer the relative weights of
    its attention over the relays cannot depend on ``c_0`` (only the shared normaliser can): its
    output is ``g(cue) + z sum_r w(name_r, target_r) v(name_r, target_r)`` (plus the background),
    and the MLP and 1x1 head must read ``f(c_0)`` from it. With one bit per name
    (the lookup) the weights select the relays that point at red, the values carry their
    names, and the head reads the cue colour's bit. Here it would need, for every one of the
    ``R`` names, which of ``A - 1`` targets it has (an ``A x A`` associative memory in one
    summed vector: ``log2`` of the ``!A ~ A!/e`` derangements, 20.3 bits for A = R = 10), written
    as soft attention weights and read by one MLP (width 64, hidden 128). Seeing the relays as a
    bag does not help either: the targets are ``R`` distinct symbols, so with ``R = A`` every
    symbol is a centre exactly once and the bag of relays is the same in every image. A model
    that knows ``c_0`` and the bag but not the binding guesses among the centres other than
    ``c_0``: accuracy ``1 / (A - 1)`` at ``h = 2`` (11.1 % for A = 10; chance 1 / A = 10 %). A
    partial memory still beats that floor (say a head that attends to the relays pointing at one
    target and carries their names: right whenever the answer is that target): in the pilot a
    1-layer softmax model reached 17-18 % at 2 hops, a 2-layer one 36-39 % (hops (1, 2), 10000
    images, 4000 iterations; see configs/long_range/pointer_vit-1l_softmax_64px.py).
    (With ``R < A``: ``1 / R`` to ``1 / (R - 1)``, as ``c_0`` is a centre or not.) Following the
    chain needs ``h - 1`` look-ups in sequence: a 2-layer model (layer 1: the cue fetches the
    centre of the relay named ``c_0``; layer 2: the query reads the cue) or one step of the walk
    per hop, ``S^h V`` at the query (query -> cue -> relay), i.e. LiSA with ``T = h + 1``.

    Args:
        size: image side (px), a multiple of ``cell``, >= 8 cells.
        cell: cell side (px), >= 4 (a ring around a 2x2 centre fits).
        hops: the hop count ``h`` (or ``(h, h)``), 1 <= h <= min(A, R + 1); or a range ``(lo, hi)``,
            hi <= 3, whose values the queries share out and show.
        symbols: the alphabet size ``A``, 3 .. 12 (the labels are 0 .. A - 1).
        relays: relays per image ``R``, ``h - 1 <= R <= A``, >= 2 (None: ``A``).
        queries: query cells per image (>= 1).
        distance: range (in cells) of a query's distance to the cue.
        noise: standard deviation of the pixel noise.
    """
    if cell < 4 or size % cell or size < 8 * cell:
        raise ValueError(f'size={size}, cell={cell}: need cell >= 4 and size a multiple of cell, >= 8 cells')
    lo_h, hi_h = (int(v) for v in _check_range('hops', (hops, hops) if np.isscalar(hops) else hops, 1))
    if lo_h != hi_h and hi_h > len(HOP_MARKS):
        raise ValueError(f'hops={tuple(hops)}: a query cell shows at most {len(HOP_MARKS)} hop counts '
                         f'(the chain goes on through every named symbol, so the image must say where to '
                         f'stop); use (h, h) or hi <= {len(HOP_MARKS)}')
    h = hi_h
    if lo_h != hi_h and queries < hi_h - lo_h + 1:
        raise ValueError(f'queries={queries}: fewer than the {hi_h - lo_h + 1} hop counts of hops={tuple(hops)}')
    if not 3 <= symbols <= len(SYMBOLS):
        raise ValueError(f'symbols={symbols} must be in [3, {len(SYMBOLS)}]')
    relays = symbols if relays is None else relays
    if not 2 <= relays <= symbols:
        raise ValueError(f'relays={relays} must be in [2, symbols={symbols}]')
    if h > min(symbols, relays + 1):
        raise ValueError(f'hops={h} needs {h} distinct symbols and {h - 1} relays; symbols={symbols}, '
                         f'relays={relays}')
    if queries < 1:
        raise ValueError(f'queries={queries} must be >= 1')
    _check_range('distance', distance, 0)
    grid = size // cell
    if 1 + relays + queries > grid * grid:
        raise ValueError(f'queries={queries}, relays={relays}: {1 + relays + queries} cells do not fit '
                         f'{grid}x{grid}')
    # The chain c_0 .. c_{h-1} (distinct); relays named c_0 .. c_{h-2} point along it. The other
    # R - (h - 1) names come from the symbols off the chain's names (c_{h-1} included), their targets
    # from those off its targets (c_0 included), matched without fixed points.
    chain = rng.permutation(symbols)[:h]
    off_names = np.setdiff1d(np.arange(symbols), chain[:-1])
    off_targets = np.setdiff1d(np.arange(symbols), chain[1:])
    spare = relays - (h - 1)
    for _ in range(1000):
        names = rng.permutation(off_names)[:spare]
        targets = rng.permutation(off_targets)[:spare]
        if spare == 0 or (np.sort(names) != np.sort(targets)).any() or spare > 1:
            break  # a fixed-point-free matching exists unless both are the same single symbol
    names = np.concatenate([chain[:-1], names])
    targets = np.concatenate([chain[1:], _pointer_map(rng, names[h - 1:], targets)])

    scene = _CellScene(rng, size, cell, relays, queries, distance, 'queries')
    scene.ringed(scene.cue, CUE_RING, SYMBOLS[chain[0]])
    for c, n, t in zip(scene.relays, names, targets):
        scene.ringed(c, SYMBOLS[n], SYMBOLS[t])
    # each query's hop count: all h (one hop count), or the range dealt evenly in random order
    asks = [h] * queries if lo_h == hi_h else rng.permutation(np.resize(np.arange(lo_h, hi_h + 1), queries))
    for c, k in zip(scene.free[:queries], asks):
        if lo_h == hi_h:
            scene.image[scene.box(c)] = QUERY_FILL
        else:
            scene.ringed(c, QUERY_FILL, HOP_MARKS[k - 1])
        scene.labelled(c, chain[k - 1], k)
    return (*scene.finish(rng, noise), h)


def _curve(rng: np.random.Generator, size: int, length: int, turn: float) -> np.ndarray:
    """``(L, 2)`` integer pixels ``(y, x)`` of a smooth random curve of ``length`` unit steps
    (heading changes by N(0, turn) rad per step), an 8-connected path that touches itself only
    between neighbours along it; an empty array if it leaves the image or touches itself."""
    margin = 3
    start = rng.uniform(margin, size - margin, 2)
    towards_centre = math.atan2(size / 2 - start[0], size / 2 - start[1])
    heading = towards_centre + rng.uniform(-1, 1) + np.cumsum(rng.normal(0, turn, length))
    path = start + np.cumsum(np.stack([np.sin(heading), np.cos(heading)], 1), 0)
    if (path < margin).any() or (path > size - 1 - margin).any():
        return np.empty((0, 2), int)
    pixels = path.round().astype(int)
    pixels = pixels[np.concatenate([[True], (np.diff(pixels, axis=0) != 0).any(1)])]
    # Drop each corner pixel whose neighbours along the curve touch (an L-step): then the
    # index along the curve is the geodesic (8-connected) distance to its start.
    thin = [pixels[0]]
    for i in range(1, len(pixels) - 1):
        if np.abs(pixels[i + 1] - thin[-1]).max() > 1:
            thin.append(pixels[i])
    thin = np.array([*thin, pixels[-1]])
    apart = np.abs(thin[:, None] - thin[None]).max(-1) > 1
    if not apart[np.triu_indices(len(thin), 2)].all():
        return np.empty((0, 2), int)  # the curve touches itself
    return thin


def _curves(rng: np.random.Generator, size: int, count: int, length: int,
            attempts: int = 200) -> list[np.ndarray]:
    """``count`` curves whose pixels stay >= 3 px (Chebyshev) apart, so no two ever touch."""
    taken = np.zeros((size, size), bool)
    curves: list[np.ndarray] = []
    for _ in range(attempts):
        if len(curves) == count:
            return curves
        pixels = _curve(rng, size, length, turn=0.12)
        if not len(pixels):
            continue
        mask = np.zeros_like(taken)
        mask[pixels[:, 0], pixels[:, 1]] = True
        if (binary_dilation(mask, iterations=3) & taken).any():
            continue
        taken |= mask
        curves.append(pixels)
    raise RuntimeError(f'could not place {count} curves of length {length} in {size}x{size} px; '
                       'use fewer distractors or a shorter length')


def pathfinder_scene(rng: np.random.Generator, size: int = 64, length: int | None = None, distractors: int = 2,
                     dash: int = 4, gap: int = 2, connected: bool | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """One Pathfinder image ``(H, W, 3)`` uint8, segmentation labels ``(H, W)`` uint8 (0/1/255),
    probe ``(2, H, W)`` uint16 (distance px from the marker, gaps crossed) and the
    classification record ``dict(connected, distance, hops, markers)``.

    Args:
        size: image side, 32-256 px.
        length: curve length in px (the difficulty knob; default ``size // 2``).
        distractors: curves besides the marked one (>= 1 for a disconnected pair).
        dash, gap: dash and gap lengths along a curve (px); ``gap=0`` draws solid curves.
        connected: the classification label; None draws it with probability 1/2.
    """
    if not 32 <= size <= 256:
        raise ValueError(f'size={size} must be in [32, 256]')
    length = size // 2 if length is None else length
    if length < 2 * (dash + gap):
        raise ValueError(f'length={length} must be >= 2 * (dash + gap) = {2 * (dash + gap)}')
    if distractors < 1 or dash < 1 or gap < 0:
        raise ValueError(f'distractors={distractors}, dash={dash}, gap={gap}: need distractors >= 1, '
                         'dash >= 1, gap >= 0')
    connected = bool(rng.random() < 0.5) if connected is None else connected
    curves = _curves(rng, size, 1 + distractors, length)
    image = np.full((size, size), 20.0)
    label = np.full((size, size), IGNORE, np.uint8)
    probe = np.zeros((2, size, size), np.uint16)
    first = curves[0]
    for i, pixels in enumerate(curves):
        arc = np.arange(len(pixels))
        on = arc % (dash + gap) < dash
        y, x = pixels[on, 0], pixels[on, 1]
        image[y, x] = 230
        label[y, x] = int(i == 0)
        if i == 0:
            probe[0, y, x] = arc[on]
            probe[1, y, x] = arc[on] // (dash + gap) if gap else 0
        else:
            probe[0, y, x] = np.hypot(y - first[0, 0], x - first[0, 1]).round()
    second = first[-1] if connected else curves[1][0]
    markers = (first[0], second)
    yy, xx = np.mgrid[:size, :size]
    for my, mx in markers:
        image[(yy - my) ** 2 + (xx - mx) ** 2 <= 4] = 255
    if connected:
        distance, hops = len(first) - 1, ((len(first) - 1) // (dash + gap) if gap else 0)
    else:
        distance, hops = float(np.hypot(*(first[0] - second))), 0
    image = np.clip(image + rng.normal(0, 10, image.shape), 0, 255).round().astype(np.uint8)
    record = dict(connected=connected, distance=float(distance), hops=int(hops),
                  markers=[[int(v) for v in m] for m in markers])
    return np.repeat(image[..., None], 3, 2), label, probe, record


def write_probe(task: str, out: str | Path, num_train: int, num_val: int, seed: int = 0, **params) -> Path:
    """Write ``num_train`` + ``num_val`` images of ``task`` (one of :data:`TASKS`) under ``out``
    with the scene parameters ``params`` (of :func:`lookup_scene`, :func:`pointer_scene` or
    :func:`pathfinder_scene`);
    rewrites the folder if the parameters differ from those in its ``probe.json``."""
    if task not in TASKS:
        raise ValueError(f'task={task!r} is not one of {TASKS}')
    if num_train < 1 or num_val < 1:
        raise ValueError(f'num_train={num_train}, num_val={num_val} must both be >= 1')
    root = Path(out)
    spec = dict(task=task, num_train=num_train, num_val=num_val, seed=seed, params=params)
    marker = root / 'probe.json'
    if marker.is_file():
        if json.loads(marker.read_text()) == json.loads(json.dumps(spec)):
            return root
        shutil.rmtree(root)  # a folder this function wrote (it holds probe.json), other parameters
    elif root.exists() and any(root.iterdir()):
        raise FileExistsError(f'{root} is not empty and holds no probe.json: not overwriting it')
    for split, count in (('train', num_train), ('val', num_val)):
        meta = {}
        for i in range(count):
            rng = rng_for(seed, task, split, i)
            name = f'{i:06d}'
            if task == 'lookup':
                image, label, probe, _ = lookup_scene(rng, **params)
            elif task == 'pointer':
                image, label, probe, _ = pointer_scene(rng, **params)
            else:
                image, label, probe, record = pathfinder_scene(rng, **params)
            if task == 'pathfinder_cls':
                folder = PATHFINDER_CLS_CLASSES[0 if record['connected'] else 1]
                path = root / split / folder / f'{name}.png'
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(image).save(path)
                meta[f'{folder}/{name}.png'] = dict(distance=record['distance'], hops=record['hops'])
                continue
            for sub, array in (('img_dir', image), ('ann_dir', label)):
                (root / sub / split).mkdir(parents=True, exist_ok=True)
                Image.fromarray(array).save(root / sub / split / f'{name}.png')
            (root / 'probe' / split).mkdir(parents=True, exist_ok=True)
            np.save(root / 'probe' / split / f'{name}.npy', probe)
        if task == 'pathfinder_cls':
            (root / 'meta').mkdir(parents=True, exist_ok=True)
            (root / 'meta' / f'{split}.json').write_text(json.dumps(meta, indent=0))
    marker.write_text(json.dumps(spec))
    return root
