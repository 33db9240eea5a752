"""The long-range probes: labels against independent decodings, determinism, formats, metric, tool."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from projects.lisa.synthetic.long_range import (
    CUE_RING,
    IGNORE,
    PALETTE,
    lookup_scene,
    pathfinder_scene,
    rng_for,
    write_probe,
)
from tools import long_range as tool

ROOT = Path(__file__).resolve().parents[1]


def cue_colour(image: np.ndarray) -> int:
    """Index of the cue's centre colour (the white-ringed cell)."""
    ys, xs = np.nonzero((image == CUE_RING).all(-1))
    centre = image[ys.min() + 2, xs.min() + 2]
    return int(np.flatnonzero((PALETTE == centre).all(1))[0])


def decode_lookup(image: np.ndarray, cell: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Solve a noise-free lookup image from its pixels alone: follow the cue's pointer through the
    relays to the answer colour; return the labels, the distance map and the hop count."""
    grid = image.shape[0] // cell
    colour = {tuple(c): i for i, c in enumerate(PALETTE.astype(int))}
    relays, shapes, cue = {}, [], None
    for y in range(grid):
        for x in range(grid):
            patch = image[y * cell:(y + 1) * cell, x * cell:(x + 1) * cell].reshape(-1, 3)
            ring, centre = tuple(patch[0]), tuple(image[y * cell + cell // 2, x * cell + cell // 2])
            if ring == CUE_RING:
                cue = (y, x, colour[centre])
            elif ring in colour and centre != ring:
                relays[colour[ring]] = colour[centre]
            elif ring in colour:
                shapes.append((y, x, colour[ring]))
    pointer, hops = cue[2], 1
    while pointer in relays:
        pointer, hops = relays[pointer], hops + 1
    label = np.full(image.shape[:2], IGNORE, np.uint8)
    distance = np.zeros(image.shape[:2])
    for y, x, _ in shapes:
        label[y * cell:(y + 1) * cell, x * cell:(x + 1) * cell] = pointer
        distance[y * cell:(y + 1) * cell, x * cell:(x + 1) * cell] = cell * math.hypot(y - cue[0], x - cue[1])
    return label, distance, hops


@pytest.mark.parametrize('hops', [(1, 1), (2, 2), (4, 4), (1, 4)])
def test_lookup_labels_match_following_the_pointers_in_the_image(hops):
    for i in range(5):
        image, label, probe, h = lookup_scene(rng_for(3, 'lookup', 'train', i), hops=hops, relays=3, noise=0)
        want_label, want_distance, want_hops = decode_lookup(image, 4)
        np.testing.assert_array_equal(label, want_label)
        assert h == want_hops and hops[0] <= h <= hops[1]
        shown = label != IGNORE
        np.testing.assert_array_equal(probe[0][shown], np.round(want_distance[shown]))
        assert (probe[1][shown] == h).all()
        assert h > 1 or (label[shown] == cue_colour(image)).all()  # one hop: the cue holds the answer
        red = (image[shown] == PALETTE[0]).all(-1)
        assert red.mean() == 0.5  # half the shapes red, half green, whatever the answer


def test_lookup_distance_knob_bounds_the_cue_distance():
    for i in range(5):
        _, label, probe, _ = lookup_scene(rng_for(0, 'lookup', 'val', i), distance=(10, 14))
        d = probe[0][label != IGNORE] / 4  # cells; the px are rounded: +- 0.5 px = 0.125 cell
        assert 10 - 0.125 <= d.min() and d.max() <= 14 + 0.125


def test_lookup_rejects_bad_values_by_name():
    with pytest.raises(ValueError, match='hops=.*relays=1'):
        lookup_scene(rng_for(0, 'x', 'train', 0), hops=(1, 3), relays=1)
    with pytest.raises(ValueError, match='shapes=3'):
        lookup_scene(rng_for(0, 'x', 'train', 0), shapes=3)
    with pytest.raises(ValueError, match='distance=.*free cells'):
        lookup_scene(rng_for(0, 'x', 'train', 0), distance=(40, 50))
    with pytest.raises(ValueError, match='size=300'):
        pathfinder_scene(rng_for(0, 'x', 'train', 0), size=300)
    with pytest.raises(ValueError, match="task='maze'"):
        write_probe('maze', 'unused', 1, 1)


def geodesic(mask: np.ndarray, start: tuple[int, int]) -> np.ndarray:
    """Breadth-first 8-connected path length from ``start`` within ``mask`` (-1 where unreached)."""
    dist = np.full(mask.shape, -1)
    dist[start] = 0
    queue = deque([start])
    while queue:
        y, x = queue.popleft()
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                q = (y + dy, x + dx)
                if 0 <= q[0] < mask.shape[0] and 0 <= q[1] < mask.shape[1] and mask[q] and dist[q] < 0:
                    dist[q] = dist[y, x] + 1
                    queue.append(q)
    return dist


@pytest.mark.parametrize('size', [32, 96, 256])
def test_pathfinder_labels_match_a_flood_fill_of_the_solid_curves(size):
    for i in range(3):
        kwargs = dict(size=size, distractors=2)
        _, solid, solid_probe, record = pathfinder_scene(rng_for(1, 'pf', 'train', i), gap=0, **kwargs)
        _, dashed, probe, dashed_record = pathfinder_scene(rng_for(1, 'pf', 'train', i), gap=2, **kwargs)
        assert record == {**dashed_record, 'hops': record['hops']}  # same curves, same markers
        components, _ = ndimage.label(solid != IGNORE, structure=np.ones((3, 3)))
        marker, other = (tuple(m) for m in record['markers'])
        np.testing.assert_array_equal(solid == 1, components == components[marker])
        np.testing.assert_array_equal(dashed == 1, (components == components[marker]) & (dashed != IGNORE))
        assert record['connected'] == (components[marker] == components[other])
        # distance along the curve: the breadth-first path length from the marker
        arc = geodesic(solid == 1, marker)
        np.testing.assert_array_equal(solid_probe[0][solid == 1], arc[solid == 1])
        on = dashed == 1
        np.testing.assert_array_equal(probe[0][on], arc[on])
        assert (np.diff(np.sort(np.unique(probe[1][on]))) == 1).all() and probe[1][on].min() == 0


def test_generators_are_deterministic_by_seed():
    a = lookup_scene(rng_for(0, 'lookup', 'train', 7), hops=(1, 3))
    b = lookup_scene(rng_for(0, 'lookup', 'train', 7), hops=(1, 3))
    c = lookup_scene(rng_for(1, 'lookup', 'train', 7), hops=(1, 3))
    for x, y in zip(a[:3], b[:3]):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    p, q = pathfinder_scene(rng_for(0, 'pf', 'val', 2)), pathfinder_scene(rng_for(0, 'pf', 'val', 2))
    np.testing.assert_array_equal(p[0], q[0])
    assert p[3] == q[3]


def test_write_probe_formats(tmp_path):
    root = write_probe('lookup', tmp_path / 'lookup', 3, 2, seed=0, hops=(1, 2))
    image = np.asarray(Image.open(root / 'img_dir' / 'val' / '000001.png'))
    label = np.asarray(Image.open(root / 'ann_dir' / 'val' / '000001.png'))
    probe = np.load(root / 'probe' / 'val' / '000001.npy')
    want = lookup_scene(rng_for(0, 'lookup', 'val', 1), hops=(1, 2))
    np.testing.assert_array_equal(image, want[0])
    np.testing.assert_array_equal(label, want[1])
    np.testing.assert_array_equal(probe, want[2])
    cls = write_probe('pathfinder_cls', tmp_path / 'cls', 6, 2, size=32)
    meta = json.loads((cls / 'meta' / 'train.json').read_text())
    assert sorted(meta) == sorted(str(p.relative_to(cls / 'train')) for p in (cls / 'train').glob('*/*.png'))
    for name, entry in meta.items():
        record = pathfinder_scene(rng_for(0, 'pathfinder_cls', 'train', int(Path(name).stem)), size=32)[3]
        assert name.startswith('connected/' if record['connected'] else 'disconnected/')
        assert entry == dict(distance=record['distance'], hops=record['hops'])
    with pytest.raises(FileExistsError, match='no probe.json'):
        write_probe('lookup', tmp_path / 'cls' / 'train', 1, 1)


def test_metric_bins_by_distance_and_hops():
    from projects.lisa.synthetic.long_range_metric import binned_counts
    label = np.array([[0, 1, 255], [1, 0, 1]])
    pred = np.array([[0, 0, 1], [1, 1, 1]])
    probe = np.array([[[5, 20, 0], [40, 15, 300]], [[1, 1, 1], [2, 2, 2]]])
    # pixels: (h1, d5, right), (h1, d20, wrong), ignored, (h2, d40, right), (h2, d15, wrong), (h2, d300 out)
    got = binned_counts(pred, label, probe, edges=(0, 16, 32, 64))
    assert got == {(1, 0): (1, 1), (1, 1): (0, 1), (2, 2): (1, 1), (2, 0): (0, 1)}


def rows_of(acc: dict, seconds: float = 10.0) -> list[dict]:
    """Rows of the tool: ``acc[(attention, seed, hops, lo)] = correct of 100`` pixels."""
    return [dict(attention=a, difficulty='d', seed=s, hops=h, lo=lo, hi=lo + 32, correct=c, total=100,
                 iters=2000, seconds=seconds, s_per_iter=0.1) for (a, s, h, lo), c in acc.items()]


def test_tool_markdown_from_stored_rows(tmp_path):
    acc = {}
    for s, (near, far) in enumerate([(98, 92), (96, 94), (97, 96)]):
        acc.update({('softmax', s, 1, 0): near, ('softmax', s, 1, 64): far})
    for s, far in enumerate([50, 52, 54]):
        acc.update({('lisa-local', s, 1, 0): 97, ('lisa-local', s, 1, 64): far})
    text = tool.markdown(rows_of(acc))
    # softmax far bin: 92, 94, 96 -> 94 ± 2; all distances per seed 95, 95, 96.5 -> 95.5 ± sqrt(0.75)
    assert '| softmax (global) | 97.0 ± 1.0 | 94.0 ± 2.0 | 95.5 ± 0.9 |' in text
    assert '| LiSA local-only | 97.0 ± 0.0 | 52.0 ± 2.0 | 74.5 ± 1.0 |' in text
    assert 'softmax, hop 1, distance >= 48 px: 94.0 % (passes' in text
    assert 'LiSA local-only, hop 1: far 52.0 %' in text and 'vs softmax 97.0 % (passes' in text
    acc[('lisa-local', 0, 1, 64)] = 90
    failing = tool.markdown(rows_of(acc))  # far (90 + 52 + 54) / 3 = 65.3 > chance + 10
    assert 'LiSA local-only, hop 1: far 65.3 %' in failing and 'FAILS' in failing
    stored = tmp_path / 'rows.json'
    stored.write_text(json.dumps(rows_of(acc)))
    tool.main(['--from-rows', str(stored), '--markdown', str(tmp_path / 'lr.md')])
    assert (tmp_path / 'lr.png').stat().st_size > 0
    assert (tmp_path / 'lr.md').read_text().startswith(tool.markdown(rows_of(acc)))
    assert '1x1 head, 2000 iterations)' in text


def test_window_control_compares_the_nearest_bin_with_the_window_border_ceiling():
    # 16 tokens, windows of 7 from the top left: of the 15 neighbour pairs along a row, (6, 7) and
    # (13, 14) straddle a border; there the model is at chance: 13/15 + 2/15 * 1/2 = 93.3 %
    assert tool.window_ceiling() == pytest.approx(100 * (13 / 15 + 1 / 15))
    acc = {('softmax', 0, 1, 0): 100, ('softmax', 0, 1, 64): 100, ('window', 0, 1, 0): 93, ('window', 0, 1, 64): 50}
    text = '\n'.join(tool.controls(rows_of(acc)))
    assert 'window 7x7 (Swin), hop 1: far 50.0 %' in text
    assert 'nearest bin 0-32 px 93.0 % vs its ceiling (window borders) 93.3 % (passes' in text
    acc[('window', 0, 1, 0)] = 80
    assert 'FAILS' in '\n'.join(tool.controls(rows_of(acc)))


def test_document_merges_the_rows_of_several_sweeps(tmp_path):
    first, second = tmp_path / 'a.json', tmp_path / 'b.json'
    first.write_text(json.dumps(rows_of({('softmax', 0, 1, 0): 90})))
    later = rows_of({('lisa-t1', 0, 1, 0): 70})
    for r in later:
        r['iters'] = 1000
    second.write_text(json.dumps(later))
    tool.main(['--from-rows', str(first), str(second), '--markdown', str(tmp_path / 'lr.md')])
    text = (tmp_path / 'lr.md').read_text()
    assert '| softmax (global) | 90.0 | 90.0 |' in text and '| LiSA T=1 | 70.0 | 70.0 |' in text
    assert '1000-2000 iterations' in text and '| LiSA T=1 | 1000 |' in text


def test_sweep_runs_every_attention_difficulty_and_seed_jobs_at_a_time(tmp_path, monkeypatch):
    """The sweep's grid, its concurrency and the document's note, with the training replaced by a
    recorder (the real run_one is the 2-iteration test below)."""
    import threading
    import time
    live, peak, calls = [0], [0], []
    lock = threading.Lock()

    def fake_run(attention, difficulty, data_root, seed, work_dir, threads, max_iters):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
            calls.append((attention, difficulty, seed))
        time.sleep(0.05)
        with lock:
            live[0] -= 1
        return rows_of({(attention, seed, int(difficulty[-1]), 0): 50})

    monkeypatch.setattr(tool, 'run_one', fake_run)
    monkeypatch.setitem(tool.SETTINGS, 'quick', {**tool.SETTINGS['quick'], 'num_train': 2, 'num_val': 1})
    tool.main(['--attentions', 'softmax', 'lisa', '--seeds', '0', '1', '--jobs', '2', '--data-root',
               str(tmp_path / 'data'), '--work-dir', str(tmp_path / 'wd'), '--markdown', str(tmp_path / 'lr.md')])
    assert sorted(calls) == sorted((a, d, s) for a in ('softmax', 'lisa') for d in ('hops1', 'hops2') for s in (0, 1))
    assert peak[0] == 2
    assert len(json.loads((tmp_path / 'wd' / 'rows.json').read_text())) == 8
    assert 'Sweep: 8 runs, 2 at a time, 1 thread(s) each' in (tmp_path / 'lr.md').read_text()
    for split in ('train', 'val'):  # each difficulty's data: fixed hop count
        for h in (1, 2):
            probe = np.load(tmp_path / 'data' / f'lookup_hops{h}' / 'probe' / split / '000000.npy')
            assert set(np.unique(probe[1])) == {0, h}
    calls.clear()
    tool.main(['--attentions', 'lisa-t1', '--difficulties', 'hops2', '--seeds', '0', '--data-root',
               str(tmp_path / 'data2'), '--work-dir', str(tmp_path / 'wd2'), '--markdown', str(tmp_path / 'lr2.md')])
    assert calls == [('lisa-t1', 'hops2', 0)] and not (tmp_path / 'data2' / 'lookup_hops1').exists()


@pytest.mark.parametrize('argv, message', [
    (['--jobs', '0'], '--jobs 0'),
    (['--difficulties', 'hops1', 'hops3'], '--difficulties hops3: the quick setting has hops1 hops2'),
    (['--from-rows', 'missing.json'], '--from-rows missing.json: no such file')])
def test_sweep_arguments_are_checked(argv, message, capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize('task, config', [
    ('lookup', 'configs/long_range/lookup_vit-1l_lisa_64px.py'),
    ('pathfinder_cls', 'configs/long_range/pathfinder-cls_vit-1l_lisa_64px.py')])
def test_two_iteration_train_through_tools_train(tmp_path, task, config):
    """Only an end-to-end run catches a config that mmseg / mmpretrain cannot build or feed
    (dataset formats, the registered metric reading the side-cars, the evaluator's output)."""
    params = dict(hops=(1, 2)) if task == 'lookup' else dict(size=64)
    root = write_probe(task, tmp_path / task, 4, 4, **params)
    out = tmp_path / 'counts.json'
    options = [f'train_dataloader.dataset.data_root={root}', f'val_dataloader.dataset.data_root={root}',
               'train_cfg.max_iters=2', 'train_cfg.val_interval=2', 'train_dataloader.batch_size=2']
    if task == 'lookup':
        options.append(f'val_evaluator.out_file={out}')
    done = subprocess.run([sys.executable, 'tools/train.py', config, '--work-dir', str(tmp_path / 'run'),
                           '--cfg-options', *options], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if task == 'lookup':
        rows = json.loads(out.read_text())
        labelled = sum(int((np.asarray(Image.open(p)) != IGNORE).sum())
                       for p in (root / 'ann_dir' / 'val').glob('*.png'))
        assert sum(r['total'] for r in rows) == labelled
    else:
        assert 'accuracy/top1' in done.stdout + done.stderr


def test_visualize_walk_queries_the_farthest_shape_of_a_probe_image(tmp_path):
    from tools.visualize_walk import main, probe_image
    image, (x, y) = probe_image('lookup', 96, seed=0)
    want_image, label, probe, _ = lookup_scene(rng_for(0, 'lookup', 'val', 0), size=96, hops=(2, 2))
    np.testing.assert_array_equal(image, want_image)
    shown = label != IGNORE
    assert shown[int(y), int(x)] and probe[0][int(y), int(x)] == probe[0][shown].max()
    out = tmp_path / 'walk.png'
    main([str(ROOT / 'configs/long_range/lookup_vit-1l_lisa_64px.py'), '--probe', 'lookup', '--out', str(out)])
    assert out.stat().st_size > 0
