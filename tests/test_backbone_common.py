"""What every LiSA backbone does through its base class (``backbones/base.py``: LiSABackbone;
``blocks.py``: TransformerBlock, build_blocks; ``loading.py``), checked once per backbone of ``BACKBONES``.

A new backbone adds one row to ``BACKBONES`` and gets every test here; what only one
backbone does stays in its own ``test_backbone_<name>.py`` (which may import the helpers
``randomise`` and ``assert_same_outputs``).
"""
from __future__ import annotations

import copy
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
from torch import nn

import projects.lisa.registry  # noqa: F401  (registers the backbones)
from projects.lisa.models.attention import (
    ATTENTIONS,
    AngularAttention,
    BiLevelRoutingAttention,
    FocusedLinearAttention,
    LePEAttention,
    LinearAttention,
    LiSAAttention,
    ShiftedWindowAttention,
    SoftmaxAttention,
)
from projects.lisa.models.backbones import base
from projects.lisa.models.backbones import blocks as block_parts
from projects.lisa.models.backbones.biformer import LiSABiFormer
from projects.lisa.models.backbones.loading import IncompleteCheckpointError, load_pretrained
from projects.lisa.models.backbones.pvt import LiSAPVT
from projects.lisa.models.backbones.swin import LiSASwinTransformer
from projects.lisa.models.backbones.vit import LiSADistilledViT, LiSAViT

pytestmark = pytest.mark.usefixtures('seed_and_one_thread')


@dataclass(frozen=True)
class Backbone:
    """One row: a small model of the backbone and what the shared tests expect of it."""

    name: str
    cls: type[base.LiSABackbone]
    kwargs: dict                  # small constructor arguments (every stage / layer returned)
    size: tuple[int, int]         # input H, W the model runs at
    num_stages: int               # what out_indices and frozen_stages count (stages, or ViT's layers)
    unit: str                     # how its messages call them
    num_blocks: int               # TransformerBlocks, in forward order: checkpointed ones, drop-path steps
    channels: tuple[int, ...]     # of each stage's output
    strides: tuple[int, ...]      # of each stage's output
    frozen: Callable[[nn.Module, int], list]  # the modules and parameters frozen_stages=k (k >= 0) freezes
    dense_new: tuple[str, ...] = ()  # tensors a backbone returning every stage has beyond a classifier's
    rejects: dict[str, str] = field(default_factory=dict)  # attention types it cannot hold: the error says why

    def build(self, **kwargs) -> base.LiSABackbone:
        return self.cls(**{**self.kwargs, **kwargs})


def pvt_frozen(model, k):
    # 0: the first patch embedding and position embedding; k: also the stages 1..k
    return [model.stages[0].patch_embed, model.stages[0].pos_embed, *model.stages[:k]]


def swin_frozen(model, k):
    # 0: the patch embedding (and the dropout after it); k: also the stages 1..k and their output norms
    return [model.patch_embed, model.drop_after_pos, *model.stages[:k], *(getattr(model, f'norm{i}') for i in range(k))]


def biformer_frozen(model, k):
    # 0: the convolutional stem; k: also the downsampling layers, stages 1..k and their output norms
    return [model.downsample_layers[0], *(m for i in range(k)
                                         for m in (model.downsample_layers[i], model.stages[i],
                                                   getattr(model, f'norm{i}')))]


def vit_frozen(model, k):
    # 0: the embeddings (patch, position, class token, dropout after them); k: also the layers 1..k
    return [model.patch_embed, model.pos_embed, model.drop_after_pos, model.cls_token, *model.layers[:k]]


def distilled_vit_frozen(model, k):
    # as ViT's, the distillation token with the embeddings
    return [*vit_frozen(model, k), model.dist_token]


PYRAMID = (4, 8, 16, 32)
OUTPUT_NORMS = tuple(f'norm{i}.{t}' for i in range(3) for t in ('weight', 'bias'))  # stages 1-3 (a classifier: 4 only)

