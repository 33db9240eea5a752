"""ImageNet pretraining (Tables 1 and 5), the mini-ImageNet ablations (Fig. 3, Tables 6-8) and the
hand-off of the ImageNet checkpoint to dense prediction.

References: the original recipes of DeiT, PVT and Swin (their values written out here), the
paper's table rows (which attention where), mmengine's optimiser constructor (which parameters
get weight decay), each override's own base config (it may change only what it ablates) and,
end to end, mmpretrain's inferencer (the top-1 that ``mim test`` must report) and the classifier
checkpoint itself (what the Semantic FPN and Mask R-CNN backbones must hold after loading it).
The ``test_end_to_end_*`` tests run ``mim train`` / ``mim test`` as subprocesses (about two minutes).
"""
from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import init_default_scope
from torch import nn

from projects.lisa.datasets.mini_imagenet import MINI_IMAGENET_CLASSES
from projects.lisa.models.attention import (
    AngularAttention,
    FocusedLinearAttention,
    LinearAttention,
    LiSAAttention,
    ShiftedWindowAttention,
    SoftmaxAttention,
)
from projects.lisa.synthetic import generate
from projects.lisa.synthetic.synthetic import IMAGENET_CLASSES

ROOT = Path(__file__).resolve().parents[1]
CLS = ROOT / 'configs' / 'classification'
ABL = CLS / 'ablations'
DEMO = CLS / 'demo' / 'pvt-tiny_lisa_1xb8-2e_synthetic-imagenet-64px.py'
MIM = str(Path(sys.executable).with_name('mim'))
CUSTOM_IMPORTS = "custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)"

# Table 1: config -> (family, arch, input size, row)
TABLE_1 = {
    f'{model}_{row}_8xb128_in1k{suffix}.py': (family, arch, size, row)
    for model, family, arch, sizes in [
        ('deit-tiny', 'deit', 'deit-tiny', (224, 384)), ('deit-small', 'deit', 'deit-small', (224, )),
        ('pvt-tiny', 'pvt', 'tiny', (224, )), ('pvt-small', 'pvt', 'small', (224, )),
        ('swin-tiny', 'swin', 'tiny', (224, ))]
    for size in sizes for suffix in ['' if size == 224 else f'-{size}px']
    for row in ('softmax', 'flatten', 'lisa')
}
# Which attention where, per row: DeiT every layer, PVT every stage, Swin per stage.
ROW_ATTENTIONS = {
    ('deit', 'softmax'): [SoftmaxAttention] * 12, ('deit', 'flatten'): [FocusedLinearAttention] * 12,
    ('deit', 'lisa'): [LiSAAttention] * 12,
    ('pvt', 'softmax'): [SoftmaxAttention] * 4, ('pvt', 'flatten'): [FocusedLinearAttention] * 4,
    ('pvt', 'lisa'): [LiSAAttention] * 4,
    ('swin', 'softmax'): [ShiftedWindowAttention] * 4,
    ('swin', 'flatten'): [FocusedLinearAttention] * 2 + [ShiftedWindowAttention] * 2,
    ('swin', 'lisa'): [LiSAAttention] * 2 + [ShiftedWindowAttention] * 2,
}
# The original recipes: (warm-up epochs, drop path)
RECIPES = {'deit': (5, 0.1), 'pvt': (5, 0.1), 'swin': (20, 0.2)}

# Table 5 (DeiT-S, ImageNet-1K): config -> attention in every layer
TABLE_5 = {
    'deit-small_softmax_8xb128_in1k.py': SoftmaxAttention, 'deit-small_flatten_8xb128_in1k.py': FocusedLinearAttention,
    'deit-small_angular_8xb128_in1k.py': AngularAttention, 'deit-small_linear_8xb128_in1k.py': LinearAttention,
    'deit-small_lisa_8xb128_in1k.py': LiSAAttention,
}

