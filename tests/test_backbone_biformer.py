"""LiSABiFormer: with BRA it is BiFormer (parameters, official checkpoints, outputs); LiSA per stage.

References: BiFormer's architecture written out as a parameter count and as a functional forward
that reads an official-layout state dict (official key names; attention by the explicit masked
n x n references of ``test_attention_bra``), the official code's published figures
(13.1M / 25.5M / 56.8M parameters, 2.2G / 4.5G / 9.8G FLOPs) and the mm registries.
What every LiSA backbone does (test_backbone_common) is not repeated here.
"""
from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from test_attention_bra import bra_reference, lepe_reference
from test_backbone_common import randomise

import projects.lisa.registry  # noqa: F401  (registers the backbones)
from projects.lisa.models.attention import BiLevelRoutingAttention, LePEAttention, LiSAAttention
from projects.lisa.models.backbones.biformer import (
    BRA_ATTN_CFGS,
    LISA_ATTN_CFGS,
    LiSABiFormer,
    convert_biformer_checkpoint,
)
from projects.lisa.models.backbones.loading import load_pretrained

ROOT = Path(__file__).resolve().parents[1]
# a small BiFormer-like arch for exact checks (3 x 3 regions: topk up to 9)
SMALL = dict(embed_dims=[16, 32, 48, 64], depths=[1, 1, 2, 1], num_heads=[2, 2, 3, 8], mlp_ratios=[3, 3, 3, 3])
SMALL_BRA = [dict(type='bra', n_win=3, topk=k) for k in (1, 4, 5)] + [dict(type='lepe', qkv_bias=False)]
OFFICIAL = {  # the official presets (models/biformer.py): depths, dims, top-k per stage; heads = dim / 32, 8 in stage 4
    'tiny': ([2, 2, 8, 2], [64, 128, 256, 512]),
    'small': ([4, 4, 18, 4], [64, 128, 256, 512]),
    'base': ([4, 4, 18, 4], [96, 192, 384, 768]),
}
PUBLISHED = {'tiny': (13.1, 2.2), 'small': (25.5, 4.5), 'base': (56.8, 9.8)}  # M params, GFLOPs at 224