BACKBONES = [
    Backbone('pvt', LiSAPVT,
             dict(arch=dict(embed_dims=[8, 16, 24, 32], depths=[2, 1, 2, 1], num_heads=[1, 2, 3, 4],
                            mlp_ratios=[2, 2, 2, 2]),
                  pretrain_img_size=64),
             size=(64, 64), num_stages=4, unit='stage', num_blocks=6, channels=(8, 16, 24, 32), strides=PYRAMID,
             frozen=pvt_frozen),
    Backbone('swin', LiSASwinTransformer,
             dict(arch=dict(embed_dims=8, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4]),
                  attn_cfgs=[dict(type='lisa')] * 2 + [dict(type='window', window_size=4)] * 2,
                  pretrain_img_size=64),
             size=(64, 64), num_stages=4, unit='stage', num_blocks=8, channels=(8, 16, 32, 64), strides=PYRAMID,
             frozen=swin_frozen, dense_new=OUTPUT_NORMS),
    Backbone('biformer', LiSABiFormer,
             dict(arch=dict(embed_dims=[16, 32, 48, 64], depths=[1, 1, 2, 1], num_heads=[2, 2, 3, 8],
                            mlp_ratios=[3, 3, 3, 3]),
                  attn_cfgs=[*(dict(type='bra', n_win=3, topk=k) for k in (1, 4, 5)),  # 3 x 3 regions: top-k <= 9
                             dict(type='lepe', qkv_bias=False)]),
             size=(48, 48), num_stages=4, unit='stage', num_blocks=5, channels=(16, 32, 48, 64), strides=PYRAMID,
             frozen=biformer_frozen, dense_new=OUTPUT_NORMS),
    Backbone('vit', LiSAViT,
             dict(arch=dict(embed_dims=32, num_layers=4, num_heads=2, feedforward_channels=64),
                  pretrain_img_size=32, patch_size=8, out_indices=(0, 1, 2, 3), out_type='featmap'),
             size=(32, 32), num_stages=4, unit='layer', num_blocks=4, channels=(32,) * 4, strides=(8,) * 4,
             frozen=vit_frozen,  # the class token is a prefix token, off the grid, which these cannot hold:
             rejects=dict(bra='need every token on the grid', lepe='need every token on the grid',
                          window='covers grid tokens only')),
    Backbone('deit-distilled', LiSADistilledViT,
             dict(arch=dict(embed_dims=32, num_layers=4, num_heads=2, feedforward_channels=64),
                  pretrain_img_size=32, patch_size=8, out_indices=(0, 1, 2, 3), out_type='featmap'),
             size=(32, 32), num_stages=4, unit='layer', num_blocks=4, channels=(32,) * 4, strides=(8,) * 4,
             frozen=distilled_vit_frozen,  # class and distillation tokens are prefix tokens, off the grid
             rejects=dict(bra='need every token on the grid', lepe='need every token on the grid',
                          window='covers grid tokens only')),
]


def backbones(fast=None):
    """Parametrize over every row; rows not named in ``fast`` (default: every row) carry the slow marker.

    ``fast`` keeps the fast subset (``-m 'not slow'``) small: there a costly test runs on one or two
    backbones, and a test that only builds models on every one.
    """
    return pytest.mark.parametrize('bb', [
        pytest.param(b, id=b.name, marks=[] if fast is None or b.name in fast else [pytest.mark.slow])
        for b in BACKBONES])


def blocks(model):
    return [m for m in model.modules() if isinstance(m, block_parts.TransformerBlock)]


def leaves(module):
    return [m for m in module.modules() if not any(True for _ in m.children())]


def randomise(model: nn.Module) -> nn.Module:
    """Every parameter and BatchNorm statistic moved off its initial value."""
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
        for name, b in model.named_buffers():
            if name.endswith('running_mean'):
                b.normal_(0, 0.2)
            elif name.endswith('running_var'):
                b.uniform_(0.5, 1.5)
    return model


def assert_same_outputs(ours: nn.Module, reference: nn.Module, x: torch.Tensor, rtol=1e-4, atol=1e-5) -> None:
    """Output by output (as many of them), ``ours`` computes on ``x`` what ``reference`` computes."""
    with torch.no_grad():
        for a, b in zip(ours(x), reference(x), strict=True):
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