# The ablations on mini-ImageNet (Fig. 3, Tables 6-8): override -> (its base, the backbone's resolved attn_cfgs)
MINI = 'deit-tiny_lisa-t5_8xb128_mini-imagenet.py'  # LiSA-DeiT-T, T = 5: the root of every ablation
MINI_S = 'deit-small_lisa-t5_8xb128_mini-imagenet.py'
T5 = dict(type='lisa', num_steps=5)
ABLATIONS = {
    **{f'deit-tiny_lisa-t{t}_8xb128_mini-imagenet.py': (f'./{MINI}', dict(T5, num_steps=t)) for t in (1, 2, 3, 4)},
    'deit-tiny_lisa-t5-global_8xb128_mini-imagenet.py': (f'./{MINI}', dict(T5, use_local=False)),
    'deit-tiny_lisa-t5-local_8xb128_mini-imagenet.py': (f'./{MINI}', dict(T5, use_global=False)),
    'deit-small_lisa-t5-global_8xb128_mini-imagenet.py': (f'./{MINI_S}', dict(T5, use_local=False)),
    'deit-small_lisa-t5-local_8xb128_mini-imagenet.py': (f'./{MINI_S}', dict(T5, use_global=False)),
    **{f'deit-tiny_la{s}_8xb128_mini-imagenet.py': (f'./{MINI}', dict(type='linear', focusing='f' in s, dwc='d' in s))
       for s in ('', '-f', '-d', '-fd')},
    **{f'deit-tiny_gl-t5{s}_8xb128_mini-imagenet.py': (f'./{MINI}', dict(T5, focusing='f' in s, dwc='d' in s))
       for s in ('', '-f', '-d')},
    'deit-tiny_lisa-t5-elu_8xb128_mini-imagenet.py': (f'./{MINI}', dict(T5, feature_map='elu')),
}
ALL_CONFIGS = [*(CLS / n for n in {**TABLE_1, **TABLE_5}), *(ABL / n for n in [MINI, MINI_S, *ABLATIONS]), DEMO]


@functools.cache
def load(path: Path) -> Config:
    """The resolved config, loaded once per session (tests must not modify it)."""
    return Config.fromfile(str(path))


def build_classifier(path: Path) -> nn.Module:
    """The config's ImageClassifier (not initialised)."""
    init_default_scope('mmpretrain')
    from mmpretrain.registry import MODELS
    return MODELS.build(load(path).model)


def flat(tree, prefix: str = '') -> dict[str, object]:
    """A config tree as ``{dotted.path: leaf}`` (list items as ``[i]``)."""
    if isinstance(tree, dict):  # without mmengine's registry-scope annotations
        items = [(f'{prefix}.{k}' if prefix else str(k), v) for k, v in tree.items() if k != '_scope_']
    elif isinstance(tree, (list, tuple)) and any(isinstance(v, (dict, list, tuple)) for v in tree):
        items = [(f'{prefix}[{i}]', v) for i, v in enumerate(tree)]
    else:
        return {prefix: tree}
    return {k: v for key, value in items for k, v in flat(value, key).items()}


def changed_paths(a: Config, b: Config) -> set[str]:
    fa, fb = flat(a.to_dict()), flat(b.to_dict())
    return {k for k in fa.keys() | fb.keys() if fa.get(k, '<missing>') != fb.get(k, '<missing>')}


def attentions(backbone: nn.Module, family: str) -> list[nn.Module]:
    """The attention of each layer (DeiT) or of each stage's first block (PVT, Swin)."""
    if family == 'deit':
        return [layer.attn for layer in backbone.layers]
    return [stage.blocks[0].attn for stage in backbone.stages]


# ---------------------------------------------------------------------------- the configs


def test_classification_folder_holds_tables_1_and_5_the_ablations_and_one_demo():
    # the BiFormer configs of Table 2 are tested in test_backbone_biformer.py
    assert {p.name for p in CLS.glob('*.py') if not p.name.startswith('biformer-')} == set(TABLE_1) | set(TABLE_5)
    assert {p.name for p in ABL.glob('*.py')} == {MINI, MINI_S, *ABLATIONS}
    assert [p.name for p in (CLS / 'demo').glob('*.py')] == [DEMO.name]


@pytest.mark.slow
@pytest.mark.parametrize('path', ALL_CONFIGS, ids=lambda p: p.name)
def test_config_starts_with_custom_imports_and_reaches_mmpretrain_through_its_scope(path):
    code = [line for line in path.read_text().splitlines() if line and not line.startswith('#')]
    assert code[0] == CUSTOM_IMPORTS
    current, chain = path, []
    while True:
        bases = Config._get_base_files(str(current))
        chain += bases
        local = [b for b in bases if not b.startswith('mmpretrain::') and '_base_/' not in b]
        assert len(local) <= 1 and len(chain) < 16
        if not local:
            break
        current = (current.parent / local[0]).resolve()
    assert any(b.startswith('mmpretrain::') for b in chain)
    assert '../_base_/lisa_runtime.py' in chain  # the project's runtime layer (where the crash-safe runtime goes)
    cfg = load(path)
    assert cfg.default_scope == 'mmpretrain' and '://' not in cfg.pretty_text


