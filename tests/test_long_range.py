"""The long-range probes: labels against independent decodings, determinism, formats, metric, tool."""
from __future__ import annotations

import dataclasses
import json
import math
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from projects.lisa.long_range import report, sweep
from projects.lisa.long_range.tasks import (
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
    from projects.lisa.long_range.metric import binned_counts
    label = np.array([[0, 1, 255], [1, 0, 1]])
    pred = np.array([[0, 0, 1], [1, 1, 1]])
    probe = np.array([[[5, 20, 0], [40, 15, 300]], [[1, 1, 1], [2, 2, 2]]])
    # pixels (label, hops, distance): (0, h1, d5, right), (1, h1, d20, wrong), ignored, (1, h2, d40, right),
    # (0, h2, d15, wrong), (1, h2, d300 out)
    got = binned_counts(pred, label, probe, edges=(0, 16, 32, 64))
    assert got == {(0, 1, 0): (1, 1), (1, 1, 1): (0, 1), (1, 2, 2): (1, 1), (0, 2, 0): (0, 1)}


def rows(attention: str, accuracies: dict[int, tuple[int, int]], *, task: str = 'lookup-hops2', layers: int = 1,
         iters: int = 2000, phase: str = 'test', lr: float = 2e-3, hops: int = 2) -> list[dict]:
    """Rows of the tool: ``accuracies[run] = (near, far)`` pixels right of 100 in each bin."""
    return [dict(task=task, phase=phase, attention=attention, layers=layers, lr=lr, run=run, iters=iters, hops=hops,
                 lo=lo, hi=hi, correct=c, total=100, seconds=10.0, s_per_iter=0.1, params=1000)
            for run, pair in accuracies.items() for (lo, hi), c in zip(((0, 6), (48, 100)), pair)]


def test_report_gives_each_variant_its_interval_and_solved_share_and_pairs_by_run():
    soft = rows('softmax', {0: (90, 90), 1: (80, 80), 2: (100, 100)})
    lisa = rows('lisa', {0: (100, 100), 1: (96, 96), 2: (100, 100), 3: (100, 100)})
    text = '\n'.join(report.task_section('lookup-hops2', soft + lisa, chance=50.0))
    # softmax runs 90, 80, 100: mean 90, s = 10, half width 4.303 * 10 / sqrt(3) = 24.84
    assert '| softmax | 1.0 k | 0.002 | 2000 | 3 | 90.0 [65.2, 114.8] | 1/3 | 90.0 [65.2, 114.8] | 0.100 |' in text
    assert '| LiSA T=3 | 1.0 k | 0.002 | 2000 | 4 |' in text and '| 4/4 |' in text
    # paired over runs 0-2 only: differences 10, 16, 0 -> 8.7, s = 8.08, half width 20.08
    assert '| LiSA T=3 − softmax | +8.7 [-11.4, +28.7] | 3 | no difference found |' in text


def test_findings_state_only_the_differences_whose_interval_excludes_zero():
    lisa = rows('lisa', {r: (a, a) for r, a in enumerate([100, 100, 100, 99])})
    flat = rows('flatten', {r: (a, a) for r, a in enumerate([90, 92, 91, 90])})
    soft = rows('softmax', {r: (a, a) for r, a in enumerate([100, 80, 99, 90])})
    lines = report.findings({'lookup-hops2': lisa + flat + soft})
    assert lines[0] == ('- lookup-hops2: LiSA T=3 ahead of FLatten: LiSA T=3 − FLatten = +9.0 [+7.7, +10.3] points '
                        '(4 paired runs)')
    assert len(lines) == 2 and 'No difference found in 1 other' in lines[1] and 'LiSA T=3 and softmax' in lines[1]
    assert report.findings({'t': soft}) == ['- No comparison separates two attentions.']
    table = '\n'.join(report.task_section('lookup-hops2', lisa + flat, 50.0))
    assert '| LiSA T=3 − FLatten | **+9.0 [+7.7, +10.3]** | 4 | differ |' in table


def test_the_replication_draws_are_compared_again_alone():
    # draws 1000-1001: LiSA far behind softmax; draws 1008-1010, the replication: LiSA 100, 96, 98 against
    # softmax 90, 90, 89 -> differences 10, 6, 9: mean 8.33, s = 2.08, half width 4.303 * 2.08 / sqrt(3) = 5.17
    lisa = rows('lisa', {1000: (50, 50), 1001: (52, 52), 1008: (100, 100), 1009: (96, 96), 1010: (98, 98)})
    soft = rows('softmax', {1000: (90, 90), 1001: (90, 90), 1008: (90, 90), 1009: (90, 90), 1010: (89, 89)})
    text = '\n'.join(report.task_section('lookup-hops2', lisa + soft, 50.0))
    assert 'The same differences on draws 1008-1010 alone: the replication, trained after the results on draws ' \
           '1000-1001 were read.' in text
    assert '| LiSA T=3 − softmax | **+8.3 [+3.2, +13.5]** | 3 | differ |' in text
    assert ('- lookup-hops2, draws 1008-1010 alone: LiSA T=3 ahead of softmax: LiSA T=3 − softmax = +8.3 [+3.2, '
            '+13.5] points (3 paired runs)') in report.findings({'lookup-hops2': lisa + soft})
    # no replication where the runs lie on one side of it (nor for a variant that has no replication draws)
    first = [r for r in lisa + soft if r['run'] < report.REPLICATION_FIRST]
    assert report.replication(first) == [] and 'The same differences' not in '\n'.join(
        report.task_section('lookup-hops2', first, 50.0))
    assert report.replication([r for r in lisa + soft if r['run'] >= report.REPLICATION_FIRST]) == []
    flat = rows('flatten', {1000: (70, 70), 1001: (71, 71)})
    assert [c.second.attention for c in report.replication(lisa + soft + flat)] == ['softmax']


def test_budgets_and_depths_are_compared_within_a_variant():
    short = rows('softmax', {0: (80, 80), 1: (82, 82), 2: (81, 81)})
    longer = rows('softmax', {0: (99, 99), 1: (100, 100), 2: (98, 98)}, iters=4000)
    deep = rows('softmax', {0: (90, 90), 1: (91, 91), 2: (92, 92)}, layers=2)
    found = {(c.first, c.second): c.difference for c in report.comparisons(short + longer + deep)}
    two, one = report.Variant('softmax', 2, 2000, 2e-3), report.Variant('softmax', 1, 2000, 2e-3)
    assert found[(two, one)].mean == pytest.approx(10.0)
    assert found[(report.Variant('softmax', 1, 4000, 2e-3), one)].mean == pytest.approx(18.0)
    assert two.label() == 'softmax, 2 layers'


def test_comparisons_name_their_budget_where_a_task_has_several():
    short = rows('lisa', {0: (99, 99), 1: (98, 98)}) + rows('softmax', {0: (80, 80), 1: (90, 90)})
    longer = rows('lisa', {0: (100, 100), 1: (100, 100)}, iters=4000) + rows('softmax', {0: (81, 81), 1: (92, 92)},
                                                                          iters=4000)
    text = '\n'.join(report.task_section('lookup-hops2', short + longer, 50.0))
    assert '| LiSA T=3 − softmax (2000 it) |' in text and '| LiSA T=3 − softmax (4000 it) |' in text
    assert '| softmax − softmax (4000 vs 2000 it) |' in text
    assert any('(4000 it)' in line for line in report.findings({'t': short + longer}))
    # one budget: no budget in the names
    assert '| LiSA T=3 − softmax |' in '\n'.join(report.task_section('lookup-hops2', short, 50.0))


def test_a_finding_between_two_budgets_of_one_variant_names_which_budget_is_ahead():
    # FLatten loses 2, 2 and 3 points at 4000 iterations: mean -2.33, s = 0.577, half width 4.303 * 0.577 / sqrt(3)
    short = rows('flatten', {0: (90, 90), 1: (92, 92), 2: (91, 91)})
    longer = rows('flatten', {0: (88, 88), 1: (90, 90), 2: (88, 88)}, iters=4000)
    assert report.findings({'t': short + longer})[0] == (
        '- t: FLatten at 2000 it ahead of FLatten at 4000 it: FLatten 4000 − 2000 it = -2.3 [-3.8, -0.9] points '
        '(3 paired runs)')


def test_learning_rate_choice_takes_the_best_mean_and_the_smallest_of_equals():
    select = (rows('lisa', {900: (80, 80), 901: (90, 90)}, phase='select', lr=1e-3)
              + rows('lisa', {900: (85, 85), 901: (85, 85)}, phase='select', lr=2e-3)
              + rows('lisa', {900: (95, 95), 901: (70, 70)}, phase='select', lr=4e-3))
    best, means = report.chosen_lr(select)
    assert best == 1e-3 and means[4e-3].mean == 82.5
    text = '\n'.join(report.task_section('lookup-hops2', select + rows('lisa', {0: (90, 90)}, lr=1e-3), 50.0))
    assert '| LiSA T=3 | 0.001: 85.0, 0.002: 85.0, 0.004: 82.5 | 0.001 |' in text


def test_only_the_chosen_lr_is_reported_and_runs_at_two_lrs_are_never_summed():
    select = (rows('softmax', {900: (80, 80), 901: (80, 80)}, phase='select', lr=2e-3)
              + rows('softmax', {900: (90, 90), 901: (90, 90)}, phase='select', lr=4e-3))
    runs = rows('softmax', {0: (70, 70), 1: (72, 72)}, lr=2e-3) + rows('softmax', {0: (96, 96), 1: (98, 98)}, lr=4e-3)
    assert {(r['lr'], r['run']) for r in report.reported(select + runs)} == {(4e-3, 0), (4e-3, 1)}
    text = '\n'.join(report.task_section('lookup-hops2', select + runs, 50.0))
    assert '| softmax | 1.0 k | 0.004 | 2000 | 2 | 97.0 [84.3, 109.7] |' in text and '| 0.002 |' not in text
    # without a choice, each lr is its own row (a run's two lrs are not added up)
    groups = report.variants(report.reported(runs))
    assert [report.per_run(rs) for rs in groups.values()] == [{0: 70.0, 1: 72.0}, {0: 96.0, 1: 98.0}]


def test_local_controls_choose_their_lr_on_the_nearest_bin_the_only_one_they_reach():
    # over all pixels a local-only model is at chance whatever its lr (here 2e-3 is ahead by noise);
    # the nearest bin tells a model that learnt what its reach allows (1e-3) from one that did not
    select = (rows('lisa-local', {900: (98, 50), 901: (96, 52)}, phase='select', lr=1e-3, hops=1)
              + rows('lisa-local', {900: (60, 58), 901: (54, 60)}, phase='select', lr=2e-3, hops=1))
    best, means = report.chosen_lr(select)
    assert best == 1e-3 and means[1e-3].mean == 97.0 and means[2e-3].mean == 57.0
    assert report.chosen_lrs(select) == {('lookup-hops2', 'lisa-local', 1): 1e-3}
    text = '\n'.join(report.task_section('lookup-hops1', select + rows('lisa-local', {0: (97, 50)}, lr=1e-3, hops=1),
                                         50.0, ceiling=93.3))
    assert '| LiSA local-only | 0.001: 97.0, 0.002: 57.0 | 0.001 |' in text and 'nearest bin' in text
    # a global attention still chooses on every pixel
    soft = (rows('softmax', {900: (98, 50)}, phase='select', lr=1e-3, hops=1)
            + rows('softmax', {900: (60, 100)}, phase='select', lr=2e-3, hops=1))
    assert report.chosen_lr(soft)[0] == 2e-3


def test_window_control_compares_the_nearest_bin_with_the_window_border_ceiling():
    # 16 tokens, windows of 7 from the top left: of the 15 neighbour pairs along a row, (6, 7) and
    # (13, 14) straddle a border; there the model is at chance: 13/15 + 2/15 * 1/2 = 93.3 %
    ceiling = report.window_ceiling(16, 7, 50.0)
    assert ceiling == pytest.approx(100 * (13 / 15 + 1 / 15))
    one_hop = rows('softmax', {0: (100, 100)}, hops=1) + rows('window', {0: (93, 50)}, hops=1)
    text = '\n'.join(report.controls(one_hop, 50.0, ceiling))
    assert 'softmax, hop 1, distance >= 48 px: 100.0 % (passes' in text
    assert 'window 7x7 (Swin), hop 1: far 50.0 %' in text
    assert 'nearest bin 0-6 px 93.0 % vs its ceiling (window borders) 93.3 % (passes' in text
    failing = rows('softmax', {0: (100, 100)}, hops=1) + rows('lisa-local', {0: (97, 65)}, hops=1)
    assert 'FAILS' in '\n'.join(report.controls(failing, 50.0, ceiling))


def test_pathfinder_adds_the_infinite_walk_and_compares_it_with_t3_and_one_hop_attention():
    """Connectivity is where the paper claims ``(I - beta S)^-1`` (T = inf) helps: the make setting runs it on
    both Pathfinder tasks only, and the report compares it with LiSA T=3, softmax and FLatten."""
    plan = sweep.plan(sweep.SETTINGS['make'], 'test', runs=1)
    with_tinf = {i['task'] for i in plan if i['attention'] == 'lisa-tinf'}
    assert with_tinf == {'pathfinder-seg', 'pathfinder-cls'}
    assert {(i['attention'], i['layers']) for i in plan if i['task'] == 'pathfinder-seg'} == {
        *sweep.COMPARED, ('lisa-tinf', 1)}
    tinf = rows('lisa-tinf', {0: (99, 99), 1: (97, 97)})
    others = rows('lisa', {0: (90, 90), 1: (92, 92)}) + rows('softmax', {0: (80, 80), 1: (70, 70)})
    titles = {c.title() for c in report.comparisons(tinf + others)}
    assert {'LiSA T=inf − LiSA T=3', 'LiSA T=inf − softmax'} <= titles


def test_run_config_swaps_the_attention_layers_and_lr_of_the_task_config(tmp_path):
    from mmengine.config import Config
    for task, attention, want in (('lookup-hops2', 'lisa-t2', dict(type='lisa', num_steps=2)),
                                  ('pathfinder-cls', 'window', dict(type='window', window_size=7))):
        item = dict(task=task, attention=attention, layers=2, lr=4e-3)
        (tmp_path / task).mkdir()
        cfg = Config.fromfile(sweep.write_config(item, tmp_path / task))
        assert cfg.model.backbone.attn_cfgs.to_dict() == want
        assert cfg.model.backbone.arch.num_layers == 2 and cfg.model.backbone.arch.embed_dims == 64
        assert cfg.optim_wrapper.optimizer.lr == 4e-3


def test_sweep_chooses_the_lr_then_runs_paired_draws_and_resumes(tmp_path, monkeypatch):
    """The sweep's plan, its concurrency, the lr choice and resumption, with the training replaced by
    a recorder (the real run_one is the slow test below)."""
    import threading
    import time
    live, peak, calls = [0], [0], []
    lock = threading.Lock()

    def fake_run(item, data, work_dir, threads):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
            calls.append((item['attention'], item['phase'], item['lr'], item['run'], data))
        time.sleep(0.05)
        with lock:
            live[0] -= 1
        acc = 60 + int(item['lr'] * 5000) if item['attention'] == 'lisa' else 70  # lisa: the larger lr, better
        return rows(item['attention'], {item['run']: (acc, acc)}, phase=item['phase'], lr=item['lr'],
                    iters=item['iters'])

    monkeypatch.setattr(sweep, 'run_one', fake_run)
    monkeypatch.setitem(sweep.SETTINGS, 'quick', dataclasses.replace(sweep.SETTINGS['quick'], max_images=(2, 1)))
    common = ['--setting', 'quick', '--tasks', 'lookup-hops2', '--attentions', 'softmax', 'lisa', '--lrs', '1e-3',
              '4e-3', '--select-runs', '2', '--jobs', '2', '--data-root', str(tmp_path / 'data'), '--work-dir',
              str(tmp_path / 'wd'), '--markdown', str(tmp_path / 'lr.md')]
    tool.main([*common, '--runs', '2'])
    select = sorted(c[:4] for c in calls if c[1] == 'select')
    assert select == sorted((a, 'select', lr, r) for a in ('softmax', 'lisa') for lr in (1e-3, 4e-3)
                            for r in (900, 901))
    test = sorted(c[:4] for c in calls if c[1] == 'test')
    assert test == [('lisa', 'test', 4e-3, 1000), ('lisa', 'test', 4e-3, 1001),
                    ('softmax', 'test', 1e-3, 1000), ('softmax', 'test', 1e-3, 1001)]
    assert peak[0] == 2
    draws = {(c[3], c[4]) for c in calls}  # one draw per run, shared by every attention and lr
    assert draws == {(r, tmp_path / 'data' / 'lookup-hops2' / f'draw{r}') for r in (900, 901, 1000, 1001)}
    probe = np.load(tmp_path / 'data' / 'lookup-hops2' / 'draw1001' / 'probe' / 'train' / '000000.npy')
    want = lookup_scene(rng_for(1001, 'lookup', 'train', 0), size=64, hops=(2, 2))[2]
    np.testing.assert_array_equal(probe, want)
    text = (tmp_path / 'lr.md').read_text()
    assert '| LiSA T=3 − softmax | **+10.0 [+10.0, +10.0]** | 2 | differ |' in text  # 80 vs 70 in both runs
    calls.clear()
    tool.main([*common, '--runs', '3'])  # resumes: only run 1002 is new
    assert sorted(c[:4] for c in calls) == [('lisa', 'test', 4e-3, 1002), ('softmax', 'test', 1e-3, 1002)]
    stored = sweep.read_rows([tmp_path / 'wd' / 'rows.jsonl'])
    assert len(stored) == 2 * (2 * 2 * 2 + 3 * 2)
    tool.main(['--from-rows', str(tmp_path / 'wd' / 'rows.jsonl'), '--markdown', str(tmp_path / 'again.md')])
    assert (tmp_path / 'again.png').stat().st_size > 0 and '## Findings' in (tmp_path / 'again.md').read_text()


@pytest.mark.parametrize('argv, message', [
    (['--jobs', '0'], '--jobs 0: must be >= 1'),
    (['--layers', '1', '0'], '--layers 0: must be >= 1'),
    (['--lrs', '1e-3', '0'], '--lrs 0.001 0.0: learning rates must be > 0'),
    (['--lrs', '1e-3', '2e-3', '--select-runs', '0'], '--select-runs 0: choosing among several --lrs'),
    (['--setting', 'quick', '--tasks', 'pathfinder-cls'], '--tasks pathfinder-cls: the quick setting has'),
    (['--from-rows', 'missing.json'], '--from-rows missing.json: no such file')])
def test_sweep_arguments_are_checked(argv, message, capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize('task, attention', [('lookup-hops2', 'lisa-t2'), ('pathfinder-cls', 'lisa'),
                                             ('pathfinder-cls', 'lisa-tinf')])
def test_short_run_through_tools_train(tmp_path, task, attention):
    """Only an end-to-end run catches a config that mmseg / mmpretrain cannot build or feed
    (dataset formats, the registered metric reading the side-cars, the evaluator's output)."""
    data = sweep.data_for(task, 7, tmp_path / 'data', 4, 4)
    item = dict(task=task, phase='test', attention=attention, layers=2, lr=1e-3, run=7, iters=60)  # > warm-up
    got = sweep.run_one(item, data, tmp_path / 'wd', threads=1)
    assert {(r['task'], r['attention'], r['layers'], r['run'], r['iters']) for r in got} == {
        (task, attention, 2, 7, 60)}
    assert got[0]['params'] > 0 and got[0]['seconds'] > 0
    if task == 'lookup-hops2':
        labelled = sum(int((np.asarray(Image.open(p)) != IGNORE).sum())
                       for p in (data / 'ann_dir' / 'val').glob('*.png'))
        assert sum(r['total'] for r in got) == labelled
    else:
        assert [r['total'] for r in got] == [4]
        assert got[0]['majority'] == max(len(list(d.glob('*.png'))) for d in (data / 'val').iterdir())


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


def test_plan_runs_run_by_run_so_a_stopped_sweep_leaves_whole_paired_sets():
    args = tool.parse_args(['--tasks', 'lookup-hops2', '--attentions', 'lisa', 'softmax', '--layers', '1',
                            '--runs', '3', '--lrs', '2e-3'])
    items = tool.plan(args, 'test', {})
    assert [(i['run'], i['attention']) for i in items] == [
        (r, a) for r in (1000, 1001, 1002) for a in ('lisa', 'softmax')]
    assert {(i['lr'], i['iters'], i['layers']) for i in items} == {(2e-3, 2000, 1)}


def test_run_configs_are_written_safely_from_parallel_runs(tmp_path):
    """Config.fromfile of an 'mmseg::' base is not thread-safe (pkg_resources): threads started at once
    write each run's config, and read it back to count the parameters, under the tool's lock."""
    import threading

    from mmengine.config import Config
    errors, counts, start = [], [], threading.Barrier(12)

    def write(i: int, attention: str) -> None:
        start.wait()  # all at once
        try:
            folder = tmp_path / str(i)
            folder.mkdir()
            config = sweep.write_config(dict(task='lookup-hops2', attention=attention, layers=1, lr=2e-3), folder)
            counts.append(sweep.parameter_count(config))
        except Exception as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(i, a)) for i, a in enumerate(['lisa', 'softmax', 'flatten'] * 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(counts) == 12 and min(counts) > 0
    assert Config.fromfile(tmp_path / '2' / 'config.py').model.backbone.attn_cfgs.type == 'flatten'


def test_a_failed_run_stops_the_sweep_before_the_runs_not_yet_started(tmp_path, monkeypatch):
    started = []

    def fake_run(item, data, work_dir, threads):
        started.append(item['run'])
        raise RuntimeError(f"run {item['run']} failed")

    monkeypatch.setattr(sweep, 'run_one', fake_run)
    monkeypatch.setattr(sweep, 'data_for', lambda task, run, *args: tmp_path / str(run))
    with pytest.raises(RuntimeError, match='failed'):
        tool.main(['--setting', 'quick', '--tasks', 'lookup-hops2', '--attentions', 'lisa', '--runs', '6',
                   '--work-dir', str(tmp_path / 'wd'), '--markdown', str(tmp_path / 'lr.md')])
    assert len(started) == 1


def test_metric_reports_a_hop_and_bin_over_its_label_classes_together():
    from projects.lisa.long_range.metric import LongRangeAccuracy
    metric = LongRangeAccuracy(distance_bins=(0, 16, 64))
    metric.results = [{(0, 1, 0): (3, 4), (1, 1, 0): (1, 4), (1, 2, 1): (2, 2)}]
    got = metric.compute_metrics(metric.results)
    assert got['acc_h1_d0-16'] == 50.0 and got['acc_h1'] == 50.0 and got['acc'] == 60.0


def test_scoring_keeps_the_tasks_hops_and_weighs_balanced_tasks_classes_equally():
    common = dict(phase='test', attention='lisa', layers=1, lr=2e-3, run=0, iters=10, lo=0, hi=8)
    pathfinder = [dict(common, task='pathfinder-seg', label=0, hops=0, correct=90, total=90),  # all 'distractor'
                  dict(common, task='pathfinder-seg', label=1, hops=1, correct=0, total=10)]
    assert report.per_run(pathfinder) == {0: 90.0}  # pixel accuracy: the majority's share
    assert report.per_run(sweep.scored(pathfinder)) == {0: pytest.approx(50.0)}  # (100 + 0) / 2: chance
    pointer = [dict(common, task='pointer', hops=h, correct=c, total=10) for h, c in ((1, 10), (2, 3))]
    assert report.per_run(sweep.scored(pointer)) == {0: 30.0}  # the 2-hop queries only
    with pytest.raises(ValueError, match="row of run 0 has no 'label'"):
        sweep.scored([{k: v for k, v in pathfinder[0].items() if k != 'label'}])


def test_document_leaves_out_a_task_whose_lr_choice_is_under_way(tmp_path):
    """A task with development rows only (its lr choice under way, no test run yet) has no section: an empty
    table would read as a task that was run and gave nothing."""
    done = rows('lisa', {1000: (99, 99), 1001: (98, 98)}) + rows('softmax', {1000: (90, 90), 1001: (80, 80)})
    started = rows('softmax', {900: (100, 100)}, task='lookup-hops1', phase='select', lr=1e-3, hops=1)
    sweep.write_document(done + started, tmp_path / 'doc.md', '')
    text = (tmp_path / 'doc.md').read_text()
    assert '## lookup-hops2' in text and 'lookup-hops1' not in text


def test_pathfinder_scores_the_far_half_of_the_marked_curve_not_distractors_far_from_the_marker(tmp_path):
    """On Pathfinder segmentation every pixel >= 48 px from the marker lies on a distractor (the marked curve is
    32 px long, and a distractor pixel's distance is Euclidean to the marker), so the lookup's far bin would score
    the easy class only. The far column is the marked curve's far half (label 1, >= 16 px along it): the pixels
    that only a model following the path gets right."""
    def run(attention: str, run: int, far_right: int) -> list[dict]:
        common = dict(task='pathfinder-seg', phase='test', attention=attention, layers=1, lr=4e-3, run=run,
                      iters=2000, seconds=1.0, s_per_iter=0.1, params=1000)
        return [dict(common, label=0, hops=0, lo=64, hi=400, correct=10, total=10),  # far distractor: right
                dict(common, label=0, hops=0, lo=0, hi=8, correct=90, total=100),
                dict(common, label=1, hops=0, lo=0, hi=8, correct=90, total=100),
                dict(common, label=1, hops=3, lo=16, hi=32, correct=far_right, total=100)]
    runs = run('lisa', 1000, 20) + run('lisa', 1001, 30) + run('softmax', 1000, 10) + run('softmax', 1001, 10)
    sweep.write_document(runs, tmp_path / 'doc.md', '')
    text = (tmp_path / 'doc.md').read_text()
    assert 'far bin' not in text and '| marked curve >= 16 px along it % |' in text
    # LiSA's far-half runs 20 %, 30 %: mean 25, s = 7.07, half width 12.706 * 7.07 / sqrt(2) = 63.5
    assert '| 0/2 | 25.0 [-38.5, 88.5] | 0.100 |' in text


def test_classification_states_the_larger_class_share_of_the_test_draws(tmp_path):
    """A test draw of Pathfinder classification need not hold the two classes equally: a model that always
    names the larger class scores its share, which the document states beside chance (from the stored runs)."""
    def run(attention: str, run: int, correct: int, majority: int) -> dict:
        return dict(task='pathfinder-cls', phase='test', attention=attention, layers=1, lr=1e-3, run=run,
                    iters=2000, seconds=1.0, s_per_iter=0.1, params=1000, hops=0, lo=0, hi=0, correct=correct,
                    total=200, majority=majority)
    runs = [run(a, r, 100 + i, m) for a in ('lisa', 'softmax') for i, (r, m) in enumerate([(1000, 105), (1001, 111)])]
    sweep.write_document(runs, tmp_path / 'doc.md', '')
    # draws: 105/200 = 52.5 %, 111/200 = 55.5 %; their mean 54.0 %
    assert ('Chance 50.0 %; always naming the larger class of a test draw scores 52.5-55.5 % '
            '(54.0 % on average).') in (tmp_path / 'doc.md').read_text()


def test_findings_summary_names_each_pair_once_at_the_budget_with_the_most_paired_runs():
    """LiSA T=3 against FLatten differs at 2000 iterations (4 runs) and at 4000 (2 runs): the summary names it
    once, at 2000 (FLatten 4000 - 2000 it, -10 points in both runs, is left to the task section); against
    softmax the interval holds 0."""
    lisa = rows('lisa', {r: (a, a) for r, a in zip(range(1000, 1004), [100, 100, 100, 99])})
    flat = rows('flatten', {r: (a, a) for r, a in zip(range(1000, 1004), [90, 92, 91, 90])})
    soft = rows('softmax', {r: (a, a) for r, a in zip(range(1000, 1004), [100, 80, 99, 90])})
    longer = rows('lisa', {1000: (100, 100), 1001: (100, 100)}, iters=4000) + rows(
        'flatten', {1000: (80, 80), 1001: (82, 82)}, iters=4000)
    lines = report.summary({'lookup-hops2': lisa + flat + soft + longer})
    assert lines[2:4] == ['| lookup-hops2 | FLatten | 2000 | 4 | +9.0 [+7.7, +10.3] | – |', '']
    assert 'Of all 5 comparisons 3 exclude 0 and 2 do not; the 4 not shown here' in lines[4]
    assert report.summary({'lookup-hops2': soft + lisa[:2]})[0].startswith('LiSA T=3 against each attention')


def test_document_reads_top_down_from_the_rows_and_the_stored_note(tmp_path):
    """Findings, protocol, then a section per task; the note beside the markdown adds its measurement lines to
    the protocol and a task's lines to its section; no prose block runs over 150 words; the header names the
    command that writes the document again."""
    lisa = rows('lisa', {r: (a, a) for r, a in zip(range(1000, 1004), [100, 100, 100, 99])})
    flat = rows('flatten', {r: (a, a) for r, a in zip(range(1000, 1004), [90, 92, 91, 90])})
    stored = tmp_path / 'rows.jsonl'
    stored.write_text(''.join(json.dumps(r) + '\n' for r in lisa + flat))
    (tmp_path / 'doc_note.md').write_text('# notes\n\n## measurement\n\n- Measured on a test machine.\n\n'
                                          '## lookup-hops2\n\n- A reading of the lookup.\n')
    tool.main(['--from-rows', str(stored), '--markdown', str(tmp_path / 'doc.md')])
    text = (tmp_path / 'doc.md').read_text()
    assert f'`python tools/long_range.py --from-rows {stored} --markdown {tmp_path / "doc.md"}`' in text
    order = [text.index(s) for s in ('## Findings', '## Protocol', '- Measured on a test machine.', '## lookup-hops2',
                                     '### Notes', '- A reading of the lookup.')]
    assert order == sorted(order)
    assert '1. Recipe: ' in text and 'lookup-hops2: draws 1000-1003, 4 per variant at 2000 iterations' in text
    blocks = [b for b in text.split('\n\n') if b.strip() and not b.startswith(('#', '|'))]
    assert max(len(b.split()) for b in blocks) <= 150
    with pytest.raises(ValueError, match="note section.s. lookup: the sections are 'measurement' and the tasks"):
        sweep.write_document(lisa, tmp_path / 'other.md', '## lookup\n- a task that is not one\n')
