"""Starting the dense models without a LiSA ImageNet run: the ``*_softmax-in1k-pre_*`` configs, the
README's "any config" example and the message for a missing ``pretrain/*.pth``.

References: the checkpoint URLs of the mm libraries' own PVT-T / Swin-T configs (what each
LiSA backbone must start from), checkpoints in the official release layouts written from randomly
initialised mm backbones (``test_checkpoint_formats``: the inverse of the documented key
mappings), the softmax model loaded from the same file (what the shared tensors must hold) and
the same LiSA model initialised from scratch with the same seed (what its new tensors must hold).
"""
from __future__ import annotations

import copy
import functools
import re
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.hub import get_config
from mmengine.registry import init_default_scope
from test_checkpoint_formats import official_pvt, official_swin, randomised

from projects.lisa.engine.pretrained import CLASSIFIERS, missing_pretrained
from projects.lisa.models.backbones.loading import ALLOW_NEW_PRESETS, IncompleteCheckpointError
from projects.lisa.registry import register_all_modules
from projects.lisa.synthetic import generate

ROOT = Path(__file__).resolve().parents[1]
PVT_URL = get_config('mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py').model.backbone.init_cfg.checkpoint
UPSTREAM = {  # the checkpoint each upstream config loads into its softmax backbone
    'pvt': PVT_URL,
    'upernet_swin': get_config('mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
                               ).model.backbone.init_cfg.checkpoint,
    'mask-rcnn_swin': get_config('mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
                                 ).model.backbone.init_cfg.checkpoint,
}
DENSE = sorted(p for task in ('segmentation', 'detection') for p in (ROOT / 'configs' / task).glob('*.py')
               if 'biformer' not in p.name and 'softmax-in1k-pre' not in p.name)
SOFTMAX_START = sorted((ROOT / 'configs').glob('*/*_softmax-in1k-pre_*.py'))


@functools.cache
def _parsed(path: str) -> Config:
    return Config.fromfile(path)


def parsed(config: Path | str) -> Config:
    """The config, parsed once per test session (a copy: callers may change it)."""
    return copy.deepcopy(_parsed(str(config)))


def softmax_sibling(config: Path) -> Path:
    parts = config.name.split('_')
    return config.with_name('_'.join([*parts[:2], 'softmax-in1k-pre', *parts[2:]]))


def backbone_cfg(config: Path | str, checkpoint: Path):
    """The config's backbone with its Pretrained file replaced by a local ``checkpoint``."""
    register_all_modules()
    cfg = parsed(config)
    cfg.model.backbone.init_cfg.checkpoint = str(checkpoint)
    init_default_scope(cfg.default_scope)
    return cfg.model.backbone


def built(backbone, seed: int = 0):
    from mmengine.registry import MODELS
    torch.manual_seed(seed)
    model = MODELS.build(backbone)
    model.init_weights()
    return model


@pytest.fixture(scope='module')
def official_pvt_t(tmp_path_factory) -> Path:
    """A PVT-T checkpoint in the PVT authors' layout (what PVT_URL holds), random weights."""
    from mmdet.models.backbones.pvt import PyramidVisionTransformer
    path = tmp_path_factory.mktemp('pvt') / 'pvt_tiny.pth'
    torch.save(official_pvt(randomised(PyramidVisionTransformer(num_layers=[2, 2, 2, 2]))), path)
    return path


