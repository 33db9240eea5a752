"""LiSAViT: DeiT / ViT with a selectable attention, checked against mmpretrain's ViT.
What every LiSA backbone does: test_backbone_common."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import projects.lisa.registry  # noqa: F401  (registers LiSAViT)
from projects.lisa.models.attention import ATTENTIONS, KernelAttention
from projects.lisa.models.attention.ops import geometric_weights
from projects.lisa.models.backbones.vit import LiSAViT, convert_vit_checkpoint

mmpretrain_models = pytest.importorskip('mmpretrain.models')
from mmpretrain.registry import MODELS  # noqa: E402
from mmpretrain.structures import DataSample  # noqa: E402

TINY = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
TINY_KW = dict(arch=TINY, pretrain_img_size=32, patch_size=8, drop_path_rate=0.0)
ATTENTION_TYPES = ('softmax', 'linear', 'flatten', 'lisa')


def tiny(**kwargs) -> LiSAViT:
    model = LiSAViT(**{**TINY_KW, **kwargs})
    model.init_weights()
    return model


def perturbed_mmpretrain_vit(**kwargs) -> torch.nn.Module:
    """mmpretrain's ViT with every parameter moved off its init value, so a
    misplaced weight (even a LayerNorm's 1/0) changes the output."""
    torch.manual_seed(0)
    ref = mmpretrain_models.VisionTransformer(**kwargs)
    ref.init_weights()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ref.eval()  # mmpretrain's BaseBackbone.train returns None
    return ref


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize('names, dims, heads', [(('deit-tiny', 'deit-t', 't'), 192, 3),
                                                (('deit-small', 'deit-s', 's'), 384, 6)])
def test_arch_names_give_deit_settings(names, dims, heads):
    for name in names:
        model = LiSAViT(arch=name, attn_cfgs=dict(type='softmax'))
        assert (model.embed_dims, model.num_layers, model.layers[0].attn.num_heads) == (dims, 12, heads)
        assert model.layers[0].ffn.layers[0][0].out_features == 4 * dims
        assert model.layers[0].ln1.eps == model.ln1.eps == 1e-6
        assert model.layers[0].attn.qkv.bias is not None


def test_softmax_deit_tiny_has_mmpretrain_parameter_count_and_state_dict():
    ours = LiSAViT(arch='deit-tiny', attn_cfgs=dict(type='softmax'))
    ref = mmpretrain_models.VisionTransformer(arch='deit-tiny')
    assert count(ours) == count(ref)
    assert {k: v.shape for k, v in ref.state_dict().items()} == {k: v.shape for k, v in ours.state_dict().items()}


@pytest.mark.slow
@pytest.mark.parametrize('img', [224, 160])
def test_converted_mmpretrain_deit_tiny_gives_same_class_token(img):
    ref = perturbed_mmpretrain_vit(arch='deit-tiny')
    ours = LiSAViT(arch='deit-tiny', attn_cfgs=dict(type='softmax')).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)  # mmpretrain's keys
    x = torch.randn(2, 3, img, img)
    with torch.no_grad():
        (expected,), (actual,) = ref(x), ours(x)
    assert actual.shape == (2, 192)
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize('out_type, with_cls_token', [
    ('cls_token', True), ('featmap', True), ('avg_featmap', True), ('raw', True), ('featmap', False), ('raw', False)])
def test_every_out_type_matches_mmpretrain(out_type, with_cls_token):
    kwargs = dict(patch_size=8, out_type=out_type, with_cls_token=with_cls_token)
    ref = perturbed_mmpretrain_vit(arch=TINY, img_size=32, out_indices=[0, -1], **kwargs)  # mmpretrain edits the list
    ours = LiSAViT(arch=TINY, attn_cfgs=dict(type='softmax'), pretrain_img_size=32, out_indices=(0, -1),
                   **kwargs).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)  # mmpretrain's keys
    x = torch.randn(2, 3, 40, 48)  # a 5 x 6 patch grid, not the 4 x 4 of the 32-px tables
    with torch.no_grad():
        expected, actual = ref(x), ours(x)
    shapes = {'cls_token': (2, 32), 'featmap': (2, 32, 5, 6), 'avg_featmap': (2, 32),
              'raw': (2, 30 + with_cls_token, 32)}
    assert len(actual) == 2
    for a, e in zip(actual, expected):
        assert a.shape == shapes[out_type]
        torch.testing.assert_close(a, e, rtol=0, atol=1e-5)


