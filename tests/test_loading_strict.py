"""Every loading path uses the one strict report.

A checkpoint whose tensors do not cover the model (missing, wrong shape) or that holds
tensors the model does not use stops ``load_from``, ``tools/test.py`` and
``tools/export_onnx.py`` with the list, unless ``allow_new`` / ``allow_unused`` names them;
non-finite weights name the file; the attention flags are booleans; the README's preset for
loading a softmax checkpoint into LiSA covers every tensor LiSA adds.
"""
from __future__ import annotations

import sys
from pathlib import Path

import engine_toy
import pytest
import torch
from mmengine.config import Config
from mmengine.runner import Runner
from test_backbone_pvt import TINY, official_pvt_state_dict

import projects.lisa.registry  # noqa: F401  (registers the backbones and the hooks)
from projects.lisa.engine.nonfinite import NonFiniteError
from projects.lisa.models.attention import LiSAAttention
from projects.lisa.models.backbones.loading import (
    IncompleteCheckpointError,
    check_state_dict,
    load_checkpoint_strictly,
    load_pretrained,
)
from projects.lisa.models.backbones.pvt import LiSAPVT

ROOT = Path(__file__).resolve().parents[1]
SEG_DEMO = ROOT / 'configs/segmentation/demo/fpn_lisa-pvt-t_1xb4-150iter_synthetic-ade20k-96x96.py'


def toy_checkpoint(path: Path, edit=None, hidden: int = 16) -> str:
    """A checkpoint of ``ToyRegressor(hidden)`` whose state dict ``edit`` may change."""
    torch.manual_seed(0)
    state = engine_toy.ToyRegressor(hidden=hidden).state_dict()
    if edit is not None:
        edit(state)
    torch.save(dict(state_dict=state, meta=dict()), path)
    return str(path)


def toy_runner(tmp_path: Path, checkpoint: str, **safe_runtime) -> Runner:
    cfg = engine_toy.toy_config(str(tmp_path / 'work'), max_iters=1)
    cfg['custom_hooks'][0].update(safe_runtime)
    return Runner.from_cfg(Config({**cfg, 'load_from': checkpoint}))


EDITS = {  # what the checkpoint does wrong, and the line of the report that says so
    'missing': (lambda s: s.pop('net.3.bias'), r'NOT IN THE CHECKPOINT \(1\): net\.3\.bias'),
    'mismatched': (lambda s: s.update({'net.3.weight': torch.zeros(1, 8)}),
                   r'SHAPE MISMATCH \(1\): net\.3\.weight checkpoint \(1, 8\) vs model \(1, 16\)'),
    'unexpected': (lambda s: s.update({'head.weight': torch.zeros(3)}),
                   r'unused, not in this model \(1\): head\.weight'),
}


@pytest.mark.parametrize('problem', sorted(EDITS))
def test_load_from_stops_on_a_partly_matching_checkpoint_with_the_list(tmp_path, problem):
    edit, line = EDITS[problem]
    runner = toy_runner(tmp_path, toy_checkpoint(tmp_path / 'ckpt.pth', edit))
    with pytest.raises(IncompleteCheckpointError, match=line):
        runner.train()


def test_allow_new_and_allow_unused_let_the_named_tensors_through_and_load_the_rest(tmp_path):
    def edit(state):
        state.pop('net.3.bias')
        state['head.weight'] = torch.zeros(3)
    checkpoint = toy_checkpoint(tmp_path / 'ckpt.pth', edit)
    runner = toy_runner(tmp_path, checkpoint, allow_new=['net.3.*'], allow_unused=['head.*'])
    fresh_bias = None

    def remember(module, *args):
        nonlocal fresh_bias
        fresh_bias = module.net[3].bias.detach().clone()
    runner.model.register_load_state_dict_post_hook(remember)
    runner.load_checkpoint(checkpoint)
    saved = torch.load(checkpoint)['state_dict']
    assert torch.equal(runner.model.net[0].weight, saved['net.0.weight'])
    assert torch.equal(runner.model.net[3].bias, fresh_bias)  # new by design: left as initialised


def test_tools_test_stops_on_a_checkpoint_missing_a_tensor(tmp_path, monkeypatch):
    """tools/test.py stops instead of printing a metric computed with a randomly initialised layer."""
    from tools import test as tools_test
    config = tmp_path / 'toy.py'
    cfg = engine_toy.toy_config(str(tmp_path / 'work'))
    cfg['custom_hooks'] = []  # tools/test.py adds the safe runtime itself
    Config(cfg).dump(str(config))
    checkpoint = toy_checkpoint(tmp_path / 'ckpt.pth', lambda s: s.pop('net.0.weight'))
    monkeypatch.setattr(sys, 'argv', ['test.py', str(config), checkpoint])
    with pytest.raises(IncompleteCheckpointError, match=r'NOT IN THE CHECKPOINT \(1\): net\.0\.weight'):
        tools_test.main()
    monkeypatch.setattr(sys, 'argv', ['test.py', str(config), checkpoint, '--allow-new', 'net.0.weight'])
    tools_test.main()  # evaluated, with the named tensor as initialised