def test_every_backbone_has_a_row():
    assert {b.cls for b in BACKBONES} == {m for m in vars(projects.lisa.models.backbones).values()
                                          if isinstance(m, type) and issubclass(m, base.LiSABackbone)
                                          and m is not base.LiSABackbone}


# ---------------------------------------------------------------- blocks and attentions


ATTENTION_CLASSES = dict(angular=AngularAttention, bra=BiLevelRoutingAttention, flatten=FocusedLinearAttention,
                         lepe=LePEAttention, linear=LinearAttention, lisa=LiSAAttention, softmax=SoftmaxAttention,
                         window=ShiftedWindowAttention)
SMALL_INPUT_CFGS = dict(window=dict(window_size=4), bra=dict(n_win=2, topk=2))  # for the 2 x 2 grid of stage 4


@pytest.mark.parametrize('name', sorted(ATTENTIONS))  # every registered type
@backbones(fast=('biformer',))
def test_every_attention_runs_in_every_stage(bb, name):
    cfg = dict(type=name, **SMALL_INPUT_CFGS.get(name, {}))
    if name in bb.rejects:
        with pytest.raises(ValueError, match=f'block 0: attention .*{bb.rejects[name]}'):
            bb.build(attn_cfgs=cfg)
        return
    model = bb.build(attn_cfgs=cfg)
    assert all(type(b.attn) is ATTENTION_CLASSES[name] for b in blocks(model))
    x = torch.randn(1, 3, *bb.size, requires_grad=True)
    outs = model(x)
    sum(o.square().mean() for o in outs).backward()
    assert [tuple(o.shape) for o in outs] == [(1, c, -(-bb.size[0] // s), -(-bb.size[1] // s))  # ceil: padded
                                              for c, s in zip(bb.channels, bb.strides)]
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n


@backbones()
def test_outputs_are_contiguous_nchw_maps_of_the_stage_channels_and_strides(bb):
    """Downstream kernels that read raw memory (mmcv's RoIAlign in Mask R-CNN, open-mmlab/mmcv#2203)
    take their input as contiguous NCHW: a channels-last view of the tokens gives the Table 4 box and
    mask heads scrambled RoI features whenever a batch holds two or more images."""
    model = bb.build().eval()
    with torch.no_grad():
        outs = model(torch.randn(2, 3, *bb.size))
    assert [tuple(o.shape) for o in outs] == [(2, c, -(-bb.size[0] // s), -(-bb.size[1] // s))
                                              for c, s in zip(bb.channels, bb.strides)]
    assert all(o.is_contiguous() for o in outs), [o.stride() for o in outs]


@backbones()  # builds only
def test_stochastic_depth_rises_linearly_over_the_blocks(bb):
    found = blocks(bb.build(drop_path_rate=0.3))
    assert len(found) == bb.num_blocks
    rates = [b.drop_path.drop_prob for b in found]
    assert rates == pytest.approx(torch.linspace(0, 0.3, bb.num_blocks).tolist())
    assert [b.ffn.dropout_layer.drop_prob for b in found] == rates  # the FFN's residual branch too


@backbones(fast=('biformer',))
def test_with_cp_gives_the_same_outputs_and_gradients_in_train_mode(bb, monkeypatch):
    calls = []
    checkpoint = block_parts.checkpoint
    monkeypatch.setattr(block_parts, 'checkpoint', lambda *a, **k: calls.append(1) or checkpoint(*a, **k))
    kwargs = dict(drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.3)
    plain, cp = bb.build(**kwargs).train(), bb.build(with_cp=True, **kwargs).train()
    cp.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, *bb.size)
    results = []
    for model in (plain, cp):
        torch.manual_seed(1)
        outs = model(x)
        sum((o * torch.linspace(-1, 1, o.shape[-1])).sum() for o in outs).backward()
        results.append((outs, {n: p.grad for n, p in model.named_parameters()}))
    assert len(calls) == bb.num_blocks  # one per block, only in the with_cp run
    (outs0, grads0), (outs1, grads1) = results
    assert len(outs0) == len(outs1) == bb.num_stages
    for a, b in zip(outs0, outs1):
        torch.testing.assert_close(b, a, rtol=0, atol=0)  # the same forward, dropout masks included
    assert grads0.keys() == grads1.keys()
    for name in grads0:
        torch.testing.assert_close(grads1[name], grads0[name], rtol=1e-6, atol=1e-7, msg=name)


# ---------------------------------------------------------------- frozen_stages


@pytest.mark.parametrize('frozen_stages', [0, 2])
@backbones(fast=('biformer', 'vit'))
def test_frozen_stages_get_no_gradient_stay_in_eval_mode_and_do_not_change(bb, frozen_stages):
    model = bb.build(drop_rate=0.1, frozen_stages=frozen_stages)
    model.init_weights()
    model.train()
    frozen = bb.frozen(model, frozen_stages)
    frozen_modules = [f for f in frozen if isinstance(f, nn.Module)]
    frozen_params = {id(p) for f in frozen for p in ([f] if isinstance(f, nn.Parameter) else f.parameters())}
    frozen_leaves = {id(m) for f in frozen_modules for m in leaves(f)}
    for m in leaves(model):  # dropout and BatchNorm off in the frozen part only
        assert m.training == (id(m) not in frozen_leaves), m
    before = copy.deepcopy(model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    sum(o.square().mean() for o in model(torch.randn(2, 3, *bb.size))).backward()
    opt.step()
    after = model.state_dict()
    for name, p in model.named_parameters():
        if id(p) in frozen_params:
            assert not p.requires_grad and p.grad is None and torch.equal(before[name], after[name]), name
        else:  # trained (LiSA's step MLP starts with zero gradient in its first layer: grad, not change)
            assert p.requires_grad and p.grad is not None, name
    frozen_buffers = [f'{prefix}.{name}' for prefix, m in model.named_modules() if id(m) in frozen_leaves
                      for name, _ in m.named_buffers(recurse=False) if f'{prefix}.{name}' in before]
    for name in frozen_buffers:  # frozen BatchNorm statistics do not move either
        assert torch.equal(before[name], after[name]), name
    last = next(n for n, p in model.named_parameters() if p is blocks(model)[-1].attn.qkv.weight)
    assert not torch.equal(before[last], after[last])


@backbones(fast=('vit',))
def test_frozen_stages_minus_1_freezes_nothing_and_the_number_of_stages_freezes_everything(bb):
    free = bb.build(frozen_stages=-1).train()
    assert all(p.requires_grad for p in free.parameters())
    assert all(m.training for m in free.modules())
    every = bb.build(frozen_stages=bb.num_stages).train()
    assert not any(p.requires_grad for p in every.parameters())
    assert not any(m.training for m in leaves(every))  # the final norms too


# ---------------------------------------------------------------- registries and checkpoints


@pytest.mark.parametrize('scope', ['mmseg', 'mmdet', 'mmpretrain'])
@backbones()  # builds only
def test_builds_by_type_name_from_each_registry(bb, scope):
    registry = importlib.import_module(f'{scope}.registry').MODELS
    assert registry.get(bb.cls.__name__) is bb.cls
    model = registry.build(dict(type=bb.cls.__name__, **{**bb.kwargs, 'out_indices': (1, 3)}))
    assert type(model) is bb.cls and model.out_indices == (1, 3)


def classifier_checkpoint(bb: Backbone, path) -> dict:
    """An mmpretrain ImageClassifier on the last stage of ``bb``, random, saved at ``path`` as a
    training checkpoint; its backbone's state dict."""
    import mmpretrain.models  # noqa: F401  (registers ImageClassifier)
    from mmpretrain.registry import MODELS
    backbone = dict(type=bb.cls.__name__, **{**bb.kwargs, 'out_indices': (bb.num_stages - 1,)})
    classifier = randomise(MODELS.build(dict(
        type='ImageClassifier', backbone=backbone, neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=5, in_channels=bb.channels[-1]))))
    torch.save({'state_dict': classifier.state_dict(), 'meta': {'epoch': 1}}, path)
    return classifier.backbone.state_dict()


@backbones(fast=('pvt', 'swin'))
def test_mmpretrain_classifier_checkpoint_loads_back_exactly_with_the_backbone_prefix(bb, tmp_path, mmpretrain_scope):
    source = classifier_checkpoint(bb, tmp_path / 'cls.pth')
    last = (bb.num_stages - 1,)
    model = bb.build(out_indices=last, init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'cls.pth'),
                                                      prefix='backbone.'))
    model.init_weights()
    assert model.state_dict().keys() == source.keys()
    for key, value in source.items():
        assert torch.equal(model.state_dict()[key], value), key
    report = load_pretrained(bb.build(out_indices=last), str(tmp_path / 'cls.pth'), 'backbone.')
    assert not (report.missing or report.new or report.unexpected or report.converted)
    assert len(report.loaded) == len(source)


@backbones(fast=('biformer',))
def test_a_dense_backbone_takes_every_classifier_tensor_and_only_its_output_norms_must_be_allowed_new(
        bb, tmp_path, mmpretrain_scope):
    source = classifier_checkpoint(bb, tmp_path / 'cls.pth')
    init_cfg = dict(type='Pretrained', checkpoint=str(tmp_path / 'cls.pth'), prefix='backbone.')
    if bb.dense_new:  # the norms of the outputs of stages 1-3, which a classifier does not have
        missing = rf'NOT IN THE CHECKPOINT \({len(bb.dense_new)}\): ' + re.escape(', '.join(bb.dense_new))
        with pytest.raises(IncompleteCheckpointError, match=missing):
            bb.build(init_cfg=init_cfg).init_weights()
    dense = bb.build(init_cfg={**init_cfg, 'allow_new': list(bb.dense_new)})  # every stage returned
    dense.init_weights()
    assert dense.state_dict().keys() - source.keys() == set(bb.dense_new)
    assert source.keys() <= dense.state_dict().keys()
    for key, value in source.items():
        assert torch.equal(dense.state_dict()[key], value), key


@backbones(fast=('vit',))
def test_pretrained_init_cfg_loads_the_backbones_own_state_dict_exactly(bb, tmp_path):
    source = randomise(bb.build())
    torch.save(source.state_dict(), tmp_path / 'own.pth')
    model = bb.build(init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'own.pth')))
    model.init_weights()
    assert model.state_dict().keys() == source.state_dict().keys()
    for name, value in source.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name


