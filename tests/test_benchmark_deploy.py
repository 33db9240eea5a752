"""tools/benchmark_deploy.py (docs/deploy.md): its options, its tables, and the item-1 comparison
of a (tiny) trained Mask R-CNN end to end."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from projects.lisa.benchmarks import deploy as deploy_benchmark
from projects.lisa.deploy import agreement
from tools import benchmark_deploy

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize('argv, message', [
    (['--parts', 'models', '--models', 'mask-rcnn-r50'], "'mask-rcnn-r50' not among fpn-pvt-t"),
    (['--parts', 'models', '--threads', '0'], '--threads=0 must be >= 1'),
    (['--parts', 'models', '--images', '0'], '--images=0 must be >= 1'),
    (['--parts', 'models', '--scales', '1', '-1.5'], '--scales: -1.5 must be > 0'),
    (['--parts', 'models', '--det-size', '16', '800'], '--det-size=[16, 800]: both sides must be >= 32'),
    (['--checkpoint', 'no/such/epoch_12.pth'], "--checkpoint 'no/such/epoch_12.pth' is not a file"),
    (['--parts', 'models', '--data-root', 'no/such/coco'], "--data-root 'no/such/coco' does not exist"),
])
def test_argument_errors_name_the_bad_value(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        benchmark_deploy.parse_args(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_every_model_of_the_paper_has_a_config_and_a_name():
    assert len(benchmark_deploy.KEYS) == len(deploy_benchmark.MODELS) == 12
    assert all((ROOT / 'configs' / c).is_file() for c in deploy_benchmark.MODELS.values())
    assert benchmark_deploy.KEYS['mask-rcnn-lisa-swin-t'] == 'Mask R-CNN LiSA-Swin-T'
    assert benchmark_deploy.KEYS['fpn-flatten-pvt-t'] == 'S-FPN FLatten-PVT-T'


def timing(eager: float, onnx: float, reference: float | None = None) -> dict:
    reference = eager if reference is None else reference
    return dict(eager_cpu_ms=eager, eager_wall_ms=eager + 1, reference_cpu_ms=reference,
                reference_wall_ms=reference + 1, onnxruntime_cpu_ms=onnx, onnxruntime_wall_ms=onnx + 1)


def cells(table: str) -> list[list[str]]:
    """The rows of a markdown table (header first) as lists of cells; every row as wide as the header."""
    rows = [[c.strip() for c in line.strip('|').split('|')] for line in table.splitlines() if line.startswith('|')]
    assert rows and all(len(r) == len(rows[0]) for r in rows), table
    return [rows[0]] + rows[2:]


def test_tables_give_each_measured_figure_in_its_column():
    seg = dict(model='S-FPN LiSA-PVT-T', task='segmentation', size=[512, 512], export_s=61.4, file_mb=53.25,
               errors=[([512, 512], 3.1e-6), ([544, 576], 4.2e-6)], **timing(400, 300, reference=600))
    fine = dict(images=2, eager=150, onnx=150, count_mismatches=0, near_ties=0, min_iou=0.99991, max_score_diff=2.5e-6,
                min_mask_iou=0.9953, failures=[])
    det = dict(model='Mask R-CNN Swin-T', task='detection', size=[800, 1333], export_s=150.2, file_mb=190.0,
               k=(100, 100), agreement=dict(fine, onnx=149, count_mismatches=1, failures=['1 of 2 images differ']),
               **timing(5000, 10000))
    header, row = cells(deploy_benchmark.segmentor_table([seg, det]))
    figures = dict(zip(header, row))
    assert figures['model'] == 'S-FPN LiSA-PVT-T' and figures['export s'] == '61' and figures['file MB'] == '53.2'
    assert figures['eager ms 512×512 (CPU / wall)'] == '400 / 401'
    assert figures['onnxruntime / eager (CPU / wall)'] == f'0.75x / {301 / 401:.2f}x'
    assert figures['eager, reference ops ms (CPU / wall)'] == '600 / 601'
    assert figures['onnxruntime / reference ops (CPU / wall)'] == f'0.50x / {301 / 601:.2f}x'
    assert figures['relative error 512×512 / 544×576'] == '3.1e-06 / 4.2e-06'
    header, row = cells(deploy_benchmark.detector_table([seg, det]))
    figures = dict(zip(header, row))
    assert figures['eager ms 800×1333 (CPU / wall)'] == '5000 / 5001'
    assert figures['K eager / onnxruntime'] == '100 / 100'
    assert figures['onnxruntime / eager (CPU / wall)'].startswith('2.00x')
    assert figures['detections eager / onnxruntime'] == '150 / 149' and figures['min box IoU'] == '0.9999'
    assert figures['within bounds'] == 'NO: 1 of 2 images differ'
    trained = [dict(fine, scale=s, resize=[round(160 * s), round(96 * s)], ap=dict(bbox=(0.315, 0.315),
               segm=(0.382, 0.381)), export_s=9.0, file_mb=20.0) for s in (1, 1.5)]
    rows = cells(deploy_benchmark.trained_table(trained))
    assert [r[0] for r in rows[1:]] == ['1× (160×96)', '1.5× (240×144)']
    figures = dict(zip(rows[0], rows[2]))
    assert figures['box AP eager / onnxruntime'] == '31.5 / 31.5' and figures['mask AP eager / onnxruntime'] == \
        '38.2 / 38.1'
    assert figures['within bounds'] == 'yes' and figures['max score diff'] == '2.5e-06'
    assert figures['near-ties'] == '0' and dict(zip(*cells(deploy_benchmark.trained_table(
        [dict(trained[0], near_ties=1)]))))['near-ties'] == '1'
    text = deploy_benchmark.document('python tools/benchmark_deploy.py --threads 1', 'CPU X, 1 thread', trained,
                                     'trained note', [seg, det], 'models note', 125)
    assert text.startswith('# ') and 'Written by `python tools/benchmark_deploy.py --threads 1`' in text
    assert 'in 2 min' in text and 'CPU X, 1 thread' in text and 'trained note' in text and 'models note' in text
    assert text.count('\n| model |') == 2 and text.count('| 1.5× (240×144) |') == 1


def test_profile_table_sums_time_and_nodes_by_op_type_side_by_side():
    before = dict(model='S-FPN LiSA-PVT-T', task='profile only', profile=dict(
        ms={'Concat': 300.0, 'MatMul': 100.0, 'Slice': 100.0}, nodes={'Concat': 52, 'MatMul': 80, 'Slice': 326,
                                                                      'Reshape': 9}))
    pvt = dict(model='S-FPN PVT-T', task='profile only', profile=dict(ms={'MatMul': 150.0, 'Conv': 50.0},
                                                                      nodes={'MatMul': 54, 'Conv': 26}))
    rows = cells(deploy_benchmark.profile_table([before, pvt, dict(model='unprofiled', task='x')], top=2))
    assert rows[0] == ['op type', 'S-FPN LiSA-PVT-T ms (share)', 'nodes', 'S-FPN PVT-T ms (share)', 'nodes']
    assert rows[1] == ['MatMul', '100 (20%)', '80', '150 (75%)', '54']   # largest share first
    assert rows[2] == ['Concat', '300 (60%)', '52', '0 (0%)', '0']
    assert rows[3] == ['other (3 types)', '100 (20%)', '335', '50 (25%)', '26']
    assert rows[4] == ['**all nodes**', '500 (100%)', '467', '200 (100%)', '80']
    assert deploy_benchmark.profile_table([dict(model='unprofiled')]) == ''
    text = deploy_benchmark.document('cmd', 'setting', [], '', [before], 'models note', 60, 'profile note')
    assert "### Where onnxruntime's time goes\n\nprofile note\n\n| op type |" in text


def test_profile_table_puts_the_reference_trace_before_the_shaped_export():
    lisa = dict(model='S-FPN LiSA-PVT-T', task='segmentation',
                profile_reference=dict(ms={'Slice': 300.0, 'MatMul': 100.0}, nodes={'Slice': 216, 'MatMul': 40}),
                profile=dict(ms={'MatMul': 140.0, 'Gather': 60.0}, nodes={'MatMul': 60, 'Gather': 30}))
    rows = cells(deploy_benchmark.profile_table([lisa], top=3))
    assert rows[0] == ['op type', 'S-FPN LiSA-PVT-T, reference ops traced ms (share)', 'nodes',
                       'S-FPN LiSA-PVT-T ms (share)', 'nodes']
    assert rows[1] == ['Slice', '300 (75%)', '216', '0 (0%)', '0']
    assert rows[-1] == ['**all nodes**', '400 (100%)', '256', '200 (100%)', '90']


def test_measure_model_profiles_the_reference_trace_beside_the_shaped_file(tmp_path, monkeypatch):
    """With ``profile``, the model is exported twice: as the tool ships it and with the references traced as
    they are (``shaped=False``), the "before" of the profile table; the second file is removed."""
    exported = []

    def fake_export(wrapped, shape, path, opset, metadata=None, shaped=True):
        exported.append((path.name, shaped))
        path.write_bytes(b'x')

    monkeypatch.setattr('projects.lisa.deploy.export', fake_export)
    monkeypatch.setattr('projects.lisa.deploy.onnx.ort_session', lambda path, threads=None: None)
    monkeypatch.setattr(deploy_benchmark, 'latency', lambda *a: {s: dict(cpu=1.0, wall=1.0)
                                                                 for s in deploy_benchmark.SIDES})
    monkeypatch.setattr(deploy_benchmark, 'op_profile', lambda path, inputs, threads: dict(ms={path.name: 1.0},
                                                                                           nodes={}))
    monkeypatch.setattr('projects.lisa.deploy.relative_errors', lambda *a, **k: [])
    configs = Path(__file__).parents[1] / 'configs'
    row = deploy_benchmark.measure_model('S-FPN PVT-T', configs, tmp_path, 1, (64, 64), (64, 64), tmp_path, 1, 0, 1,
                                         1.0, profile=True)
    assert [shaped for _, shaped in exported] == [True, False]
    assert row['profile']['ms'] == {exported[0][0]: 1.0} and row['profile_reference']['ms'] == {exported[1][0]: 1.0}
    assert not (tmp_path / exported[1][0]).exists()


def test_op_profile_times_each_op_type_of_a_file(tmp_path):
    pytest.importorskip('onnxruntime')
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        torch.onnx.export(model, (x, ), tmp_path / 'm.onnx', dynamo=True).save(str(tmp_path / 'm.onnx'))
    profile = deploy_benchmark.op_profile(tmp_path / 'm.onnx', [x], threads=1, runs=2)
    assert profile['nodes']['Conv'] == 1 and set(profile['ms']) >= {'Conv'} and all(
        t >= 0 for t in profile['ms'].values())


def test_latency_times_the_reference_side_on_the_reference_backend_and_the_others_as_they_run():
    """The three sides take turns on the same input; only the reference side switches the backend."""
    from projects.lisa.models.attention.ops.backend import current_backend

    seen = []

    class Module(torch.nn.Module):
        def forward(self, x):
            seen.append((current_backend(), torch.is_grad_enabled()))
            return x

    class Session:
        def __init__(self):
            self.feeds = []

        def get_inputs(self):
            return [type('Input', (), {'name': 'input'})()]

        def run(self, names, feed):
            self.feeds.append(feed)

    session, x = Session(), torch.arange(6.).view(1, 6)
    times = deploy_benchmark.latency(Module(), session, (x, ), warmup=1, repeats=3, budget_s=60)
    assert set(times) == set(deploy_benchmark.SIDES) and all(set(t) == {'cpu', 'wall'} for t in times.values())
    assert seen == [('auto', False), ('reference', False)] * 4 and len(session.feeds) == 4
    assert all((f['input'] == x.numpy()).all() for f in session.feeds)
    assert set(deploy_benchmark.timing_row(times)) == {f'{s}_{c}_ms' for s in deploy_benchmark.SIDES
                                                        for c in ('cpu', 'wall')}


def test_failures_name_each_broken_bound():
    total = dict(images=3, eager=40, onnx=40, count_mismatches=0, near_ties=1, min_iou=0.999, max_score_diff=1e-4,
                 min_mask_iou=0.99)
    assert agreement.failures(total, dict(bbox=(0.3, 0.3005), segm=(0.4, 0.4))) == []
    broken = agreement.failures(dict(total, count_mismatches=1, onnx=39, min_iou=0.98, max_score_diff=2e-3,
                                     min_mask_iou=0.9), dict(bbox=(0.3, 0.302), segm=(0.4, 0.4)))
    assert len(broken) == 5 and broken[0].startswith('1 of 3 images with different detection counts')
    assert 'box IoU 0.9800 < 0.99' in broken and 'score difference 2.00e-03 > 0.001' in broken
    assert 'mask IoU 0.9000 < 0.98' in broken and broken[-1].startswith('bbox mAP 0.302 (onnxruntime) vs 0.300')
    no_detection = dict(total, eager=0, onnx=0, near_ties=0)
    assert agreement.failures(no_detection) == ['no detection: the comparison holds nothing']
    assert agreement.failures(dict(total, near_ties=20)) == []
    assert agreement.failures(dict(total, near_ties=21)) == [
        "21 of 40 detections held to eager's perturbed tests (near-ties): more than half"]


@pytest.fixture(scope='module')
def tiny_trained(tmp_path_factory) -> tuple[Path, Path, Path]:
    """The demo's detection config at tiny widths, a checkpoint of it with random weights made
    confident (:func:`agreement.make_confident`) and a generated COCO val set of 3 images."""
    from projects.lisa.deploy import build_model
    from projects.lisa.synthetic.synthetic import generate

    out = tmp_path_factory.mktemp('tiny')
    generate('coco', out, num_train=1, num_val=3, size=96, seed=1)
    config = out / 'tiny.py'
    config.write_text(
        f"_base_ = '{benchmark_deploy.DEMO_CONFIG}'\n"
        'model = dict(backbone=dict(arch=dict(_delete_=True, embed_dims=[16, 32, 48, 64], depths=[1, 1, 1, 1], '
        'num_heads=[1, 2, 2, 4], mlp_ratios=[2, 2, 2, 2])), neck=dict(in_channels=[16, 32, 48, 64], out_channels=16),'
        ' rpn_head=dict(in_channels=16, feat_channels=16), roi_head=dict(bbox_roi_extractor=dict(out_channels=16), '
        'bbox_head=dict(in_channels=16, fc_out_channels=32), mask_roi_extractor=dict(out_channels=16), '
        'mask_head=dict(in_channels=16, conv_out_channels=16)))\n')
    torch.manual_seed(0)
    wrapped = build_model(str(config), None)
    agreement.make_confident(wrapped, agreement.drawn_classes(agreement.detection_loader(config, out / 'coco')))
    torch.save(dict(state_dict=wrapped.model.state_dict()), out / 'tiny.pth')
    return config, out / 'tiny.pth', out / 'coco'


@pytest.mark.slow
def test_trained_detector_figures_at_two_scales_within_bounds(tiny_trained, tmp_path, monkeypatch):
    """The tool's item-1 part on a tiny detector: exported once, mmdet's test and onnxruntime agree at
    the test scale and 1.5 times it, each with detections and both APs; the figures are the
    document's. The data root relative, as the defaults are. About a minute (the export)."""
    config, checkpoint, coco = tiny_trained
    doc = tmp_path / 'deploy.md'
    monkeypatch.chdir(coco.parent)
    assert benchmark_deploy.main(['--parts', 'trained', '--config', str(config), '--checkpoint', str(checkpoint),
                                  '--data-root', coco.name, '--out', str(tmp_path), '--markdown', str(doc)]) == 0
    import json

    rows = json.loads((tmp_path / 'deploy.json').read_text())['trained']
    assert [r['scale'] for r in rows] == [1.0, 1.5] and [r['resize'] for r in rows] == [[160, 96], [240, 144]]
    for r in rows:
        assert r['images'] == 3 and r['eager'] == r['onnx'] > 0 and r['failures'] == []
        assert r['min_iou'] >= 0.99 and r['max_score_diff'] <= 1e-3 and r['min_mask_iou'] >= 0.98
        assert all(abs(e - o) <= 1e-3 for e, o in r['ap'].values())
    table = doc.read_text().split('## ')[1]
    assert f"| 1.5× (240×144) | 3 | {rows[1]['near_ties']} | {rows[1]['eager']} / {rows[1]['onnx']} | 0 |" in table
