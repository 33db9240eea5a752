"""The Table 3 / Table 4 configs: one per row, the paper's recipes, the mm base configs, no internet.

References: the recipes of §5 of the paper notes (values written out here), the
attention classes of ``projects.lisa`` and mmengine's own optimiser constructor
(which parameters get weight decay).
"""
import copy
import functools
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS, init_default_scope

from projects.lisa.models.attention import (
    FocusedLinearAttention,
    LiSAAttention,
    ShiftedWindowAttention,
    SoftmaxAttention,
)

ROOT = Path(__file__).resolve().parents[1]
SEG, DET = ROOT / 'configs' / 'segmentation', ROOT / 'configs' / 'detection'

# The attention of each stage in each row: PVT (classes, softmax sr ratios), Swin (classes).
PVT_ROWS = {
    'lisa': ([LiSAAttention] * 4, None),
    'pvt': ([SoftmaxAttention] * 4, [8, 4, 2, 1]),
    'flatten': ([FocusedLinearAttention] * 4, None),
}
SWIN_ROWS = {
    'lisa': [LiSAAttention, LiSAAttention, ShiftedWindowAttention, ShiftedWindowAttention],
    'swin': [ShiftedWindowAttention] * 4,
    'flatten': [FocusedLinearAttention, FocusedLinearAttention, ShiftedWindowAttention, ShiftedWindowAttention],
}
ROWS = {  # the Table 3 / Table 4 configs -> (mm scope, backbone family, row)
    SEG / 'fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py': ('mmseg', 'pvt', 'lisa'),
    SEG / 'fpn_pvt-t_8xb4-40k_ade20k-512x512.py': ('mmseg', 'pvt', 'pvt'),
    SEG / 'fpn_flatten-pvt-t_8xb4-40k_ade20k-512x512.py': ('mmseg', 'pvt', 'flatten'),
    SEG / 'upernet_lisa-swin-t_8xb2-160k_ade20k-512x512.py': ('mmseg', 'swin', 'lisa'),
    SEG / 'upernet_swin-t_8xb2-160k_ade20k-512x512.py': ('mmseg', 'swin', 'swin'),
    SEG / 'upernet_flatten-swin-t_8xb2-160k_ade20k-512x512.py': ('mmseg', 'swin', 'flatten'),
    DET / 'mask-rcnn_lisa-pvt-t_fpn_1x_coco.py': ('mmdet', 'pvt', 'lisa'),
    DET / 'mask-rcnn_pvt-t_fpn_1x_coco.py': ('mmdet', 'pvt', 'pvt'),
    DET / 'mask-rcnn_flatten-pvt-t_fpn_1x_coco.py': ('mmdet', 'pvt', 'flatten'),
    DET / 'mask-rcnn_lisa-swin-t_fpn_1x_coco.py': ('mmdet', 'swin', 'lisa'),
    DET / 'mask-rcnn_swin-t_fpn_1x_coco.py': ('mmdet', 'swin', 'swin'),
    DET / 'mask-rcnn_flatten-swin-t_fpn_1x_coco.py': ('mmdet', 'swin', 'flatten'),
}
DEMOS = {  # demo config -> the Table config it inherits
    SEG / 'demo/fpn_lisa-pvt-t_1xb4-150iter_synthetic-ade20k-96x96.py':
    SEG / 'fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py',
    DET / 'demo/mask-rcnn_lisa-pvt-t_fpn_1xb4-12e_synthetic-coco-96.py':
    DET / 'mask-rcnn_lisa-pvt-t_fpn_1x_coco.py',
}
ids = [p.name for p in ROWS]


@functools.cache
def _load(path: Path) -> Config:
    return Config.fromfile(str(path))


def load(path: Path) -> Config:
    """The resolved config (parsed once per session; each caller gets its own copy)."""
    return copy.deepcopy(_load(path))


@functools.cache
def build_model(path: Path) -> torch.nn.Module:
    """The config's model, built once per session (weights not loaded: no checkpoint needed)."""
    cfg = load(path)
    init_default_scope(cfg.default_scope)
    return MODELS.build(cfg.model)


def test_every_config_of_the_tables_exists_and_the_demo_configs_too():
    # the BiFormer configs of Table 2 are tested in test_backbone_biformer.py, the softmax-start siblings of the
    # rows (which load public weights) in test_softmax_start.py
    assert {*SEG.glob('*.py'), *DET.glob('*.py')} - {*SEG.glob('fpn_*biformer*.py'), *SEG.glob('*_softmax-in1k-pre_*'),
                                                      *DET.glob('*_softmax-in1k-pre_*')} == set(ROWS)
    assert all(p.is_file() for p in DEMOS)


