"""The pointer probe (a lookup whose hops one attention cannot short-cut): labels against the chain
followed in the pixels, its side-car, determinism, errors, and a 2-iteration train through tools/train.py."""
from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from projects.lisa.long_range.tasks import (
    CUE_RING,
    HOP_MARKS,
    IGNORE,
    QUERY_FILL,
    SYMBOLS,
    lookup_scene,
    pathfinder_scene,
    pointer_scene,
    rng_for,
    write_probe,
)

ROOT = Path(__file__).resolve().parents[1]


def read_pointer(image: np.ndarray, cell: int) -> tuple[tuple[int, int, int], dict[int, int], list]:
    """The cells of a noise-free pointer image, from its pixels alone: the cue ``(y, x, centre)``, the
    relays ``{name: target}`` (asserting that the names are distinct) and the query cells ``(y, x, k)``
    with ``k`` the hop count their centre shows (:data:`HOP_MARKS`; a solid cell shows 1)."""
    grid = image.shape[0] // cell
    symbol = {tuple(c): i for i, c in enumerate(SYMBOLS.astype(int))}
    cue, relays, queries = None, {}, []
    for y in range(grid):
        for x in range(grid):
            patch = image[y * cell:(y + 1) * cell, x * cell:(x + 1) * cell]
            ring, centre = tuple(patch[0, 0]), tuple(patch[cell // 2, cell // 2])
            if ring == QUERY_FILL:
                queries.append((y, x, HOP_MARKS.index(centre) + 1))
            elif ring == CUE_RING:
                assert cue is None, 'two cues'
                cue = (y, x, symbol[centre])
            elif ring in symbol:
                assert symbol[ring] not in relays, f'two relays named {symbol[ring]}'
                relays[symbol[ring]] = symbol[centre]
    return cue, relays, queries


def decode_pointer(image: np.ndarray, cell: int, hops: int | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """Solve a noise-free pointer image: from the cue's centre follow the relays ``k - 1`` times for a
    query asking ``k`` hops (``hops``, or the hop count its centre shows where ``hops`` is None); return
    the labels, the distance map (px to the cue), the hop map and the chain's symbols."""
    (cy, cx, pointer), relays, queries = read_pointer(image, cell)
    longest = max(k for _, _, k in queries) if hops is None else hops
    chain = [pointer]
    for _ in range(longest - 1):
        chain.append(relays[chain[-1]])
    label = np.full(image.shape[:2], IGNORE, np.uint8)
    distance, hop_map = np.zeros(image.shape[:2]), np.zeros(image.shape[:2], int)
    for y, x, k in queries:
        k = k if hops is None else hops
        box = slice(y * cell, (y + 1) * cell), slice(x * cell, (x + 1) * cell)
        label[box], hop_map[box] = chain[k - 1], k
        distance[box] = cell * math.hypot(y - cy, x - cx)
    return label, distance, hop_map, chain


@pytest.mark.parametrize('hops, symbols, relays, cell', [
    (1, 10, None, 4), (2, 10, None, 4), (3, 10, None, 4), (2, 12, 6, 4), (5, 8, 8, 4), (2, 3, 2, 8),
    (10, 10, None, 4)])
def test_pointer_labels_match_following_the_chain_in_the_image(hops, symbols, relays, cell):
    for i in range(6):
        image, label, probe, h = pointer_scene(rng_for(3, 'pointer', 'train', i), size=16 * cell, cell=cell,
                                               hops=hops, symbols=symbols, relays=relays, noise=0)
        want_label, want_distance, _, chain = decode_pointer(image, cell, hops)
        np.testing.assert_array_equal(label, want_label)
        shown = label != IGNORE
        assert shown.sum() == 16 * cell * cell  # 16 query cells
        np.testing.assert_array_equal(probe[0][shown], np.round(want_distance[shown]))
        assert h == hops and (probe[1][shown] == h).all() and (probe[:, ~shown] == 0).all()
        assert len(set(chain)) == hops  # the chain never revisits a symbol: for h >= 2 the answer is not c_0
        _, relay_map, _ = read_pointer(image, cell)
        assert len(relay_map) == (relays or symbols)
        targets = list(relay_map.values())
        assert len(set(targets)) == len(targets)  # distinct targets
        assert all(n != t for n, t in relay_map.items())  # nobody points at itself
        assert max(*relay_map, *targets) < symbols
        if relays is None:  # every symbol names one relay and is one's target: the bag is always the same
            assert sorted(relay_map) == sorted(targets) == list(range(symbols))


@pytest.mark.parametrize('hops, queries', [((1, 2), 16), ((1, 3), 16), ((2, 3), 5), ((1, 2), 2)])
def test_pointer_queries_of_several_hop_counts_show_theirs_and_follow_the_chain_that_far(hops, queries):
    for i in range(6):
        image, label, probe, h = pointer_scene(rng_for(4, 'pointer', 'train', i), hops=hops, queries=queries,
                                               noise=0)
        want_label, want_distance, want_hops, chain = decode_pointer(image, 4, None)
        np.testing.assert_array_equal(label, want_label)
        shown = label != IGNORE
        np.testing.assert_array_equal(probe[0][shown], np.round(want_distance[shown]))
        np.testing.assert_array_equal(probe[1], want_hops)
        assert h == hops[1] and len(set(chain)) == len(chain)
        counts = np.bincount(probe[1][shown], minlength=hops[1] + 1)[hops[0]:] // 16  # 16 px per query
        assert counts.max() - counts.min() <= 1 and counts.sum() == queries  # dealt evenly


def test_pointer_answers_are_uniform_and_never_the_cue_at_two_hops():
    """Over many images each symbol is the answer about as often (the bag of relays is constant at
    R = A: the first test), and reading the cue's centre (the answer at h = 1) is never right at h = 2."""
    counts, cue_right = np.zeros(10), 0
    for i in range(500):
        image, label, _, _ = pointer_scene(rng_for(0, 'pointer', 'val', i), hops=2, noise=0)
        answer = int(label[label != IGNORE][0])
        counts[answer] += 1
        (_, _, c0), _, _ = read_pointer(image, 4)
        cue_right += c0 == answer
    assert cue_right == 0
    assert counts.min() > 25 and counts.max() < 75  # 50 expected, sd ~6.7


def test_pointer_distance_knob_bounds_the_cue_distance():
    for i in range(5):
        _, label, probe, _ = pointer_scene(rng_for(0, 'pointer', 'val', i), distance=(8, 11))
        d = probe[0][label != IGNORE] / 4  # cells; the px are rounded: +- 0.5 px = 0.125 cell
        assert 8 - 0.125 <= d.min() and d.max() <= 11 + 0.125


def test_pointer_is_deterministic_by_seed_and_write_probe_stores_it(tmp_path):
    a = pointer_scene(rng_for(0, 'pointer', 'train', 7), hops=3)
    b = pointer_scene(rng_for(0, 'pointer', 'train', 7), hops=3)
    c = pointer_scene(rng_for(1, 'pointer', 'train', 7), hops=3)
    for x, y in zip(a[:3], b[:3]):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    root = write_probe('pointer', tmp_path / 'pointer', 3, 2, seed=5, hops=2, symbols=8)
    for split, count in (('train', 3), ('val', 2)):
        for i in range(count):
            want = pointer_scene(rng_for(5, 'pointer', split, i), hops=2, symbols=8)
            name = f'{i:06d}'
            np.testing.assert_array_equal(np.asarray(Image.open(root / 'img_dir' / split / f'{name}.png')), want[0])
            np.testing.assert_array_equal(np.asarray(Image.open(root / 'ann_dir' / split / f'{name}.png')), want[1])
            np.testing.assert_array_equal(np.load(root / 'probe' / split / f'{name}.npy'), want[2])
    assert json.loads((root / 'probe.json').read_text())['params'] == dict(hops=2, symbols=8)


@pytest.mark.parametrize('kwargs, message', [
    (dict(hops=(1, 4)), r'hops=\(1, 4\): a query cell shows at most 3 hop counts'),
    (dict(hops=(1, 3), queries=2), r'queries=2: fewer than the 3 hop counts of hops=\(1, 3\)'),
    (dict(hops=0), r'hops=\(0, 0\)'),
    (dict(symbols=13), 'symbols=13 must be in'),
    (dict(symbols=8, relays=9), r'relays=9 must be in \[2, symbols=8\]'),
    (dict(hops=4, relays=2), 'hops=4 needs 4 distinct symbols and 3 relays'),
    (dict(hops=4, symbols=3), 'hops=4 needs 4 distinct symbols'),
    (dict(queries=0), 'queries=0'),
    (dict(queries=300), 'queries=300, relays=10'),
    (dict(distance=(30, 40)), r'distance=\(30, 40\): only 0 free cells'),
    (dict(size=62), 'size=62, cell=4')])
def test_pointer_rejects_bad_values_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pointer_scene(rng_for(0, 'x', 'train', 0), **kwargs)


def test_the_lookup_and_pathfinder_outputs_are_unchanged():
    """Fixed digests of the lookup and Pathfinder generators' outputs: the pointer probe shares their drawing code."""
    def digest(arrays) -> str:
        return hashlib.sha256(b''.join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()[:16]
    for kwargs, want in ((dict(), '6a7fb7ba18df1964'), (dict(hops=(1, 4), relays=3), '6fc7154f298f7fc1'),
                         (dict(size=64, hops=(2, 2)), '32da1e0c95183bd1')):
        assert digest(lookup_scene(rng_for(0, 'lookup', 'train', 5), **kwargs)[:3]) == want
    assert digest(pathfinder_scene(rng_for(0, 'pathfinder_seg', 'train', 5), size=64)[:3]) == 'f8811272198628c6'


@pytest.mark.slow
def test_two_iteration_train_through_tools_train(tmp_path):
    """The pointer configs build and feed end to end: A-way labels, the registered metric reading the side-cars."""
    root = write_probe('pointer', tmp_path / 'pointer', 4, 4, hops=2)
    out = tmp_path / 'counts.json'
    options = [f'train_dataloader.dataset.data_root={root}', f'val_dataloader.dataset.data_root={root}',
               'train_cfg.max_iters=2', 'train_cfg.val_interval=2', 'train_dataloader.batch_size=2',
               f'val_evaluator.out_file={out}']
    done = subprocess.run([sys.executable, 'tools/train.py', 'configs/long_range/pointer_vit-1l_lisa_64px.py',
                           '--work-dir', str(tmp_path / 'run'), '--cfg-options', *options],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert {r['hops'] for r in rows} == {2}
    assert sum(r['total'] for r in rows) == 4 * 16 * 16  # 4 val images, 16 query cells of 16 px