def test_a_layer_wide_init_cfg_keeps_the_attentions_own_initialisation():
    """An mmengine init_cfg over every Linear (the long-range probe's Kaiming) overwrote LiSA's
    step-MLP bias with 0: the walk then started from uniform step weights, not the geometric ones."""
    model = LiSAViT(arch=dict(embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=64),
                    attn_cfgs=dict(type='lisa', num_steps=3, beta=0.5), pretrain_img_size=32, patch_size=8,
                    init_cfg=[dict(type='Kaiming', layer='Linear', distribution='uniform')])
    model.init_weights()
    attn = model.layers[0].attn
    weights = 0.5 ** torch.arange(3.0)  # beta_k = (1 - beta) beta^k / (1 - beta^T), Eq. 4
    torch.testing.assert_close(attn.step_mlp[-1].bias.softmax(0), weights / weights.sum())
    assert attn.qkv.weight.abs().max() > 0.1  # the Kaiming init did reach the other Linear layers


@backbones(fast=('pvt',))
def test_a_prefix_absent_from_the_checkpoint_is_an_error(bb, tmp_path):
    torch.save(bb.build().state_dict(), tmp_path / 'bare.pth')
    model = bb.build(init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'bare.pth'), prefix='backbone.'))
    with pytest.raises(KeyError, match="prefix 'backbone.'"):
        model.init_weights()