def test_converter_keeps_mmpretrains_keys_and_renames_lisavits_former_ones_to_them():
    mmpretrain = ['pos_embed', 'cls_token', 'layers.0.ln1.weight', 'layers.11.ln2.bias', 'layers.0.attn.qkv.weight',
                  'ln1.weight']
    former = ['pos_embed.weight', 'cls_token', 'layers.0.norm1.weight', 'layers.11.norm2.bias',
              'layers.0.attn.qkv.weight', 'ln1.weight']
    for keys in (mmpretrain, former):
        assert list(convert_vit_checkpoint(dict.fromkeys(keys, torch.ones(1)))) == mmpretrain


def former_keys(state_dict: dict) -> dict:
    """A LiSAViT state dict as LiSAViT saved it before it took mmpretrain's names."""
    return {re.sub(r'^(layers\.\d+)\.ln([12])\.', r'\1.norm\2.', re.sub(r'^pos_embed$', 'pos_embed.weight', k)): v
            for k, v in state_dict.items()}


@pytest.mark.parametrize('path', ['load_state_dict', 'init_cfg'])
def test_a_lisavit_checkpoint_with_the_former_keys_loads_exactly(path, tmp_path):
    torch.manual_seed(0)
    source = tiny(attn_cfgs=dict(type='lisa'))
    with torch.no_grad():
        for p in source.parameters():
            p.add_(0.05 * torch.randn_like(p))
    old = former_keys(source.state_dict())
    assert 'pos_embed.weight' in old and 'layers.1.norm2.bias' in old
    if path == 'load_state_dict':
        model = LiSAViT(**TINY_KW, attn_cfgs=dict(type='lisa'))
        model.load_state_dict(old, strict=True)
    else:
        torch.save({'state_dict': {'backbone.' + k: v for k, v in old.items()}}, tmp_path / 'old.pth')
        model = LiSAViT(**TINY_KW, attn_cfgs=dict(type='lisa'),
                        init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'old.pth'), prefix='backbone.'))
        model.init_weights()
    for key, value in source.state_dict().items():
        torch.testing.assert_close(model.state_dict()[key], value, rtol=0, atol=0)


@pytest.mark.parametrize('attn', ATTENTION_TYPES)
def test_every_attention_type_sees_the_class_token_as_prefix_and_the_patch_grid(attn):
    model = tiny(attn_cfgs=dict(type=attn), out_type='raw')
    for layer in model.layers:
        assert type(layer.attn) is ATTENTIONS[attn]
        assert layer.attn.num_prefix_tokens == 1
        if isinstance(layer.attn, KernelAttention):
            assert layer.attn.positional_encoding.pos_shape == (4, 4)
            assert layer.attn.positional_encoding.weight.shape == (1, 1 + 16, 32)
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    (out,) = model(x)
    assert out.shape == (2, 17, 32)
    # The class token gathers from every patch (global attention over all tokens).
    # (A random read-out: the plain sum of a LayerNorm output has zero gradient.)
    (out[:, 0] * torch.randn(2, 32)).sum().backward()
    per_patch = x.grad.abs().reshape(2, 3, 4, 8, 4, 8).sum(dim=(1, 3, 5))
    assert (per_patch > 0).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all()
               for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize('attn', ('linear', 'lisa'))
def test_kernel_attention_without_class_token(attn):
    model = tiny(attn_cfgs=dict(type=attn), with_cls_token=False, out_type='featmap')
    assert model.layers[0].attn.num_prefix_tokens == 0
    assert model.pos_embed.shape == (1, 16, 32)
    (out,) = model(torch.randn(1, 3, 32, 32))
    assert out.shape == (1, 32, 4, 4)


def test_attn_cfg_overrides_the_backbone_defaults():
    model = tiny(attn_cfgs=dict(type='lisa', num_steps=2, pos_shape=None, qkv_bias=False))
    attn = model.layers[1].attn
    assert (attn.num_steps, attn.positional_encoding, attn.qkv.bias) == (2, None, None)