@pytest.fixture(scope='module')
def official_swin_t(tmp_path_factory) -> Path:
    """A Swin-T checkpoint in the Swin authors' layout, random weights."""
    from mmseg.models.backbones import SwinTransformer
    path = tmp_path_factory.mktemp('swin') / 'swin_tiny_patch4_window7_224.pth'
    torch.save({'model': official_swin(randomised(SwinTransformer(depths=(2, 2, 6, 2))))}, path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize('config', [c for c in DENSE if 'segmentation' in c.parts],  # detection: the same backbones
                         ids=lambda c: c.name.split('_')[1])
def test_dense_configs_load_the_checkpoint_of_their_classification_config(tmp_path, config):
    """The hand-off of the paper's pipeline: a dense backbone loads its classifier's checkpoint whole (the Swin
    rows' output norms of stages 1-3, which a classifier lacks, named by ``dense_norms``)."""
    register_all_modules()
    dense = parsed(config)
    model = Path(dense.pretrained).name[:-len('_in1k.pth')]
    classifier = parsed(ROOT / f'configs/classification/{CLASSIFIERS[model]}_8xb128_in1k.py')
    init_default_scope('mmpretrain')
    from mmengine.registry import MODELS
    state = MODELS.build(classifier.model.backbone).state_dict()
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in state.items()}}, tmp_path / 'cls.pth')
    loaded = built(backbone_cfg(config, tmp_path / 'cls.pth')).state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items() if k in loaded)
    assert {k for k in loaded if k not in state} <= {f'norm{i}.{p}' for i in range(3) for p in ('weight', 'bias')}


def test_every_dense_config_has_a_softmax_start_sibling_loading_its_upstream_checkpoint():
    assert len(DENSE) == 12 and sorted(map(softmax_sibling, DENSE)) == SOFTMAX_START
    for config in SOFTMAX_START:
        backbone = parsed(config).model.backbone
        upstream = UPSTREAM['pvt' if 'pvt' in config.name else config.name.split('_')[0] + '_swin']
        init = backbone.init_cfg
        assert (init.type, init.checkpoint, init.prefix) == ('Pretrained', upstream, None), config.name
        kernel = 'lisa' in config.name or 'flatten' in config.name  # attentions with tensors softmax lacks
        swin_norms = ['dense_norms'] if 'swin' in config.name else []  # the dense model's, not the classifier's
        assert init.get('allow_new') == ((['lisa_from_softmax'] if kernel else []) + swin_norms or None), config.name
        # the same model as its sibling: only the initialisation differs
        base = parsed(config.with_name(config.name.replace('_softmax-in1k-pre', '')))
        assert {k: v for k, v in backbone.items() if k != 'init_cfg'} == {
            k: v for k, v in base.model.backbone.items() if k != 'init_cfg'}


@pytest.mark.parametrize('row', ['lisa', 'flatten'])
def test_lisa_pvt_t_starts_from_the_softmax_release_with_its_own_tensors_as_from_scratch(official_pvt_t, row):
    name = f'fpn_{row}-pvt-t_softmax-in1k-pre_8xb4-40k_ade20k-512x512.py'
    model = built(backbone_cfg(ROOT / 'configs/segmentation' / name, official_pvt_t))
    softmax = built(backbone_cfg(ROOT / 'configs/segmentation/fpn_pvt-t_softmax-in1k-pre_8xb4-40k_ade20k-512x512.py',
                                 official_pvt_t)).state_dict()
    scratch = parsed(ROOT / 'configs/segmentation' / name).model.backbone
    scratch.init_cfg = None
    scratch = built(scratch).state_dict()
    new = [k for k in model.state_dict() if k not in softmax]
    assert new and all(any(fnmatch(k, g) for g in ALLOW_NEW_PRESETS['lisa_from_softmax']) for k in new)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, (softmax if key in softmax else scratch)[key], rtol=0, atol=0, msg=key)


@pytest.mark.slow
def test_lisa_swin_t_starts_from_the_softmax_release(official_swin_t):
    name = 'configs/segmentation/upernet_lisa-swin-t_softmax-in1k-pre_8xb2-160k_ade20k-512x512.py'
    model = built(backbone_cfg(ROOT / name, official_swin_t)).state_dict()
    softmax = built(backbone_cfg(ROOT / name.replace('lisa-swin', 'swin'), official_swin_t)).state_dict()
    shared = [k for k in model if k in softmax]
    assert len(shared) > 100 and all(torch.equal(model[k], softmax[k]) for k in shared)
    assert {k for k in model if k not in softmax} and all(
        any(fnmatch(k, g) for g in ALLOW_NEW_PRESETS['lisa_from_softmax']) for k in model if k not in softmax)