# ---------------------------------------------------------------- configuration errors (the base class's rules)


# id: n (number of stages or layers), unit -> (constructor arguments, message)
STAGE_ARGUMENT_ERRORS = {
    'arch-keys': lambda n, unit: (dict(arch=dict(embed_dims=8)), 'custom arch must be a dict with exactly the keys'),
    'attn_cfgs-count': lambda n, unit: (dict(attn_cfgs=[dict(type='lisa')] * (n - 1)),
                                        rf'attn_cfgs has {n - 1} entries; .* per {unit} \({n}\)'),
    'attn_cfgs-type': lambda n, unit: (dict(attn_cfgs=dict(type='performer')),  # lists every registered type
                                       r"attn_cfgs\[0\]=\{'type': 'performer'\}: unknown attention type 'performer'; "
                                       r'registered types: '
                                       + re.escape(str(sorted(ATTENTIONS)))),
    'out_indices-int': lambda n, unit: (dict(out_indices=n),
                                        rf'out_indices={n} must be .* distinct {unit} indices in \[-{n}, {n}\)'),
    'out_indices-range': lambda n, unit: (dict(out_indices=(0, n)),
                                          rf'out_indices=\(0, {n}\) must be .* distinct {unit} indices in '
                                          rf'\[-{n}, {n}\)'),
    'out_indices-repeated': lambda n, unit: (dict(out_indices=(1, 1 - n)),
                                             rf'out_indices=\(1, {1 - n}\) must be an int or a list of distinct '
                                             rf'{unit} indices'),
    'out_indices-empty': lambda n, unit: (dict(out_indices=()), r'out_indices=\(\) must be'),
    'out_indices-dict': lambda n, unit: (dict(out_indices={1: 1}), r'out_indices=\{1: 1\} must be an int or a list'),
    'frozen_stages-above': lambda n, unit: (dict(frozen_stages=n + 1),
                                            rf'frozen_stages={n + 1} must be in \[-1, {n}\]'),
    'frozen_stages-below': lambda n, unit: (dict(frozen_stages=-2), rf'frozen_stages=-2 must be in \[-1, {n}\]'),
    'pretrain_img_size-one': lambda n, unit: (dict(pretrain_img_size=(64,)),
                                              r'pretrain_img_size=\(64,\) must be a positive int or a pair'),
    'pretrain_img_size-three': lambda n, unit: (dict(pretrain_img_size=(64, 64, 64)),
                                                r'pretrain_img_size=\(64, 64, 64\) must be a positive int or a pair'),
}