def official_parameter_count(depths: list[int], dims: list[int], num_classes: int = 1000) -> int:
    """BiFormer's parameters, module by module of the official code, with the classification head."""
    c0 = dims[0]
    count = (27 * c0 // 2 + c0 // 2) + c0 + (9 * c0 // 2 * c0 + c0) + 2 * c0          # stem: conv, BN, conv, BN
    count += sum(9 * a * b + b + 2 * b for a, b in zip(dims, dims[1:]))                 # downsampling conv + BN
    for i, (depth, c) in enumerate(zip(depths, dims)):
        block = 10 * c + 2 * c + 2 * c + (3 * c * c + 3 * c + 3 * c * c + c)             # pos conv, 2 LN, MLP x3
        if i < 3:   # BRA: qkv (qk = dim) with bias, LCE 5x5, wo
            block += (3 * c * c + 3 * c) + (25 * c + c) + (c * c + c)
        else:       # AttentionLePE: qkv without bias, lepe 5x5, proj
            block += 3 * c * c + (25 * c + c) + (c * c + c)
        count += depth * block
    return count + 2 * dims[-1] + dims[-1] * num_classes + num_classes                    # final BN, head


def to_official(state: dict[str, torch.Tensor], num_stages: int, head: torch.nn.Linear) -> dict[str, torch.Tensor]:
    """Our state dict in the official checkpoint layout (the inverse of the converter, written independently)."""
    out = {}
    for key, value in state.items():
        if m := re.fullmatch(r'(stages\.(\d+)\.\d+\.)(.+)', key):
            prefix, stage, rest = m[1], int(m[2]), m[3]
            rest = rest.replace('ffn.layers.0.0.', 'mlp.0.').replace('ffn.layers.1.', 'mlp.3.')
            if stage < num_stages - 1:
                rest = (rest.replace('attn.qkv.', 'attn.qkv.qkv.').replace('attn.proj.', 'attn.wo.')
                        .replace('attn.lce.', 'attn.lepe.'))
            key = prefix + rest
        out[key] = value
    out['head.weight'], out['head.bias'] = head.weight, head.bias
    return out


def official_forward(sd: dict[str, torch.Tensor], x: torch.Tensor, depths: list[int], heads: list[int],
                     n_win: int, topks: list[int]) -> torch.Tensor:
    """BiFormer's classifier (official ``BiFormer.forward``, ``auto_pad``) read from official keys."""
    def bn(t, p):
        return F.batch_norm(t, sd[p + 'running_mean'], sd[p + 'running_var'], sd[p + 'weight'], sd[p + 'bias'])

    def linear(p):
        return SimpleNamespace(weight=sd[p + 'weight'], bias=sd.get(p + 'bias'))

    def conv(p):
        return SimpleNamespace(weight=sd[p + 'weight'], bias=sd[p + 'bias'], padding=sd[p + 'weight'].shape[-1] // 2)

    x = bn(F.conv2d(x, sd['downsample_layers.0.0.weight'], sd['downsample_layers.0.0.bias'], 2, 1),
           'downsample_layers.0.1.')
    x = bn(F.conv2d(F.gelu(x), sd['downsample_layers.0.3.weight'], sd['downsample_layers.0.3.bias'], 2, 1),
           'downsample_layers.0.4.')
    for i, depth in enumerate(depths):
        if i:
            p = f'downsample_layers.{i}.'
            x = bn(F.conv2d(x, sd[p + '0.weight'], sd[p + '0.bias'], 2, 1), p + '1.')
        for j in range(depth):
            p = f'stages.{i}.{j}.'
            c = x.shape[1]
            x = x + F.conv2d(x, sd[p + 'pos_embed.weight'], sd[p + 'pos_embed.bias'], padding=1, groups=c)
            hw = x.shape[2:]
            t = x.flatten(2).transpose(1, 2)
            a = F.layer_norm(t, (c, ), sd[p + 'norm1.weight'], sd[p + 'norm1.bias'], 1e-6)
            if i < len(depths) - 1:
                attn = SimpleNamespace(n_win=n_win, num_heads=heads[i], qk_dim=c, topk=topks[i], scale=c ** -0.5,
                                       qkv=linear(p + 'attn.qkv.qkv.'), lce=conv(p + 'attn.lepe.'),
                                       proj=linear(p + 'attn.wo.'))
                t = t + bra_reference(attn, a, tuple(hw))[0]
            else:
                attn = SimpleNamespace(num_heads=heads[i], qkv=linear(p + 'attn.qkv.'), lepe=conv(p + 'attn.lepe.'),
                                       proj=linear(p + 'attn.proj.'))
                t = t + lepe_reference(attn, a, tuple(hw))
            m = F.layer_norm(t, (c, ), sd[p + 'norm2.weight'], sd[p + 'norm2.bias'], 1e-6)
            t = t + F.linear(F.gelu(F.linear(m, sd[p + 'mlp.0.weight'], sd[p + 'mlp.0.bias'])),
                             sd[p + 'mlp.3.weight'], sd[p + 'mlp.3.bias'])
            x = t.transpose(1, 2).reshape(x.shape)
    return F.linear(bn(x, 'norm.').flatten(2).mean(-1), sd['head.weight'], sd['head.bias'])


def classifier(arch, attn_cfgs, num_classes: int = 1000, **kwargs) -> torch.nn.Module:
    """An mmpretrain ImageClassifier on LiSABiFormer (callers take the `mmpretrain_scope` fixture)."""
    import mmpretrain.models  # noqa: F401  (registers ImageClassifier)
    from mmpretrain.registry import MODELS
    backbone = dict(type='LiSABiFormer', arch=arch, attn_cfgs=attn_cfgs, out_indices=(3, ), **kwargs)
    dims = LiSABiFormer.arch_zoo[arch]['embed_dims'] if isinstance(arch, str) else arch['embed_dims']
    return MODELS.build(dict(type='ImageClassifier', backbone=backbone, neck=dict(type='GlobalAveragePooling'),
                             head=dict(type='LinearClsHead', num_classes=num_classes, in_channels=dims[-1])))


def check_outputs_equal_biformers(arch, official_arch, size, n_win, topks, tmp_path):
    attn_cfgs = [dict(type='bra', n_win=n_win, topk=k) for k in topks] + [dict(type='lepe', qkv_bias=False)]
    ours = randomise(classifier(arch, attn_cfgs, num_classes=7).double().eval())  # float64
    depths, dims, heads = official_arch
    official = to_official(ours.backbone.state_dict(), 4, ours.head.fc)
    torch.save({'model': official}, tmp_path / 'biformer.pth')

    loaded = classifier(arch, attn_cfgs, num_classes=7, init_cfg=dict(type='Pretrained',
                                                                      checkpoint=str(tmp_path / 'biformer.pth')))
    loaded.double().backbone.init_weights()
    report = load_pretrained(copy.deepcopy(loaded.backbone), str(tmp_path / 'biformer.pth'))
    # every tensor of the model, nothing but the head left over
    assert report.converted and not (report.new or report.missing or report.mismatched or report.unexpected)
    assert len(report.loaded) == len(loaded.backbone.state_dict())
    loaded.head.fc.load_state_dict(ours.head.fc.state_dict())
    loaded.eval()
    x = torch.randn(2, 3, *size, dtype=torch.float64)
    with torch.no_grad():
        expected = official_forward(official, x, depths, heads, n_win, topks)
        torch.testing.assert_close(loaded(x, mode='tensor'), expected, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(ours(x, mode='tensor'), expected, rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------- BiFormer


@pytest.mark.parametrize('arch', ['tiny', 'small', 'base'])
def test_with_bra_the_classifier_has_biformers_parameters(arch, mmpretrain_scope):
    depths, dims = OFFICIAL[arch]
    model = classifier(arch, BRA_ATTN_CFGS)
    count = sum(p.numel() for p in model.parameters())
    assert count == official_parameter_count(depths, dims)
    assert round(count / 1e6, 1) == PUBLISHED[arch][0]
    assert LiSABiFormer.arch_zoo[arch]['num_heads'] == [d // 32 for d in dims[:3]] + [8]


def test_official_checkpoint_loads_completely_and_gives_biformers_outputs_at_any_size(seed_and_one_thread, tmp_path,
                                                                                       mmpretrain_scope):
    # 50 x 38: stage grids 13 x 10, 7 x 5, 4 x 3, 2 x 2 -- none a multiple of the 3 x 3 regions
    check_outputs_equal_biformers(SMALL, ([1, 1, 2, 1], SMALL['embed_dims'], SMALL['num_heads']), (50, 38), 3,
                                  (1, 4, 5), tmp_path)


@pytest.mark.slow
def test_official_biformer_t_checkpoint_gives_its_outputs_at_224(seed_and_one_thread, tmp_path, mmpretrain_scope):
    depths, dims = OFFICIAL['tiny']
    check_outputs_equal_biformers('tiny', (depths, dims, [2, 4, 8, 8]), (224, 224), 7, (1, 4, 16), tmp_path)


def test_converter_leaves_our_own_state_dicts_unchanged():
    state = LiSABiFormer(arch=SMALL, attn_cfgs=SMALL_BRA).state_dict()
    assert convert_biformer_checkpoint(state).keys() == state.keys()


@pytest.mark.slow
@pytest.mark.parametrize('arch', ['tiny', 'small', 'base'])
def test_bra_configs_count_biformers_published_flops_at_224(arch):
    from projects.lisa.benchmarks.flops import config_complexity
    result = config_complexity(ROOT / f'configs/classification/biformer-{arch}_bra_8xb128_in1k.py')
    assert result.input_hw == (224, 224)
    assert (round(result.params / 1e6, 1), round(result.flops / 1e9, 1)) == PUBLISHED[arch]


# ---------------------------------------------------------------- attention per stage


def test_default_is_lisa_in_stages_1_to_3_and_biformers_global_attention_in_stage_4():
    model = LiSABiFormer(arch='tiny')
    assert [type(s[0].attn) for s in model.stages] == [LiSAAttention] * 3 + [LePEAttention]
    assert all(s[0].attn.positional_encoding is None and s[0].attn.num_steps == 3 for s in model.stages[:3])
    assert LISA_ATTN_CFGS[3] == BRA_ATTN_CFGS[3]


def test_bra_stages_take_their_regions_and_topk():
    model = LiSABiFormer(arch='tiny', attn_cfgs=BRA_ATTN_CFGS)
    assert [type(s[0].attn) for s in model.stages] == [BiLevelRoutingAttention] * 3 + [LePEAttention]
    assert [(s[0].attn.n_win, s[0].attn.topk) for s in model.stages[:3]] == [(7, 1), (7, 4), (7, 16)]
    assert [len(s) for s in model.stages] == [2, 2, 8, 2]


@pytest.mark.parametrize('size', [(64, 64), (45, 71)])
def test_stage_i_has_ceil_of_size_over_its_stride_and_the_chosen_outputs(size):
    model = LiSABiFormer(arch=SMALL, attn_cfgs=SMALL_BRA, out_indices=(0, 2, 3)).eval()
    outs = model(torch.randn(1, 3, *size))
    strides = (4, 16, 32)
    assert [tuple(o.shape[1:]) for o in outs] == [
        (c, -(-size[0] // s), -(-size[1] // s)) for c, s in zip((16, 48, 64), strides)]
    # outputs of stages 1-3 are LayerNorm'd over channels, the last stage goes through the final BatchNorm
    assert isinstance(model.norm0, torch.nn.LayerNorm) and isinstance(model.norm, torch.nn.BatchNorm2d)
    assert not hasattr(model, 'norm1') and not hasattr(model, 'norm3')
    torch.testing.assert_close(outs[0].mean(1), torch.zeros_like(outs[0][:, 0]), atol=1e-5, rtol=0)


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(arch='huge'), ValueError, r"arch='huge' is not one of \['b', 'base', 's', 'small', 't', 'tiny'\]"),
    (dict(attn_cfgs=dict(type='bra', topk=50)), ValueError, r'stage 0, block 0: attention .*topk=50 must be in \[1,'),
])
def test_bad_configurations_are_rejected_with_a_clear_message(kwargs, error, match):
    with pytest.raises(error, match=match):
        LiSABiFormer(**{'arch': SMALL, **kwargs})


# ---------------------------------------------------------------- configs (Table 2)

CLS, SEG = ROOT / 'configs' / 'classification', ROOT / 'configs' / 'segmentation'
TABLE_2 = {f'biformer-{size}_{row}_8xb128_in1k.py': (size, row) for size in ('tiny', 'small', 'base')
           for row in ('bra', 'lisa')}
SEG_ROWS = {'fpn_biformer-s_8xb4-80k_ade20k-512x512.py': 'bra',
            'fpn_lisa-biformer-s_8xb4-80k_ade20k-512x512.py': 'lisa'}
DROP_PATH = {'tiny': 0.1, 'small': 0.15, 'base': 0.4}
ROW_CFGS = {'bra': BRA_ATTN_CFGS, 'lisa': LISA_ATTN_CFGS}


@functools.cache
def _load(path: Path):
    from mmengine.config import Config
    return Config.fromfile(str(path))


def load(path: Path):
    """The resolved config (parsed once per session; each caller gets its own copy)."""
    return copy.deepcopy(_load(path))


def changed_paths(a, b) -> set[str]:
    def flat(tree, prefix=''):
        if isinstance(tree, dict):
            return {k: v for key, value in tree.items() if key != '_scope_'
                    for k, v in flat(value, f'{prefix}.{key}' if prefix else key).items()}
        return {prefix: tree}
    fa, fb = flat(a.to_dict()), flat(b.to_dict())
    return {k for k in fa.keys() | fb.keys() if fa.get(k, '<missing>') != fb.get(k, '<missing>')}


def test_every_table_2_config_exists():
    assert {p.name for p in CLS.glob('biformer-*.py')} == set(TABLE_2)
    assert {p.name for p in SEG.glob('fpn_*biformer*.py')} == set(SEG_ROWS)


@pytest.mark.parametrize('name', TABLE_2)
def test_classification_config_follows_biformers_recipe(name):
    size, row = TABLE_2[name]
    cfg = load(CLS / name)
    assert cfg.custom_imports.imports == ['projects.lisa.registry'] and cfg.default_scope == 'mmpretrain'
    backbone = cfg.model.backbone
    assert (backbone.type, backbone.arch, backbone.out_indices) == ('LiSABiFormer', size, (3, ))
    assert backbone.attn_cfgs == ROW_CFGS[row] and backbone.drop_path_rate == DROP_PATH[size]
    assert cfg.model.head.in_channels == LiSABiFormer.arch_zoo[size]['embed_dims'][-1]
    # 300 epochs of 8 x 128 images, AdamW lr 5e-4 x 1024 / 512, weight decay 0.05, no clipping
    assert cfg.train_cfg.max_epochs == 300 and cfg.train_dataloader.batch_size == 128
    assert cfg.auto_scale_lr.base_batch_size == 1024 and cfg.train_dataloader.sampler.type == 'RepeatAugSampler'
    opt = cfg.optim_wrapper.optimizer
    assert (opt.type, opt.lr, opt.weight_decay, opt.eps) == ('AdamW', 1e-3, 0.05, 1e-8)
    assert cfg.optim_wrapper.clip_grad is None
    assert cfg.optim_wrapper.paramwise_cfg.flat_decay_mult == 0.0  # timm: no decay on 1-D parameters
    warmup, cosine = cfg.param_scheduler
    assert (warmup.type, warmup.start_factor, warmup.end) == ('LinearLR', 1e-3, 5)
    assert (cosine.type, cosine.begin, cosine.eta_min) == ('CosineAnnealingLR', 5, 1e-5)
    assert [(a.type, a.alpha) for a in cfg.model.train_cfg.augments] == [('Mixup', 0.8), ('CutMix', 1.0)]
    assert cfg.model.head.loss.label_smooth_val == 0.1
    train = {t.type: t for t in cfg.train_dataloader.dataset.pipeline}
    ra = train['RandAugment']
    assert (ra.policies, ra.num_policies, ra.magnitude_level, ra.magnitude_std) == ('timm_increasing', 2, 9, 0.5)
    assert train['RandomErasing'].erase_prob == 0.25 and train['RandomResizedCrop'].scale == 224
    assert '://' not in cfg.pretty_text
    assert [h.type for h in cfg.custom_hooks] == ['SafeRuntimeHook', 'NonFiniteGuardHook']  # the project's runtime


@pytest.mark.parametrize('size', ['tiny', 'small', 'base'])
def test_lisa_and_bra_rows_differ_only_in_the_attention(size):
    lisa, bra = load(CLS / f'biformer-{size}_lisa_8xb128_in1k.py'), load(CLS / f'biformer-{size}_bra_8xb128_in1k.py')
    changed = changed_paths(lisa, bra)
    assert changed == {'model.backbone.attn_cfgs'}


@pytest.mark.parametrize('name', SEG_ROWS)
def test_segmentation_config_follows_biformers_semantic_fpn_recipe(name):
    cfg = load(SEG / name)
    assert cfg.custom_imports.imports == ['projects.lisa.registry'] and cfg.default_scope == 'mmseg'
    backbone = cfg.model.backbone
    # BiFormer segments at 512 px with 8 x 8 regions
    expected = [{**c, 'n_win': 8} if c['type'] == 'bra' else c for c in ROW_CFGS[SEG_ROWS[name]]]
    assert (backbone.type, backbone.arch, backbone.attn_cfgs, backbone.drop_path_rate) == (
        'LiSABiFormer', 'small', expected, 0.15)
    assert backbone.conv_norm_cfg.type == 'SyncBN' and backbone.init_cfg.prefix == 'backbone.'
    assert backbone.init_cfg.allow_new == ['norm0.*', 'norm1.*', 'norm2.*']  # the new output norms only
    assert backbone.init_cfg.checkpoint == cfg.pretrained and '://' not in cfg.pretty_text
    assert cfg.model.neck.in_channels == [64, 128, 256, 512] and cfg.model.decode_head.channels == 128
    assert cfg.model.decode_head.num_classes == 150 and cfg.crop_size == (512, 512)
    assert cfg.train_dataloader.batch_size == 4 and cfg.train_cfg.max_iters == 80000
    resize = [t for t in cfg.test_dataloader.dataset.pipeline if 'Resize' in t.type]
    assert resize == [dict(type='AlignResize', scale=(2048, 512), size_divisor=32)]  # sides to multiples of 32
    opt = cfg.optim_wrapper
    assert (opt.type, opt.loss_scale, opt.optimizer.type, opt.optimizer.lr, opt.optimizer.weight_decay) == (
        'AmpOptimWrapper', 512.0, 'AdamW', 2e-4, 1e-4)
    warmup, cosine = cfg.param_scheduler
    assert (warmup.type, warmup.start_factor, warmup.end, warmup.by_epoch) == ('LinearLR', 0.1, 1000, False)
    assert (cosine.type, cosine.eta_min_ratio, cosine.begin, cosine.end) == ('CosineAnnealingLR', 1e-8, 0, 80000)


def test_lisa_segmentation_config_differs_only_in_the_attention_and_its_weights():
    lisa, bra = (load(SEG / name) for name in SEG_ROWS)
    assert changed_paths(lisa, bra) == {'model.backbone.attn_cfgs', 'model.backbone.init_cfg.checkpoint',
                                        'pretrained'}


@pytest.mark.slow
@pytest.mark.parametrize('row', ['bra', 'lisa'])
def test_classifier_backbone_holds_every_tensor_of_the_dense_backbone_at_the_same_shape(row):
    from mmengine.registry import MODELS, init_default_scope
    init_default_scope('mmpretrain')
    source = MODELS.build(load(CLS / f'biformer-small_{row}_8xb128_in1k.py').model.backbone).state_dict()
    name = next(n for n, r in SEG_ROWS.items() if r == row)
    init_default_scope('mmseg')
    target = MODELS.build(load(SEG / name).model.backbone).state_dict()
    assert target.keys() - source.keys() == {f'norm{i}.{k}' for i in range(3) for k in ('weight', 'bias')}
    assert source.keys() <= target.keys() and all(target[k].shape == v.shape for k, v in source.items())


# ---------------------------------------------------------------- end to end on generated data (slow)


def train_in_process(cfg, work_dir: Path) -> None:
    """Train ``cfg`` with MMEngine's Runner, no validation, quietly."""
    from mmengine.runner import Runner
    cfg.work_dir, cfg.log_level = str(work_dir), 'WARNING'
    for split in ('val', 'test'):
        cfg[f'{split}_dataloader'] = cfg[f'{split}_cfg'] = cfg[f'{split}_evaluator'] = None
    Runner.from_cfg(cfg).train()


def classifier_on_generated_imagenet(name: str, data: Path, work_dir: Path) -> Path:
    """The Table 2 config trained one epoch of 8 generated 64-px images (2 iterations); its checkpoint."""
    cfg = load(CLS / name)
    sizes = dict(RandomResizedCrop=dict(scale=64), ResizeEdge=dict(scale=73), CenterCrop=dict(crop_size=64))
    pipeline = [{**t, **sizes.get(t['type'], {})} for t in cfg.train_dataloader.dataset.pipeline]
    cfg.train_dataloader.update(batch_size=4, num_workers=0, persistent_workers=False)
    cfg.train_dataloader.dataset = dict(type='CustomDataset', data_root=str(data), data_prefix='train',
                                        pipeline=pipeline)
    cfg.model.head.num_classes = cfg.data_preprocessor.num_classes = 5
    cfg.param_scheduler = [dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=1, convert_to_iter_based=True)]
    cfg.train_cfg = dict(by_epoch=True, max_epochs=1)
    train_in_process(cfg, work_dir)
    return work_dir / 'epoch_1.pth'


@pytest.mark.slow
@pytest.mark.parametrize('row', ['bra', 'lisa'])
def test_end_to_end_classifier_trains_and_initialises_every_backbone_tensor_of_the_semantic_fpn(row, tmp_path):
    from projects.lisa.synthetic import generate
    generate('imagenet', tmp_path / 'data', num_train=8, num_val=5, size=64, seed=0)
    generate('ade20k', tmp_path / 'data', num_train=4, num_val=2, size=96, seed=0)
    checkpoint = classifier_on_generated_imagenet(f'biformer-small_{row}_8xb128_in1k.py',
                                                  tmp_path / 'data' / 'imagenet', tmp_path / 'cls')
    classifier_state = torch.load(checkpoint, map_location='cpu')['state_dict']
    source = {k[len('backbone.'):]: v for k, v in classifier_state.items() if k.startswith('backbone.')}

    name = next(n for n, r in SEG_ROWS.items() if r == row)
    cfg = load(SEG / name)
    cfg.model.backbone.init_cfg.checkpoint = str(checkpoint)
    cfg.model.data_preprocessor.size = (96, 96)
    sizes = dict(RandomResize=dict(scale=(384, 96)), RandomCrop=dict(crop_size=(96, 96)))
    cfg.train_dataloader.update(batch_size=2, num_workers=0, persistent_workers=False)
    cfg.train_dataloader.dataset.update(
        data_root=str(tmp_path / 'data' / 'ade' / 'ADEChallengeData2016'),
        pipeline=[{**t, **sizes.get(t['type'], {})} for t in cfg.train_dataloader.dataset.pipeline])
    cfg.model.decode_head.norm_cfg = dict(type='BN', requires_grad=True)  # SyncBN needs CUDA
    cfg.optim_wrapper.type = 'OptimWrapper'  # fp16 needs CUDA
    del cfg.optim_wrapper.loss_scale
    cfg.param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=2)]
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=2)
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', by_epoch=False, interval=2)
    cfg.default_hooks.visualization = dict(type='SegVisualizationHook')
    train_in_process(cfg, tmp_path / 'seg')

    # the segmentor began from the classifier: its backbone at iteration 0 holds every classifier tensor
    from mmengine.registry import MODELS, init_default_scope
    init_default_scope('mmseg')
    fresh = MODELS.build(cfg.model)
    fresh.init_weights()
    state = fresh.backbone.state_dict()
    assert state.keys() - source.keys() == {f'norm{i}.{k}' for i in range(3) for k in ('weight', 'bias')}
    for key, value in source.items():
        assert torch.equal(state[key], value), key
    trained = torch.load(tmp_path / 'seg' / 'iter_2.pth', map_location='cpu')['state_dict']
    assert all(torch.isfinite(v).all() for v in trained.values() if v.is_floating_point())
    assert not torch.equal(trained['backbone.stages.0.0.attn.qkv.weight'], source['stages.0.0.attn.qkv.weight'])