@pytest.mark.parametrize('path', ROWS, ids=ids)
def test_config_starts_with_custom_imports_and_inherits_an_mm_base_through_its_scope(path):
    text = path.read_text()
    code = [line for line in text.splitlines() if line and not line.startswith('#')]
    assert code[0] == "custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)"
    chain, todo = [], [path]
    while todo:  # follow the local _base_ files (rows, the project's and the package's fragments) to the mm scope
        current = todo.pop()
        bases = Config._get_base_files(str(current))
        chain += [str((current.parent / b).resolve().relative_to(ROOT)) if '::' not in b else b
                  for b in bases]
        todo += [current.parent / b for b in bases if '::' not in b]
    scope, family, _ = ROWS[path]
    assert chain and all('::' not in b or b.startswith(f'{scope}::') for b in chain)
    assert any(b.startswith(f'{scope}::') for b in chain)
    # the project's runtime layer (where the crash-safe runtime goes) and the shared fragments
    assert {'configs/_base_/lisa_runtime.py', f'configs/_base_/models/{family}.py', 'configs/_base_/no_weight_decay.py',
            'projects/lisa/configs/safe_runtime.py'} <= set(chain)


@pytest.mark.slow
@pytest.mark.parametrize('path', [*ROWS, *DEMOS], ids=[*ids, *(p.name for p in DEMOS)])
def test_config_needs_no_internet_and_reads_the_mm_data_paths(path):
    cfg = load(path)
    assert '://' not in cfg.pretty_text  # no open-mmlab://, torchvision://, https:// weights
    root = cfg.train_dataloader.dataset.data_root
    demo = path in DEMOS
    expected = {'mmseg': 'data/ade/ADEChallengeData2016', 'mmdet': 'data/coco/'}[cfg.default_scope]
    assert root == ('data/synthetic/' + expected[len('data/'):] if demo else expected)
    for loader in ('val_dataloader', 'test_dataloader'):
        assert cfg[loader].dataset.data_root == root


@pytest.mark.parametrize('path', ROWS, ids=ids)
def test_pretrained_backbone_is_the_pretrained_variable_and_a_local_file(path):
    cfg = load(path)
    init = cfg.model.backbone.init_cfg
    assert init.type == 'Pretrained' and init.checkpoint == cfg.pretrained
    assert cfg.pretrained.startswith('pretrain/') and cfg.pretrained.endswith('_in1k.pth')
    assert cfg.get('checkpoint_file') is None  # mmseg's Swin variable for the official weights' URL is unset
    assert init.prefix == 'backbone.'  # an mmpretrain ImageClassifier checkpoint
    assert cfg.model.get('pretrained') is None  # the mm bases' 'open-mmlab://' / URL weights are gone