@pytest.mark.slow
@pytest.mark.parametrize('name', TABLE_1)
def test_table_1_classifier_has_the_attention_of_its_row_and_predicts_1000_classes(name):
    family, arch, size, row = TABLE_1[name]
    assert load(CLS / name).model.backbone.arch == arch
    model = build_classifier(CLS / name).eval()
    attns = attentions(model.backbone, family)
    assert [type(a) for a in attns] == ROW_ATTENTIONS[family, row]
    if family == 'pvt' and row == 'softmax':
        assert [a.sr_ratio for a in attns] == [8, 4, 2, 1]
    for a in attns:
        if isinstance(a, LiSAAttention):
            assert (a.num_steps, a.step_weights, a.use_global, a.use_local) == (3, 'adaptive', True, True)
            assert a.focusing_factor == 3 and a.dwc is not None and a.feature_map == 'relu'
        if isinstance(a, FocusedLinearAttention):
            assert a.focusing_factor == 3 and a.dwc is not None
    # the kernel attentions' positional encodings are laid out on the training grid
    grid = (size // 16, size // 16) if family == 'deit' else (size // 4, size // 4)
    assert getattr(attns[0], 'positional_encoding', None) is None or attns[0].positional_encoding.pos_shape == grid
    with torch.no_grad():
        logits = model(torch.rand(1, 3, 64, 64), mode='tensor')
    assert logits.shape == (1, 1000) and torch.isfinite(logits).all()


@pytest.mark.parametrize('group', sorted({n.replace('softmax', '{}').replace('flatten', '{}').replace('lisa', '{}')
                                          for n in TABLE_1}))
def test_table_1_rows_of_one_backbone_differ_only_in_the_attention(group):
    lisa, *others = (load(CLS / group.format(row)) for row in ('lisa', 'softmax', 'flatten'))
    for other in others:
        changed = changed_paths(lisa, other)
        assert changed and all(p.startswith('model.backbone.attn_cfgs') for p in changed), changed


@pytest.mark.parametrize('name', TABLE_1)
def test_table_1_config_follows_its_original_recipe_at_1024_images_per_step(name):
    family, arch, size, row = TABLE_1[name]
    cfg = load(CLS / name)
    warmup_epochs, drop_path = RECIPES[family]
    # 300 epochs of 8 x 128 images, AdamW with lr 5e-4 x 1024 / 512, weight decay 0.05
    assert cfg.train_cfg.max_epochs == 300 and cfg.train_dataloader.batch_size == 128
    assert name.split('_')[2] == '8xb128' and cfg.auto_scale_lr.base_batch_size == 8 * 128
    opt = cfg.optim_wrapper.optimizer
    assert (opt.type, opt.lr, opt.weight_decay, opt.betas, opt.eps) == ('AdamW', 5e-4 * 1024 / 512, 0.05,
                                                                        (0.9, 0.999), 1e-8)
    # Swin's recipe clips at norm 5; DeiT's and FLatten's PVT recipes do not (tests/test_recipes.py: the samplers)
    assert cfg.optim_wrapper.get('clip_grad') == (dict(max_norm=5.0) if family == 'swin' else None)
    warmup, cosine = cfg.param_scheduler
    assert (warmup.type, warmup.end, warmup.start_factor, warmup.by_epoch, warmup.convert_to_iter_based) == (
        'LinearLR', warmup_epochs, 1e-3, True, True)
    assert (cosine.type, cosine.begin, cosine.eta_min, cosine.by_epoch) == (
        'CosineAnnealingLR', warmup_epochs, 1e-5, True)
    # DeiT's augmentation as mmpretrain writes it, drop path of the original recipe
    assert cfg.model.backbone.drop_path_rate == drop_path
    assert [(a.type, a.alpha) for a in cfg.model.train_cfg.augments] == [('Mixup', 0.8), ('CutMix', 1.0)]
    assert (cfg.model.head.loss.type, cfg.model.head.loss.label_smooth_val) == ('LabelSmoothLoss', 0.1)
    assert cfg.model.head.num_classes == 1000 and cfg.data_preprocessor.num_classes == 1000
    train = {t.type: t for t in cfg.train_dataloader.dataset.pipeline}
    assert train['RandomResizedCrop'].scale == size
    ra = train['RandAugment']
    assert (ra.policies, ra.num_policies, ra.magnitude_level, ra.magnitude_std) == ('timm_increasing', 2, 9, 0.5)
    assert train['RandomErasing'].erase_prob == 0.25
    test = {t.type: t for t in cfg.test_dataloader.dataset.pipeline}
    assert test['CenterCrop'].crop_size == size and test['ResizeEdge'].scale == int(size * 256 / 224)
    for loader, split in (('train_dataloader', 'train'), ('val_dataloader', 'val'), ('test_dataloader', 'val')):
        dataset = cfg[loader].dataset
        assert (dataset.type, dataset.data_root, dataset.split) == ('ImageNet', 'data/imagenet', split)
    assert (cfg.val_evaluator.type, cfg.val_evaluator.topk) == ('Accuracy', (1, 5))


# Table 1 rows whose ImageNet weights the dense configs of Tables 3-4 load (their `pretrained` files)
DENSE = ROOT / 'configs' / 'segmentation', ROOT / 'configs' / 'detection'
HAND_OFF = {
    'pvt-tiny_lisa_8xb128_in1k.py': ('fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py',
                                     'mask-rcnn_lisa-pvt-t_fpn_1x_coco.py'),
    'pvt-tiny_softmax_8xb128_in1k.py': ('fpn_pvt-t_8xb4-40k_ade20k-512x512.py', 'mask-rcnn_pvt-t_fpn_1x_coco.py'),
    'pvt-tiny_flatten_8xb128_in1k.py': ('fpn_flatten-pvt-t_8xb4-40k_ade20k-512x512.py',
                                        'mask-rcnn_flatten-pvt-t_fpn_1x_coco.py'),
    'swin-tiny_lisa_8xb128_in1k.py': ('upernet_lisa-swin-t_8xb2-160k_ade20k-512x512.py',
                                      'mask-rcnn_lisa-swin-t_fpn_1x_coco.py'),
    'swin-tiny_softmax_8xb128_in1k.py': ('upernet_swin-t_8xb2-160k_ade20k-512x512.py',
                                         'mask-rcnn_swin-t_fpn_1x_coco.py'),
    'swin-tiny_flatten_8xb128_in1k.py': ('upernet_flatten-swin-t_8xb2-160k_ade20k-512x512.py',
                                         'mask-rcnn_flatten-swin-t_fpn_1x_coco.py'),
}


@pytest.mark.slow
@pytest.mark.parametrize('name', HAND_OFF)
def test_classifier_backbone_holds_every_tensor_of_its_dense_backbones_at_the_same_shape(name):
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    source = {k: v.shape for k, v in MODELS.build(load(CLS / name).model.backbone).state_dict().items()}
    for folder, dense in zip(DENSE, HAND_OFF[name]):
        target = {k: v.shape for k, v in MODELS.build(load(folder / dense).model.backbone).state_dict().items()}
        # Swin classifies from the last stage's norm; the dense models add one per stage (new, as
        # with the official Swin weights). Everything else is loaded as it is, nothing resized.
        new = {k for k in target.keys() - source.keys() if k.split('.')[0] in ('norm0', 'norm1', 'norm2')}
        assert target.keys() - new == source.keys(), dense
        assert all(target[k] == source[k] for k in source), dense
        assert bool(new) == name.startswith('swin')


@pytest.mark.parametrize('name', ['deit-tiny_lisa_8xb128_in1k.py', 'pvt-tiny_lisa_8xb128_in1k.py',
                                  'swin-tiny_lisa_8xb128_in1k.py', 'deit-tiny_flatten_8xb128_in1k.py'])
def test_no_weight_decay_on_norms_biases_position_tables_feature_scales_and_alpha(name):
    cfg = load(CLS / name)
    model = build_classifier(CLS / name)
    decay = {id(p): g['weight_decay']
             for g in build_optim_wrapper(model, cfg.optim_wrapper).optimizer.param_groups for p in g['params']}
    norms = {f'{n}.{k}' for n, m in model.named_modules() if isinstance(m, nn.LayerNorm) for k in ('weight', 'bias')}
    exempt_names = ('pos_embed', 'cls_token', 'positional_encoding', 'relative_position_bias_table', '.scale',
                    '.alpha')
    seen = set()
    for n, p in model.named_parameters():
        exempt = n in norms or n.endswith('.bias') or any(e in n for e in exempt_names)
        seen |= {e for e in exempt_names if e in n}
        assert decay[id(p)] == (0.0 if exempt else 0.05), n
    assert {'positional_encoding', '.scale'} <= seen  # kernel attentions in every one of these models
    assert '.alpha' in seen or 'flatten' in name


@pytest.mark.parametrize('name', ABLATIONS)
def test_ablation_is_a_small_override_changing_only_the_attention_setting_it_names(name):
    base, expected = ABLATIONS[name]
    assert Config._get_base_files(str(ABL / name)) == [base]
    cfg, base_cfg = load(ABL / name), load((ABL / base).resolve())
    assert cfg.model.backbone.attn_cfgs == expected
    changed = changed_paths(cfg, base_cfg)
    assert changed and all(p.startswith('model.backbone.attn_cfgs.') for p in changed), changed
    code = [line for line in (ABL / name).read_text().splitlines() if line and not line.startswith('#')]
    assert len(code) == 3  # custom_imports, _base_, the one override
    backbone = build_classifier(ABL / name).backbone
    attn = backbone.layers[0].attn
    assert type(attn) is {'lisa': LiSAAttention, 'linear': LinearAttention}[expected['type']]
    assert (attn.focusing_factor is not None, attn.dwc is not None) == (expected.get('focusing', True),
                                                                      expected.get('dwc', True))
    assert attn.feature_map == expected.get('feature_map', 'relu')
    if expected['type'] == 'lisa':
        assert (attn.num_steps, attn.use_global, attn.use_local) == (
            expected['num_steps'], expected.get('use_global', True), expected.get('use_local', True))
        assert (attn.alpha is not None) == (attn.use_global and attn.use_local)


def test_ablation_root_is_the_imagenet_lisa_deit_t_recipe_on_mini_imagenet_with_t_5():
    cfg, imagenet = load(ABL / MINI), load(CLS / 'deit-tiny_lisa_8xb128_in1k.py')
    assert cfg.model.backbone.attn_cfgs == T5 and cfg.model.head.num_classes == cfg.data_preprocessor.num_classes == 100
    for loader, split, pipeline in (('train_dataloader', 'train', 'train_pipeline'),
                                    ('val_dataloader', 'val', 'test_pipeline'),
                                    ('test_dataloader', 'val', 'test_pipeline')):
        dataset = cfg[loader].dataset
        assert dict(dataset) == dict(type='CustomDataset', data_root='data/mini-imagenet', with_label=True,
                                     data_prefix=split, pipeline=imagenet[pipeline])
    allowed = ('model.backbone.attn_cfgs.num_steps', 'model.head.num_classes', 'data_preprocessor.num_classes',
               'train_dataloader.dataset', 'val_dataloader.dataset', 'test_dataloader.dataset', 'mini_imagenet')
    changed = changed_paths(cfg, imagenet)
    assert changed and all(p.startswith(allowed) for p in changed), changed
    # DeiT-S (Table 6) is the same root with DeiT's small architecture
    small = load(ABL / MINI_S)
    assert changed_paths(small, cfg) == {'model.backbone.arch', 'model.head.in_channels'}
    assert (small.model.backbone.arch, small.model.head.in_channels) == ('deit-small', 384)


def test_fig_3_sweeps_t_1_to_5_on_mini_imagenet():
    configs = {load(ABL / f'deit-tiny_lisa-t{t}_8xb128_mini-imagenet.py').model.backbone.attn_cfgs.num_steps: t
               for t in range(1, 6)}
    assert configs == {t: t for t in range(1, 6)}


@pytest.mark.parametrize('name', TABLE_5)
def test_table_5_rows_are_deit_s_on_imagenet_differing_only_in_the_attention(name):
    cfg, lisa = load(CLS / name), load(CLS / 'deit-small_lisa_8xb128_in1k.py')
    changed = changed_paths(cfg, lisa)
    assert all(p.startswith('model.backbone.attn_cfgs') for p in changed), changed
    assert cfg.model.backbone.arch == 'deit-small' and cfg.train_dataloader.dataset.type == 'ImageNet'
    model = build_classifier(CLS / name).eval()
    assert {type(a) for a in attentions(model.backbone, 'deit')} == {TABLE_5[name]}
    attn = model.backbone.layers[0].attn
    if TABLE_5[name] in (LinearAttention, AngularAttention):  # the kernels alone: no focusing, no depthwise conv
        assert attn.focusing_factor is None and attn.dwc is None
    if TABLE_5[name] is AngularAttention:  # Castling-ViT's published module: its own 9 x 1 conv over the tokens
        assert attn.form == 'castling' and attn.seq_conv.kernel_size == (9, 1) and attn.positional_encoding is None
    with torch.no_grad():
        assert model(torch.rand(1, 3, 32, 32), mode='tensor').shape == (1, 1000)


def test_mini_imagenet_classes_are_the_folders_mmpretrain_reads_in_label_order(tmp_path):
    from mmpretrain.datasets import CustomDataset
    for split, n in (('train', 2), ('val', 1)):
        for wnid in reversed(MINI_IMAGENET_CLASSES):
            for i in range(n):
                (tmp_path / split / wnid).mkdir(parents=True, exist_ok=True)
                (tmp_path / split / wnid / f'{wnid}_{i}.JPEG').touch()
    fragment = dict(load(ABL / MINI).mini_imagenet)
    assert fragment.pop('type') == 'CustomDataset'
    for split, n in (('train', 2), ('val', 1)):
        dataset = CustomDataset(**{**fragment, 'data_root': str(tmp_path)}, data_prefix=split, lazy_init=False)
        assert dataset.CLASSES == MINI_IMAGENET_CLASSES and len(dataset) == 100 * n
        assert [dataset.get_cat_ids(i) for i in range(0, 100 * n, n)] == [[c] for c in range(100)]


# What the CPU variant may change: image sizes, schedule length, batch and loader processes,
# the number of classes, the dataset (folder-per-class, classes from the folders) and its location,
# and, so that its 50 steps learn (the demo config's comment), the lr and the training augmentation.
DEMO_MAY_CHANGE = ('data_root', 'img_size', 'max_epochs', 'sizes', 'flip', 'train_pipeline', 'test_pipeline',
                   'model.head.num_classes', 'model.train_cfg', 'data_preprocessor.num_classes',
                   'optim_wrapper.optimizer.lr', 'param_scheduler', 'train_cfg.max_epochs', 'train_cfg.val_interval',
                   'default_hooks.logger.interval', 'randomness')
DEMO_LOADER_MAY_CHANGE = ('batch_size', 'num_workers', 'persistent_workers', 'dataset.type', 'dataset.split',
                          'dataset.data_root', 'dataset.data_prefix', 'dataset.pipeline')


def test_cpu_variant_changes_only_sizes_schedule_batch_classes_data_lr_and_augmentation():
    cfg, base = load(DEMO), load(CLS / 'pvt-tiny_lisa_8xb128_in1k.py')
    for path in changed_paths(cfg, base):
        loader, _, rest = path.partition('.')
        if loader in ('val_dataloader', 'test_dataloader'):
            assert rest.startswith(DEMO_LOADER_MAY_CHANGE), path
            if rest.startswith('dataset.pipeline'):
                assert rest.rsplit('.', 1)[1] in ('scale', 'crop_size'), path
        elif loader == 'train_dataloader':
            assert rest.startswith(DEMO_LOADER_MAY_CHANGE), path
        else:
            assert path.startswith(DEMO_MAY_CHANGE), path
    assert cfg.model.backbone == base.model.backbone  # the same LiSA-PVT-T, built for 224 px
    assert [s.type for s in cfg.param_scheduler] == [s.type for s in base.param_scheduler]
    assert base.model.train_cfg.augments and cfg.model.train_cfg is None  # no Mixup / CutMix
    assert cfg.optim_wrapper.optimizer.lr == 2e-4 and base.optim_wrapper.optimizer.lr == 1e-3
    assert {**cfg.optim_wrapper.optimizer, 'lr': None} == {**base.optim_wrapper.optimizer, 'lr': None}
    # training: the test pipeline's load, resize and crop, then the recipe's flip, then packing
    train, test = cfg.train_dataloader.dataset.pipeline, cfg.val_dataloader.dataset.pipeline
    assert [t.type for t in train] == [*(t.type for t in test[:-1]), 'RandomFlip', 'PackInputs']
    assert train[-2] == next(t for t in base.train_pipeline if t.type == 'RandomFlip')
    assert (cfg.val_evaluator.type, cfg.val_evaluator.topk) == ('Accuracy', (1, 5)) and len(IMAGENET_CLASSES) >= 5


# ---------------------------------------------------------------------------- end to end

DATA = dict(num_train=40, num_val=20, size=64, seed=0)  # the demo config's comment
EPOCHS, BATCH = 2, 8
SEG = ROOT / 'configs' / 'segmentation' / 'fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py'
DET = ROOT / 'configs' / 'detection' / 'mask-rcnn_lisa-pvt-t_fpn_1x_coco.py'


def run(cmd: list[str], cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != 'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1')
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f'{" ".join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}'
    return proc.stdout + proc.stderr


@pytest.fixture(scope='module')
def pretrained(tmp_path_factory) -> dict:
    """The CPU variant trained by ``mim train mmpretrain`` and tested by ``mim test mmpretrain``."""
    cwd = tmp_path_factory.mktemp('imagenet')
    generate('imagenet', cwd / 'data' / 'synthetic', **DATA)
    work = cwd / 'work_dirs' / 'cls'
    run([MIM, 'train', 'mmpretrain', str(DEMO), '--work-dir', str(work)], cwd)
    checkpoint = work / f'epoch_{EPOCHS}.pth'
    assert (work / 'last_checkpoint').read_text().strip() == str(checkpoint)
    run([MIM, 'test', 'mmpretrain', str(DEMO), '--checkpoint', str(checkpoint), '--work-dir', str(work / 'test')],
        cwd)
    (result, ) = [p for p in (work / 'test').glob('*/*.json') if p.stem == p.parent.name]
    return dict(cwd=cwd, checkpoint=checkpoint, metrics=json.loads(result.read_text()))


@pytest.mark.slow
def test_end_to_end_mim_train_saves_the_classifier_after_the_configured_iterations(pretrained):
    ckpt = torch.load(pretrained['checkpoint'], map_location='cpu')
    assert ckpt['meta']['epoch'] == EPOCHS and ckpt['meta']['iter'] == EPOCHS * DATA['num_train'] // BATCH
    assert tuple(ckpt['meta']['dataset_meta']['classes']) == IMAGENET_CLASSES  # the class folders, sorted
    assert ckpt['state_dict']['head.fc.weight'].shape == (len(IMAGENET_CLASSES), 512)


@pytest.mark.slow
def test_end_to_end_mim_test_reports_the_top1_of_mmpretrain_inference_and_top5_of_all_classes(pretrained):
    from mmpretrain.apis import ImageClassificationInferencer
    metrics = pretrained['metrics']
    val = pretrained['cwd'] / 'data' / 'synthetic' / 'imagenet' / 'val'
    images = sorted(val.glob('*/*.JPEG'))
    assert len(images) == DATA['num_val']
    inferencer = ImageClassificationInferencer(str(DEMO), pretrained=str(pretrained['checkpoint']), device='cpu')
    predictions = inferencer([str(p) for p in images], batch_size=BATCH)
    correct = [pred['pred_label'] == IMAGENET_CLASSES.index(p.parent.name) for pred, p in zip(predictions, images)]
    assert metrics['accuracy/top1'] == pytest.approx(100 * sum(correct) / len(images))
    assert metrics['accuracy/top5'] == 100  # 5 classes: the true one is always among the top 5


@pytest.mark.slow
@pytest.mark.parametrize('config, scope, heads', [
    (SEG, 'mmseg', {'neck', 'decode_head'}),
    (DET, 'mmdet', {'neck', 'rpn_head', 'roi_head'}),
], ids=['semantic-fpn', 'mask-rcnn'])
def test_end_to_end_checkpoint_initialises_every_backbone_weight_of_the_dense_lisa_pvt_t(pretrained, config,
                                                                                           scope, heads):
    cfg = Config.fromfile(str(config))
    assert cfg.model.backbone.init_cfg.prefix == 'backbone.'
    cfg.model.backbone.init_cfg.checkpoint = str(pretrained['checkpoint'])
    init_default_scope(scope)
    model = importlib.import_module(f'{scope}.registry').MODELS.build(cfg.model)
    model.init_weights()
    classifier = torch.load(pretrained['checkpoint'], map_location='cpu')['state_dict']
    source = {k[len('backbone.'):]: v for k, v in classifier.items() if k.startswith('backbone.')}
    state = model.backbone.state_dict()
    assert state.keys() == source.keys()  # nothing missing, nothing left over
    for key, value in source.items():
        assert torch.equal(state[key], value), key
    assert {k.split('.')[0] for k in model.state_dict()} == {'backbone', *heads}
