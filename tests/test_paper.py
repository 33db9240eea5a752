"""The paper's models (projects.lisa.analysis.paper): one table that the FLOP counter, the deployment
benchmark and the dense benchmark read, checked against the configs it names."""
from __future__ import annotations

from pathlib import Path

from projects.lisa.analysis.paper import PAPER_GFLOPS, PAPER_MODELS, paper_models
from projects.lisa.analysis.results import parse_config_name
from projects.lisa.benchmarks import deploy as deploy_benchmark
from projects.lisa.benchmarks import model as model_benchmark

ROOT = Path(__file__).resolve().parents[1]


def test_every_paper_model_names_an_existing_config_once():
    configs = [m.config for m in PAPER_MODELS]
    assert len(set(configs)) == len(configs) == 20
    for config in configs:
        assert (ROOT / 'configs' / config).is_file(), config
    assert len({m.name for m in PAPER_MODELS if m.table != 'Table 2'}) == 12


def test_a_models_backbone_is_the_one_its_config_name_gives():
    """``LiSA-PVT-T`` is built by ``..._lisa-pvt-t_...``; BiFormer's BRA rows by ``biformer-<size>_bra``."""
    sizes = {'T': 'tiny', 'S': 'small', 'B': 'base'}
    for m in PAPER_MODELS:
        key, _ = parse_config_name(m.config)
        if m.method:
            assert m.backbone.lower() in key.split('_'), (m.backbone, m.config)
        else:
            attention = 'lisa' if m.backbone.startswith('LiSA-') else 'bra'
            assert key == f'biformer-{sizes[m.backbone[-1]]}_{attention}', (m.backbone, m.config)


def test_the_paper_gives_flops_for_the_tables_3_and_4_rows_it_has():
    assert PAPER_GFLOPS['segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py'] == 170
    assert PAPER_GFLOPS['detection/mask-rcnn_swin-t_fpn_1x_coco.py'] == 267
    assert [m.backbone for m in paper_models('Table 4') if m.gflops is None] == ['FLatten-PVT-T', 'FLatten-Swin-T']


def test_the_benchmarks_read_their_models_from_the_paper_table():
    assert list(deploy_benchmark.MODELS) == [m.name for m in PAPER_MODELS if m.table in ('Table 3', 'Table 4')]
    assert deploy_benchmark.MODELS['S-FPN LiSA-PVT-T'] == 'segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py'
    assert list(model_benchmark.dense_configs('pvt')) == ['PVT-T', 'FLatten-PVT-T', 'LiSA-PVT-T']  # softmax first
    assert model_benchmark.dense_configs('swin')['LiSA-Swin-T'] == (
        'segmentation/upernet_lisa-swin-t_8xb2-160k_ade20k-512x512.py')