def test_export_onnx_stops_on_a_checkpoint_with_a_wrong_shaped_tensor(tmp_path):
    sys.path.insert(0, str(ROOT / 'tools'))
    from export_onnx import build_model
    cfg = Config.fromfile(str(SEG_DEMO))
    cfg.model.backbone.init_cfg = None
    from mmengine.registry import MODELS, init_default_scope
    init_default_scope('mmseg')
    state = MODELS.build(cfg.model).state_dict()
    state['decode_head.conv_seg.weight'] = state['decode_head.conv_seg.weight'][:-1]
    torch.save(dict(state_dict=state), tmp_path / 'seg.pth')
    with pytest.raises(IncompleteCheckpointError, match=r'SHAPE MISMATCH \(1\): decode_head\.conv_seg\.weight'):
        build_model(str(SEG_DEMO), str(tmp_path / 'seg.pth'))


def test_whole_model_report_converts_an_official_backbone_layout_like_load_state_dict():
    """The report sees the keys as the backbone's pre-hook will convert them, so a foreign
    layout is no false alarm, and the converted load equals the backbone's own loading."""
    official = official_pvt_state_dict(TINY['embed_dims'], TINY['depths'], TINY['mlp_ratios'], (8, 4, 2, 1), img=64)
    model = LiSAPVT(arch=TINY, attn_cfgs=[dict(type='softmax', sr_ratio=r) for r in (8, 4, 2, 1)],
                    pretrain_img_size=64)
    report, adapted = check_state_dict(model, official, 'official')
    assert report.converted and not (report.missing or report.mismatched or report.unexpected)
    assert len(report.loaded) == len(model.state_dict())
    model.load_state_dict(adapted)
    torch.testing.assert_close(model.state_dict()['stages.2.blocks.0.attn.qkv.weight'],
                               torch.cat([official['block3.0.attn.q.weight'], official['block3.0.attn.kv.weight']]))


def test_load_checkpoint_strictly_refuses_a_missing_tensor(tmp_path):
    checkpoint = toy_checkpoint(tmp_path / 'ckpt.pth', lambda s: s.pop('net.0.bias'))
    with pytest.raises(IncompleteCheckpointError, match=r"(?s)net\.0\.bias.*allow_new=\['net\.\*\.bias'\]"):
        load_checkpoint_strictly(engine_toy.ToyRegressor(), checkpoint)


def test_non_finite_weights_of_a_checkpoint_name_the_file_not_the_gradients(tmp_path):
    checkpoint = toy_checkpoint(tmp_path / 'nan.pth', lambda s: s['net.0.weight'].view(-1)[3].fill_(float('nan')))
    runner = toy_runner(tmp_path, checkpoint)
    with pytest.raises(NonFiniteError, match=rf"{tmp_path / 'nan.pth'}: 1 of 4 weights .*net\.0\.weight"):
        runner.train()


@pytest.mark.parametrize('flag', ['use_global', 'use_local', 'focusing', 'dwc'])
@pytest.mark.parametrize('value', ['no', 0, 1, None])
def test_lisa_flags_must_be_booleans(flag, value):
    with pytest.raises(ValueError, match=rf'{flag}={value!r} must be True or False'):
        LiSAAttention(8, 2, **{flag: value})


def test_readme_preset_loads_a_softmax_checkpoint_into_lisa(tmp_path):
    """README: ``init_cfg=dict(type='Pretrained', checkpoint=..., allow_new=['lisa_from_softmax'])``."""
    official = official_pvt_state_dict(TINY['embed_dims'], TINY['depths'], TINY['mlp_ratios'], (8, 4, 2, 1), img=64)
    torch.save({'model': official}, tmp_path / 'pvt_tiny.pth')
    init_cfg = dict(type='Pretrained', checkpoint=str(tmp_path / 'pvt_tiny.pth'))
    with pytest.raises(IncompleteCheckpointError, match=r'NOT IN THE CHECKPOINT \(20\)'):  # step_mlp alone
        LiSAPVT(arch=TINY, pretrain_img_size=64,
                init_cfg=dict(init_cfg, allow_new=['*.attn.step_mlp.*'])).init_weights()
    LiSAPVT(arch=TINY, pretrain_img_size=64, init_cfg=dict(init_cfg, allow_new=['lisa_from_softmax'])).init_weights()
    lisa_only = ('scale', 'positional_encoding.weight', 'dwc.weight', 'dwc.bias', 'alpha', 'step_mlp.0.weight',
                 'step_mlp.0.bias', 'step_mlp.2.weight', 'step_mlp.2.bias')  # LiSA's tensors, by hand
    report = load_pretrained(LiSAPVT(arch=TINY, pretrain_img_size=64), init_cfg['checkpoint'],
                             allow_new=['lisa_from_softmax'])
    assert sorted(report.new) == sorted(f'stages.{s}.blocks.0.attn.{n}' for s in range(4) for n in lisa_only)