@pytest.mark.slow
@pytest.mark.parametrize('path', ROWS, ids=ids)
def test_backbone_has_the_attention_of_its_table_row_and_feeds_the_heads(path):
    scope, family, row = ROWS[path]
    model = build_model(path)
    backbone = model.backbone
    attns = [[block.attn for block in stage.blocks] for stage in backbone.stages]
    if family == 'pvt':
        classes, sr = PVT_ROWS[row]
        if sr is not None:
            assert [{a.sr_ratio for a in stage} for stage in attns] == [{r} for r in sr]
        channels = [64, 128, 320, 512]
    else:
        classes = SWIN_ROWS[row]
        channels = [96, 192, 384, 768]
    assert [{type(a) for a in stage} for stage in attns] == [{c} for c in classes]
    model.eval()
    with torch.no_grad():
        feats = backbone(torch.rand(1, 3, 64, 96))
        assert [f.shape[1] for f in feats] == channels
        assert [f.shape[2:] for f in feats] == [(64 // s, 96 // s) for s in (4, 8, 16, 32)]
        if scope == 'mmdet':  # the neck and the RPN take the features (the RoI heads follow the neck)
            out = model.rpn_head(model.neck(feats))[0]
        else:  # the neck and the decode head take the features
            out = model(torch.rand(1, 3, 64, 96), mode='tensor')
    first = out[0] if isinstance(out, (list, tuple)) else out
    assert torch.isfinite(first).all()


@pytest.mark.parametrize('path', [p for p in ROWS if p.name.startswith('fpn')], ids=lambda p: p.name)
def test_semantic_fpn_configs_follow_the_pvt_recipe(path):
    cfg = load(path)
    assert cfg.optim_wrapper.type == 'OptimWrapper'
    assert cfg.optim_wrapper.optimizer == dict(type='AdamW', lr=2e-4, weight_decay=1e-4)
    (poly, ) = cfg.param_scheduler
    assert (poly.type, poly.power, poly.eta_min, poly.end, poly.by_epoch) == ('PolyLR', 0.9, 0.0, 40000, False)
    assert cfg.train_cfg.max_iters == 40000 and cfg.train_dataloader.batch_size == 4  # x 8 GPUs = 32
    crop = [t for t in cfg.train_dataloader.dataset.pipeline if t.type == 'RandomCrop'][0]
    assert crop.crop_size == (512, 512) and cfg.model.data_preprocessor.size == (512, 512)
    assert cfg.model.neck.out_channels == 256 and cfg.model.decode_head.channels == 128
    assert cfg.model.decode_head.num_classes == 150
    assert cfg.model.backbone.drop_path_rate == 0.1
    # PVT's evaluation: (2048, 512) keeping the ratio, sides rounded up to multiples of 32, labels untouched
    for loader in ('val_dataloader', 'test_dataloader'):
        assert [t.type for t in cfg[loader].dataset.pipeline] == [
            'LoadImageFromFile', 'AlignResize', 'LoadAnnotations', 'PackSegInputs']
        align = cfg[loader].dataset.pipeline[1]
        assert (align.scale, align.size_divisor) == ((2048, 512), 32)


@pytest.mark.parametrize('path', [p for p in ROWS if p.name.startswith('upernet')], ids=lambda p: p.name)
def test_upernet_configs_follow_the_swin_recipe(path):
    cfg = load(path)
    assert cfg.optim_wrapper.optimizer == dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01)
    warmup, poly = cfg.param_scheduler
    assert (warmup.type, warmup.begin, warmup.end) == ('LinearLR', 0, 1500)
    assert (poly.type, poly.power, poly.eta_min, poly.begin, poly.end) == ('PolyLR', 1.0, 0.0, 1500, 160000)
    assert cfg.train_cfg.max_iters == 160000 and cfg.train_dataloader.batch_size == 2  # x 8 GPUs = 16
    assert cfg.model.data_preprocessor.size == (512, 512)
    assert cfg.model.decode_head.type == 'UPerHead' and cfg.model.decode_head.channels == 512
    aux = cfg.model.auxiliary_head
    assert aux.type == 'FCNHead' and aux.loss_decode.loss_weight == 0.4
    assert cfg.model.backbone.drop_path_rate == 0.3


@pytest.mark.parametrize('path', [p for p in ROWS if p.name.startswith('mask-rcnn') and 'pvt' in p.name],
                         ids=lambda p: p.name)
def test_mask_rcnn_pvt_configs_follow_the_pvt_1x_recipe(path):
    cfg = load(path)
    warmup, steps = cfg.param_scheduler
    assert (warmup.type, warmup.by_epoch, warmup.begin, warmup.end) == ('LinearLR', False, 0, 500)
    assert (steps.type, steps.by_epoch, steps.milestones) == ('MultiStepLR', True, [8, 11])
    assert cfg.train_cfg.max_epochs == 12 and cfg.train_dataloader.batch_size == 2  # x 8 GPUs = 16
    assert [t.type for t in cfg.train_dataloader.dataset.pipeline] == [
        'LoadImageFromFile', 'LoadAnnotations', 'Resize', 'RandomFlip', 'PackDetInputs']
    resize = cfg.train_dataloader.dataset.pipeline[2]
    assert resize.scale == (1333, 800) and resize.keep_ratio  # single scale
    assert cfg.optim_wrapper.type == 'OptimWrapper'
    assert cfg.optim_wrapper.optimizer == dict(type='AdamW', lr=2e-4, weight_decay=1e-4)
    assert cfg.model.backbone.drop_path_rate == 0.1


SWIN_SCALES = [(s, 1333) for s in range(480, 801, 32)]  # short side 480-800 in steps of 32, long side <= 1333


@pytest.mark.parametrize('path', [p for p in ROWS if p.name.startswith('mask-rcnn') and 'swin' in p.name],
                         ids=lambda p: p.name)
def test_mask_rcnn_swin_configs_follow_the_official_swin_1x_multiscale_crop_recipe(path):
    cfg = load(path)
    # 12 epochs of 16 images, 500-iteration linear warm-up from lr x 0.001, lr x 0.1 after epochs 8 and 11
    assert cfg.train_cfg.max_epochs == 12 and cfg.train_dataloader.batch_size == 2  # x 8 GPUs = 16
    warmup, steps = cfg.param_scheduler
    assert (warmup.type, warmup.start_factor, warmup.by_epoch, warmup.begin, warmup.end) == (
        'LinearLR', 0.001, False, 0, 500)
    assert (steps.type, steps.by_epoch, steps.begin, steps.end, steps.milestones, steps.gamma) == (
        'MultiStepLR', True, 0, 12, [8, 11], 0.1)
    # AdamW lr 1e-4, betas (0.9, 0.999), weight decay 0.05, fp16 (dynamic loss scale), drop path 0.1
    assert cfg.optim_wrapper.type == 'AmpOptimWrapper' and cfg.optim_wrapper.get('loss_scale', 'dynamic') == 'dynamic'
    assert cfg.optim_wrapper.optimizer == dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05)
    assert cfg.optim_wrapper.get('clip_grad') is None
    assert cfg.model.backbone.drop_path_rate == 0.1
    # multi-scale training, or (DETR's policy) resize to 400/500/600, crop 384-600, resize to 480-800
    pipeline = cfg.train_dataloader.dataset.pipeline
    assert [t.type for t in pipeline] == [
        'LoadImageFromFile', 'LoadAnnotations', 'RandomFlip', 'RandomChoice', 'PackDetInputs']
    assert pipeline[1].with_bbox and pipeline[1].with_mask and pipeline[2].prob == 0.5
    scales, crop = pipeline[3].transforms
    (resize, ) = scales
    assert (resize.type, resize.scales, resize.keep_ratio) == ('RandomChoiceResize', SWIN_SCALES, True)
    first, cropping, second = crop
    assert (first.type, first.scales, first.keep_ratio) == (
        'RandomChoiceResize', [(400, 1333), (500, 1333), (600, 1333)], True)
    assert (cropping.type, cropping.crop_type, cropping.crop_size, cropping.allow_negative_crop) == (
        'RandomCrop', 'absolute_range', (384, 600), True)
    assert (second.type, second.scales, second.keep_ratio) == ('RandomChoiceResize', SWIN_SCALES, True)
    # evaluation at (1333, 800)
    test = {t.type: t for t in cfg.test_dataloader.dataset.pipeline}
    assert test['Resize'].scale == (1333, 800) and test['Resize'].keep_ratio


