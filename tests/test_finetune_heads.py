"""Fine-tuning from a checkpoint trained for other classes.

A head of another ``num_classes`` (COCO -> own data, ADE -> own data) stops a strict load
with a message that names ``allow_mismatch``; the tensors it names keep the model's
initialisation and are listed in the log, everything else still loads or stops.
"""
from __future__ import annotations

import sys
from pathlib import Path

import engine_toy
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope
from test_backbone_pvt import TINY
from test_loading_strict import toy_checkpoint, toy_runner

import projects.lisa.registry  # noqa: F401  (registers the backbones and the hooks)
from projects.lisa.models.backbones.loading import IncompleteCheckpointError, check_state_dict, load_pretrained
from projects.lisa.models.backbones.pvt import LiSAPVT

ROOT = Path(__file__).resolve().parents[1]
SEG_DEMO = ROOT / 'configs/segmentation/demo/fpn_lisa-pvt-t_1xb4-150iter_synthetic-ade20k-96x96.py'


def two_class_head(state: dict) -> None:
    """The toy's output layer as a head of two outputs instead of one."""
    state['net.3.weight'] = torch.ones(2, 16)
    state['net.3.bias'] = torch.ones(2)


def test_load_from_another_head_stops_and_offers_allow_mismatch(tmp_path):
    runner = toy_runner(tmp_path, toy_checkpoint(tmp_path / 'ckpt.pth', two_class_head))
    with pytest.raises(IncompleteCheckpointError,
                       match=r"(?s)SHAPE MISMATCH \(2\).*allow_mismatch=\['net\.\*\.bias', 'net\.\*\.weight'\]"):
        runner.train()


def test_allow_mismatch_keeps_the_models_initialisation_of_the_named_tensors_and_logs_them(tmp_path, caplog):
    checkpoint = toy_checkpoint(tmp_path / 'ckpt.pth', two_class_head)
    runner = toy_runner(tmp_path, checkpoint, allow_mismatch=['net.3.*'])
    initial = {k: v.clone() for k, v in runner.model.state_dict().items()}
    runner.logger.addHandler(caplog.handler)
    runner.load_checkpoint(checkpoint)
    runner.logger.removeHandler(caplog.handler)
    saved = torch.load(checkpoint)['state_dict']
    assert torch.equal(runner.model.net[0].weight, saved['net.0.weight'])
    assert torch.equal(runner.model.net[3].weight, initial['net.3.weight'])
    assert torch.equal(runner.model.net[3].bias, initial['net.3.bias'])
    assert ('shape mismatch allowed (allow_mismatch), initialised (2): net.3.weight checkpoint (2, 16) vs model '
            '(1, 16), net.3.bias checkpoint (2,) vs model (1,)') in caplog.text


def test_allow_mismatch_lets_only_the_named_tensors_through(tmp_path):
    def edit(state):
        two_class_head(state)
        state['net.0.bias'] = torch.zeros(4)
    runner = toy_runner(tmp_path, toy_checkpoint(tmp_path / 'ckpt.pth', edit), allow_mismatch=['net.3.*'])
    with pytest.raises(IncompleteCheckpointError,
                       match=r'SHAPE MISMATCH \(1\): net\.0\.bias checkpoint \(4,\) vs model \(16,\)'):
        runner.train()


def test_seg_head_preset_covers_a_segmentor_trained_for_other_classes():
    cfg = Config.fromfile(str(SEG_DEMO))
    cfg.model.backbone.init_cfg = None
    init_default_scope('mmseg')
    model = MODELS.build(cfg.model)
    state = model.state_dict()
    state['decode_head.conv_seg.weight'] = torch.zeros(10, *state['decode_head.conv_seg.weight'].shape[1:])
    state['decode_head.conv_seg.bias'] = torch.zeros(10)
    with pytest.raises(IncompleteCheckpointError, match=r"allow_mismatch=\['seg_head'\]"):
        check_state_dict(model, state, 'ade.pth')
    report, to_load = check_state_dict(model, state, 'ade.pth', allow_mismatch=['seg_head'])
    assert sorted(k for k, _, _ in report.allowed_mismatch) == ['decode_head.conv_seg.bias',
                                                                'decode_head.conv_seg.weight']
    assert set(to_load) == set(state) - {'decode_head.conv_seg.bias', 'decode_head.conv_seg.weight'}


def test_init_cfg_allow_mismatch_keeps_the_backbones_tensor_as_initialised(tmp_path):
    torch.manual_seed(0)
    source = LiSAPVT(arch=TINY, pretrain_img_size=64).state_dict()
    source['stages.0.patch_embed.norm.weight'] = torch.ones(7)
    torch.save(dict(state_dict=source), tmp_path / 'bb.pth')
    model = LiSAPVT(arch=TINY, pretrain_img_size=64)
    initial = model.state_dict()['stages.0.patch_embed.norm.weight'].clone()
    with pytest.raises(IncompleteCheckpointError, match=r"allow_mismatch=\['stages\.\*\.patch_embed\.norm\.weight'\]"):
        load_pretrained(model, str(tmp_path / 'bb.pth'))
    report = load_pretrained(model, str(tmp_path / 'bb.pth'), allow_mismatch=['stages.0.patch_embed.norm.weight'])
    assert [k for k, _, _ in report.allowed_mismatch] == ['stages.0.patch_embed.norm.weight']
    assert torch.equal(model.state_dict()['stages.0.patch_embed.norm.weight'], initial)
    assert torch.equal(model.state_dict()['stages.0.patch_embed.norm.bias'], source['stages.0.patch_embed.norm.bias'])


def test_tools_train_takes_allow_mismatch(tmp_path, monkeypatch):
    from tools import train as tools_train
    config = tmp_path / 'toy.py'
    Config(engine_toy.toy_config(str(tmp_path / 'work'), max_iters=1, safe=False)).dump(str(config))
    checkpoint = toy_checkpoint(tmp_path / 'ckpt.pth', two_class_head)
    monkeypatch.setattr(sys, 'argv', ['train.py', str(config), '--cfg-options', f'load_from={checkpoint}',
                                      '--allow-mismatch', 'net.3.*'])
    tools_train.main()
    assert (tmp_path / 'work' / 'iter_1.pth').is_file()


def test_allow_mismatch_names_its_presets_when_an_entry_is_no_glob():
    model = engine_toy.ToyRegressor()
    with pytest.raises(ValueError, match=r"allow_mismatch=\[3\]: every entry must be a glob string or one of "
                                         r"\['cls_head', 'det_head', 'seg_head'\], got 3"):
        check_state_dict(model, model.state_dict(), 'toy', allow_mismatch=[3])