def readme_any_config_blocks() -> list[str]:
    """The config files of the README's "Use LiSA in any OpenMMLab config" section, one per python block."""
    text = (ROOT / 'README.md').read_text()
    section = text.split('### Use LiSA in any OpenMMLab config', 1)[1].split('\n### ', 1)[0]
    return re.findall(r'```python\n(.*?)```', section, re.S)


@pytest.mark.parametrize('upstream', ['mmdet::pvt', 'mmseg::swin', 'mmpretrain::deit'])
def test_readme_any_config_examples_run_as_written_and_a_refusal_names_the_preset_first(
        tmp_path, official_pvt_t, official_swin_t, upstream):
    (block, ) = [b for b in readme_any_config_blocks() if f"_base_ = '{upstream}" in b]
    config = tmp_path / 'example.py'
    config.write_text(block)
    if upstream == 'mmpretrain::deit':  # trained from scratch: nothing to load
        register_all_modules()
        init_default_scope('mmpretrain')
        model = built(parsed(config).model.backbone)
        assert any('alpha' in k for k in model.state_dict())
        return
    checkpoint = official_pvt_t if upstream == 'mmdet::pvt' else official_swin_t
    backbone = backbone_cfg(config, checkpoint)
    model = built(backbone)
    assert any('alpha' in k for k in model.state_dict())  # LiSA, loaded
    backbone.init_cfg.pop('allow_new')
    with pytest.raises(IncompleteCheckpointError) as error:
        built(backbone)
    first = str(error.value).splitlines()[0]
    presets = ['lisa_from_softmax'] + (['dense_norms'] if upstream == 'mmseg::swin' else [])
    assert f'allow_new={presets}' in first and str(checkpoint) in first


def test_a_dict_for_attn_cfgs_on_the_pvt_configs_replaces_every_stage(tmp_path):
    register_all_modules()
    for row in ('lisa-pvt-t', 'flatten-pvt-t'):
        config = tmp_path / f'{row}_t5.py'
        config.write_text(f"_base_ = '{ROOT}/configs/segmentation/fpn_{row}_8xb4-40k_ade20k-512x512.py'\n"
                          "model = dict(backbone=dict(attn_cfgs=dict(type='lisa', num_steps=5)))\n")
        backbone = parsed(config).model.backbone
        assert backbone.attn_cfgs == dict(type='lisa', num_steps=5)
        backbone.init_cfg = None
        model = built(backbone)
        steps = {m.num_steps for m in model.modules() if type(m).__name__ == 'LiSAAttention'}
        assert steps == {5}


def test_a_missing_pretrain_file_stops_before_the_run_with_both_ways_forward(tmp_path):
    for config in DENSE:
        message = missing_pretrained(parsed(config))
        path = parsed(config).pretrained
        assert message.startswith(f'model.backbone.init_cfg.checkpoint = {path!r} does not exist'), config.name
        classifier = re.search(r'(configs/classification/\S+\.py)', message)[1]
        sibling = re.search(r'instead: (\S+\.py)', message)[1]
        assert (ROOT / classifier).is_file() and Path(sibling) == softmax_sibling(config), message
    assert set(CLASSIFIERS) >= {Path(parsed(c).pretrained).name[:-len('_in1k.pth')] for c in DENSE}
    config = ROOT / 'configs/segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py'
    generate('ade20k', tmp_path / 'data', num_train=1, num_val=1, size=32, seed=0)  # data first: then the weights
    proc = subprocess.run([sys.executable, str(ROOT / 'tools/train.py'), str(config), '--dry-run'], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert ("model.backbone.init_cfg.checkpoint = 'pretrain/lisa-pvt-t_in1k.pth' does not exist. Two ways forward:"
            in proc.stderr.splitlines())
    assert 'pvt-tiny_lisa_8xb128_in1k.py' in proc.stderr and softmax_sibling(config).name in proc.stderr