@pytest.mark.parametrize('path', ROWS, ids=ids)
def test_norms_position_tables_and_attention_scalars_do_not_decay(path):
    cfg = load(path)
    decay = cfg.optim_wrapper.optimizer.weight_decay
    model = build_model(path)
    wrapper = dict(cfg.optim_wrapper, type='OptimWrapper')  # the same groups as fp16's AmpOptimWrapper (GPU only)
    wrapper.pop('loss_scale', None)
    groups = build_optim_wrapper(model, wrapper).optimizer.param_groups
    by_param = {id(p): g['weight_decay'] for g in groups for p in g['params']}
    norms = {f'backbone.{n}.{k}' for n, m in model.backbone.named_modules() if isinstance(m, torch.nn.LayerNorm)
             for k in ('weight', 'bias')}
    exempt_names = ('pos_embed', 'relative_position_bias_table', 'positional_encoding', 'attn.scale', 'attn.alpha',
                    'step_mlp.0.bias', 'step_mlp.2.bias')
    seen = set()
    for name, p in model.named_parameters():
        if not name.startswith('backbone.'):
            continue
        exempt = name in norms or any(e in name for e in exempt_names)
        seen |= {e for e in exempt_names if e in name}
        assert by_param[id(p)] == (0.0 if exempt else decay), name
    family, row = ROWS[path][1:]
    expected = {'pvt': {'pos_embed'}, 'swin': {'relative_position_bias_table'}}[family]
    expected |= {'lisa': {'positional_encoding', 'attn.scale', 'attn.alpha', 'step_mlp.0.bias', 'step_mlp.2.bias'},
                 'flatten': {'positional_encoding', 'attn.scale'}}.get(row, set())
    assert seen == expected


def lisa_row_of(path: Path) -> Path:
    """The LiSA config of the same head and backbone as ``path``."""
    scope, family, _ = ROWS[path]
    head = path.name.split('_')[0]
    (lisa, ) = [p for p in ROWS if ROWS[p] == (scope, family, 'lisa') and p.name.split('_')[0] == head]
    return lisa


@pytest.mark.parametrize('path', [p for p in ROWS if ROWS[p][2] != 'lisa'], ids=lambda p: p.name)
def test_baseline_rows_differ_from_the_lisa_row_only_in_the_attention_and_the_weights(path):
    lisa = lisa_row_of(path)
    assert Config._get_base_files(str(path)) == [f'./{lisa.name}']
    changed = config_diff(load(path).to_dict(), load(lisa).to_dict())
    assert changed and all(c.startswith(('model.backbone.attn_cfgs', 'model.backbone.init_cfg.checkpoint'))
                           or c == 'pretrained' for c in changed), changed