@pytest.mark.parametrize('case', STAGE_ARGUMENT_ERRORS)
@backbones()  # builds only
def test_bad_stage_arguments_are_rejected_naming_the_value(bb, case):
    kwargs, match = STAGE_ARGUMENT_ERRORS[case](bb.num_stages, bb.unit)
    with pytest.raises(ValueError, match=match):
        bb.build(**kwargs)


def test_stage_drop_path_rates_rise_linearly_over_all_blocks_split_per_stage():
    # linspace(0, 0.3, 4) = 0, 0.1, 0.2, 0.3 over blocks 0..3; stages of 1, 2 and 1 blocks
    rates = block_parts.stage_drop_path_rates(0.3, [1, 2, 1])
    assert [len(r) for r in rates] == [1, 2, 1]
    torch.testing.assert_close(torch.tensor([r for stage in rates for r in stage]), torch.tensor([0.0, 0.1, 0.2, 0.3]))


@pytest.mark.parametrize('backbone', [LiSAPVT, LiSASwinTransformer, LiSABiFormer], ids=['pvt', 'swin', 'biformer'])
def test_each_staged_backbone_gives_block_b_the_drop_path_rate_b_over_all_blocks(backbone):
    """PVT, Swin and BiFormer build their stages' stochastic depth through one helper: both residual
    branches of block b (over all stages, in order) drop with rate * b / (blocks - 1)."""
    m = backbone(arch='tiny', pretrain_img_size=64, drop_path_rate=0.3)
    blocks = [mod for mod in m.modules() if isinstance(mod, block_parts.TransformerBlock)]
    depths = {LiSAPVT: [2, 2, 2, 2], LiSASwinTransformer: [2, 2, 6, 2], LiSABiFormer: [2, 2, 8, 2]}[backbone]
    assert len(blocks) == sum(depths)
    expected = [0.3 * b / (len(blocks) - 1) for b in range(len(blocks))]
    got = [[d.drop_prob for d in blk.modules() if type(d).__name__ == 'DropPath'] for blk in blocks]
    assert all(len(g) == 2 for g in got)  # attention branch and FFN branch
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected).unsqueeze(1).expand(-1, 2))