@pytest.mark.parametrize('attn', ATTENTION_TYPES)
def test_other_input_size_equals_a_model_built_for_it(attn):
    """A 32-px model run at 48 px equals a 48-px model loaded from its
    checkpoint: both resize every positional encoding bicubically."""
    small = tiny(attn_cfgs=dict(type=attn)).eval()
    large = LiSAViT(**{**TINY_KW, 'pretrain_img_size': 48}, attn_cfgs=dict(type=attn)).eval()
    large.load_state_dict(small.state_dict(), strict=True)
    x = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        torch.testing.assert_close(small(x)[0], large(x)[0], rtol=0, atol=1e-5)


def test_loading_a_checkpoint_of_another_grid_resizes_positional_encodings_bicubically():
    small = tiny(attn_cfgs=dict(type='lisa'))
    large = LiSAViT(**{**TINY_KW, 'pretrain_img_size': 48}, attn_cfgs=dict(type='lisa'))
    large.load_state_dict(small.state_dict(), strict=True)
    for name in ('pos_embed', 'layers.1.attn.positional_encoding.weight'):
        src, dst = small.state_dict()[name], large.state_dict()[name]
        grid = src[:, 1:].reshape(1, 4, 4, 32).permute(0, 3, 1, 2)
        expected = F.interpolate(grid, size=(6, 6), mode='bicubic', align_corners=False)
        assert dst.shape == (1, 1 + 36, 32)
        torch.testing.assert_close(dst[:, :1], src[:, :1])
        torch.testing.assert_close(dst[:, 1:], expected.flatten(2).transpose(1, 2))


def test_freezing_every_layer_freezes_both_final_norms():
    # frozen_stages: test_backbone_common; here ViT's own ln2 (out_type='avg_featmap')
    every = tiny(frozen_stages=2, out_type='avg_featmap').train()
    assert not any(p.requires_grad for p in every.parameters())
    assert not every.ln1.training and not every.ln2.training


def test_init_weights_draws_deit_init_but_keeps_lisa_step_mlp_at_geometric_weights():
    torch.manual_seed(0)
    model = LiSAViT(arch=dict(TINY, embed_dims=128), pretrain_img_size=32, patch_size=8)
    model.init_weights()
    attn = model.layers[0].attn
    assert attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert not attn.qkv.bias.any()
    assert model.pos_embed.std().item() == pytest.approx(0.02, rel=0.2)
    assert model.cls_token.any()
    assert not attn.step_mlp[-1].weight.any()
    torch.testing.assert_close(attn.step_mlp[-1].bias, geometric_weights(0.5, 3).log().float())


@pytest.mark.parametrize('kwargs, match', [
    (dict(arch='deit-huge'), r"arch='deit-huge' is not one of .*'deit-tiny'"),
    (dict(out_type='tokens'), r"out_type='tokens' is not one of \('cls_token'"),
    (dict(with_cls_token=False), "needs with_cls_token=True"),
    (dict(drop_path_rate=1.0), r'drop_path_rate=1.0 must be in \[0, 1\)'),
])
def test_bad_config_raises_naming_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LiSAViT(**{**TINY_KW, **kwargs})


def test_mmpretrain_image_classifier_trains_and_predicts_with_lisavit(mmpretrain_scope):
    torch.manual_seed(0)
    model = MODELS.build(dict(
        type='ImageClassifier',
        backbone=dict(type='LiSAViT', **TINY_KW),
        neck=None,
        head=dict(type='VisionTransformerClsHead', num_classes=10, in_channels=32,
                  loss=dict(type='CrossEntropyLoss'))))
    model.init_weights()
    x = torch.randn(2, 3, 32, 32)
    samples = [DataSample().set_gt_label(label) for label in (3, 7)]
    losses = model(x, samples, mode='loss')
    losses['loss'].backward()
    assert torch.isfinite(losses['loss'])
    assert model.backbone.layers[0].attn.alpha.grad is not None
    model.eval()
    with torch.no_grad():
        logits = model(x, mode='tensor')
        preds = model(x, [DataSample() for _ in range(2)], mode='predict')
    assert logits.shape == (2, 10)
    torch.testing.assert_close(torch.stack([p.pred_score for p in preds]), logits.softmax(-1))