def test_backbone_dicts_live_in_one_base_fragment_per_backbone():
    # every config builds its backbone from configs/_base_/models/<family>.py: no other config
    # names a LiSA backbone type, and only the ablations (one attention setting each) name the
    # attention argument. The long-range probe builds its own small ViT, not a paper backbone.
    fragments = ROOT / 'configs' / '_base_' / 'models'
    ablations = ROOT / 'configs' / 'classification' / 'ablations'
    probe = ROOT / 'configs' / 'long_range'
    for path in (ROOT / 'configs').rglob('*.py'):
        if fragments in path.parents or path.parent == probe:
            continue
        text = path.read_text()
        backbones = ('LiSAPVT', 'LiSASwinTransformer', 'LiSAViT', 'LiSABiFormer')
        assert not any(f"type='{t}'" in text for t in backbones), path
        assert 'attn_cfgs=' not in text or path.parent == ablations, path
    for family, backbone in (('pvt', 'LiSAPVT'), ('swin', 'LiSASwinTransformer'), ('deit', 'LiSAViT'),
                             ('biformer', 'LiSABiFormer')):
        assert (fragments / f'{family}.py').read_text().count(f"type='{backbone}'") == 1


def config_diff(a, b, path=''):
    """Paths (dotted, list items as [i]) where two resolved config trees differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in config_diff(a.get(k, '<missing>'), b.get(k, '<missing>'), f'{path}.{k}' if path else k)]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b) and not (
            all(isinstance(x, (int, float)) for x in [*a, *b])):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in config_diff(x, y, f'{path}[{i}]')]
    return [] if a == b else [path]


# What a CPU demo may change: sizes (images, crops, head widths, RoIs per image, anchors), schedule,
# data location, loader processes, SyncBN -> BN, the pretrained weights and its own helper variables.
DEMO_MAY_CHANGE = (
    'crop_size', 'scale', 'sizes', 'width', 'norm_cfg', 'max_iters', 'data_root', 'randomness', 'pretrained',
    'model.rpn_head.anchor_generator.scales',
    'train_pipeline', 'test_pipeline',
    'data_preprocessor.size', 'model.data_preprocessor.size', 'model.backbone.init_cfg',
    'model.decode_head.norm_cfg', 'model.train_cfg.rcnn.sampler.num',
    'param_scheduler', 'train_cfg.max_iters', 'train_cfg.val_interval',
    'default_hooks.logger.interval', 'default_hooks.checkpoint.interval', 'train_dataloader.batch_size',
    'val_evaluator.ann_file', 'test_evaluator.ann_file',
)
LOADER_MAY_CHANGE = ('num_workers', 'persistent_workers', 'dataset.data_root', 'dataset.ann_file')
PIPELINE_MAY_CHANGE = ('scale', 'crop_size')


def demo_may_change(path: str) -> bool:
    if path.startswith(DEMO_MAY_CHANGE) or path.endswith('._scope_'):  # _scope_: mmengine's bookkeeping
        return True
    if path.startswith('model.') and not path.startswith('model.backbone.') and path.endswith('channels'):
        return True  # neck and head widths; the backbone stays the paper's
    loader, _, rest = path.partition('.')
    if loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        if rest.startswith(LOADER_MAY_CHANGE):
            return True
        if rest.startswith('dataset.pipeline['):
            return rest.split('.')[-1] in PIPELINE_MAY_CHANGE
    return False


@pytest.mark.parametrize('demo', DEMOS, ids=lambda p: p.name)
def test_demo_config_inherits_its_table_config_and_changes_only_sizes_schedule_data_and_norm(demo):
    base = DEMOS[demo]
    assert Config._get_base_files(str(demo)) == [f'../{base.name}']
    demo_cfg, base_cfg = load(demo), load(base)
    changed = config_diff(demo_cfg.to_dict(), base_cfg.to_dict())
    assert changed, 'the demo must at least shrink the images'
    assert [p for p in changed if not demo_may_change(p)] == []
    # the schedule's shape is kept: same schedulers in the same order
    assert [s.type for s in demo_cfg.param_scheduler] == [s.type for s in base_cfg.param_scheduler]
    assert 'SyncBN' not in demo_cfg.pretty_text
    # the backbone starts from the demo's classifier (tools/demo.py), loaded as the paper's configs load theirs
    assert demo_cfg.model.backbone.init_cfg == {**base_cfg.model.backbone.init_cfg, 'checkpoint': demo_cfg.pretrained}
