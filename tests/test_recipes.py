"""The classification configs against the recipes of the original authors' code, value by value.

References, written out here from the originals (section 6 of the paper's notes restates them):
DeiT's ``main.py`` (facebookresearch/deit) for every DeiT-based config (Tables 1 and 5, the
mini-ImageNet ablations); BiFormer's ``main.py``, ``configs/train_args.yaml``, README and
``scripts/train.sh`` (rayleizhu/BiFormer); FLatten's PVT recipe; Swin's. The configs are resolved by
``mmengine.Config.fromfile``; the sampler is built by mmpretrain's registry and drawn from, and the
learning rate of every iteration is computed by mmengine's own schedulers, as the runner builds them.
"""
from __future__ import annotations

import functools
import math
import re
from collections import Counter
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

ROOT = Path(__file__).resolve().parents[1]
CLS = ROOT / 'configs' / 'classification'
ABL = CLS / 'ablations'

# DeiT's main.py, as it trains DeiT-T and DeiT-S (the paper's 72.2 / 79.8): 300 epochs, batch 1024,
# AdamW lr 5e-4 x batch / 512, weight decay 0.05, warm-up 5 epochs from 1e-6, cosine (timm's, over
# epochs 0-300, stepped once per epoch) to 1e-5, drop path 0.1, repeated augmentation with 3
# repeats, no gradient clipping.
DEIT = dict(epochs=300, batch=1024, lr=5e-4 * 1024 / 512, weight_decay=0.05, warmup_epochs=5, warmup_lr=1e-6,
            min_lr=1e-5, drop_path=0.1, repeats=3)
DEIT_CONFIGS = sorted([*CLS.glob('deit-*.py'), *ABL.glob('*.py')])

# BiFormer (rayleizhu/BiFormer): drop path 0.1 for T (main.py's default), 0.15 for S (README, scripts/train.sh);
# S trained on 2 nodes x 8 GPUs x 128 at lr 5e-4 x 2048 / 512 (scripts/train.sh, main.py's linear scaling).
BIFORMER_DROP_PATH = {'tiny': 0.1, 'small': 0.15}
BIFORMER_S_BATCH = 2 * 8 * 128

# Which recipe each family's comment must name.
RECIPE_NAMES = {'deit': "Recipe: DeiT's", 'pvt': "Recipe: FLatten's PVT recipe", 'swin': "Recipe: Swin's",
                'biformer': "Recipe: BiFormer's"}


@functools.cache
def load(path: Path) -> Config:
    """The resolved config, loaded once per session (tests must not modify it)."""
    return Config.fromfile(str(path))


def per_gpu_batch(path: Path) -> tuple[int, int]:
    """``(GPUs, images per GPU)`` from the config's name, ``..._8xb128_...``."""
    gpus, batch = re.search(r'_(\d+)xb(\d+)[_-]', path.name).groups()
    return int(gpus), int(batch)


def learning_rates(cfg: Config, epoch_length: int, epochs: int) -> list[list[float]]:
    """The lr of every iteration of the first ``epochs`` epochs, ``[epoch][iteration]``, as the
    runner's schedulers set it.

    Built as ``Runner._build_param_scheduler`` builds them (``end`` defaults to the last epoch,
    ``epoch_length`` for the iteration-based ones) and stepped as ``ParamSchedulerHook`` steps
    them: iteration-based after every iteration, epoch-based after every epoch.
    """
    from mmengine.registry import PARAM_SCHEDULERS
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=cfg.optim_wrapper.optimizer.lr)
    schedulers = [PARAM_SCHEDULERS.build({'end': cfg.train_cfg.max_epochs, **s},
                                         default_args=dict(optimizer=optimizer, epoch_length=epoch_length))
                  for s in cfg.param_scheduler]
    rates = []
    for _ in range(epochs):
        rates.append([])
        for _ in range(epoch_length):
            rates[-1].append(optimizer.param_groups[0]['lr'])
            optimizer.step()
            for s in schedulers:
                if not s.by_epoch:
                    s.step()
        for s in schedulers:
            if s.by_epoch:
                s.step()
    return rates


def deit_lr(epoch: int) -> float:
    """DeiT's lr in ``epoch``: timm's CosineLRScheduler with linear warm-up, stepped once per epoch."""
    d = DEIT
    if epoch < d['warmup_epochs']:
        return d['warmup_lr'] + epoch * (d['lr'] - d['warmup_lr']) / d['warmup_epochs']
    return d['min_lr'] + 0.5 * (d['lr'] - d['min_lr']) * (1 + math.cos(math.pi * epoch / d['epochs']))


# ---------------------------------------------------------------------------- DeiT


def test_every_deit_based_config_is_found():
    # Table 1's DeiT rows (224 and 384 px, three attentions; DeiT-S at 224), Table 5's two more, 18 ablations
    assert len(DEIT_CONFIGS) == 9 + 2 + 18


@pytest.mark.parametrize('path', DEIT_CONFIGS, ids=lambda p: p.name)
def test_deit_based_config_has_deits_sampler_clipping_drop_path_warmup_and_lr(path):
    cfg = load(path)
    gpus, batch = per_gpu_batch(path)
    assert cfg.train_dataloader.batch_size == batch and gpus * batch == DEIT['batch']
    sampler = {k: v for k, v in cfg.train_dataloader.sampler.items() if k != '_scope_'}  # mmpretrain's registry
    assert sampler == dict(type='RepeatAugSampler', num_repeats=DEIT['repeats'], shuffle=True)
    assert cfg.optim_wrapper.get('clip_grad') is None
    assert cfg.model.backbone.drop_path_rate == DEIT['drop_path']
    opt = cfg.optim_wrapper.optimizer
    assert (opt.type, opt.lr, opt.weight_decay) == ('AdamW', DEIT['lr'], DEIT['weight_decay'])
    assert cfg.train_cfg.max_epochs == DEIT['epochs'] and cfg.auto_scale_lr.base_batch_size == DEIT['batch']
    warmup, cosine = cfg.param_scheduler
    assert (warmup.type, warmup.end, opt.lr * warmup.start_factor) == ('LinearLR', DEIT['warmup_epochs'],
                                                                       pytest.approx(DEIT['warmup_lr']))
    assert (cosine.type, cosine.begin, cosine.eta_min) == ('CosineAnnealingLR', DEIT['warmup_epochs'], DEIT['min_lr'])


def test_deit_warmup_is_deits_at_every_epoch_start_and_rises_per_iteration():
    """At ImageNet's 1251 iterations per epoch (1,281,167 images / 1024): the lr of each epoch's
    first iteration is DeiT's lr of that epoch (mmengine's LinearLR reaches the peak one iteration
    early, 1 / 6254 of the warm-up); within an epoch it rises per iteration, where DeiT's steps
    once per epoch (the config comment states it)."""
    epoch_length = 1_281_167 // DEIT['batch']
    rates = learning_rates(load(CLS / 'deit-tiny_lisa_8xb128_in1k.py'), epoch_length, DEIT['warmup_epochs'] + 1)
    for e, epoch in enumerate(rates):
        assert epoch[0] == pytest.approx(deit_lr(e), rel=1e-3), e
    assert rates[0][0] == pytest.approx(DEIT['warmup_lr']) and rates[0][1] > rates[0][0]
    assert max(rates[-1]) == pytest.approx(DEIT['lr'])


def test_deit_cosine_is_within_1_6_percent_of_the_peak_lr_from_deits_at_every_epoch():
    """mmengine's cosine spans epochs 5-300 where timm's in DeiT spans 0-300: at most 1.51 % of the
    peak lr apart, at epoch 108 (the config comment states it)."""
    rates = learning_rates(load(CLS / 'deit-tiny_lisa_8xb128_in1k.py'), 1, DEIT['epochs'])
    starts = [epoch[0] for epoch in rates]
    gaps = [abs(starts[e] - deit_lr(e)) / DEIT['lr'] for e in range(DEIT['warmup_epochs'], DEIT['epochs'])]
    assert 0.015 < max(gaps) < 0.016 and gaps.index(max(gaps)) + DEIT['warmup_epochs'] == 108
    assert starts[DEIT['warmup_epochs']] == pytest.approx(DEIT['lr'])
    assert starts[-1] == pytest.approx(DEIT['min_lr'], abs=1e-7)


def test_deit_sampler_draws_each_chosen_image_three_times_in_a_row_and_keeps_the_epoch_length():
    from mmpretrain.registry import DATA_SAMPLERS
    cfg = load(CLS / 'deit-tiny_lisa_8xb128_in1k.py')
    sampler = DATA_SAMPLERS.build(cfg.train_dataloader.sampler, default_args=dict(dataset=list(range(30)), seed=0))
    drawn = list(sampler)
    assert len(drawn) == len(sampler) == 30  # an epoch is as long as without repeats
    assert set(Counter(drawn).values()) == {DEIT['repeats']} and len(set(drawn)) == 10
    assert all(drawn[i] == drawn[i + 1] == drawn[i + 2] for i in range(0, 30, 3))
    sampler.set_epoch(1)
    assert list(sampler) != drawn  # a new shuffle each epoch


# ---------------------------------------------------------------------------- the other families


@pytest.mark.parametrize('model', ['pvt-tiny', 'pvt-small'])
def test_pvt_configs_follow_flattens_pvt_recipe_without_repeated_augmentation_or_clipping(model):
    for row in ('softmax', 'flatten', 'lisa'):
        cfg = load(CLS / f'{model}_{row}_8xb128_in1k.py')
        assert cfg.train_dataloader.sampler.type == 'DefaultSampler' and cfg.optim_wrapper.get('clip_grad') is None


def test_swin_configs_follow_swins_recipe_clipping_at_5_without_repeated_augmentation():
    for row in ('softmax', 'flatten', 'lisa'):
        cfg = load(CLS / f'swin-tiny_{row}_8xb128_in1k.py')
        assert cfg.train_dataloader.sampler.type == 'DefaultSampler' and cfg.optim_wrapper.clip_grad == dict(
            max_norm=5.0)


@pytest.mark.parametrize('size', ['tiny', 'small', 'base'])
def test_biformer_configs_take_biformers_drop_path_and_its_lr_per_image(size):
    for row in ('bra', 'lisa'):
        path = CLS / f'biformer-{size}_{row}_8xb128_in1k.py'
        cfg = load(path)
        if size in BIFORMER_DROP_PATH:
            assert cfg.model.backbone.drop_path_rate == BIFORMER_DROP_PATH[size]
        else:  # no source states B's: the config must say that its value is a choice
            assert 'is a choice' in (CLS / f'biformer-{size}_bra_8xb128_in1k.py').read_text()
        gpus, batch = per_gpu_batch(path)
        lr = cfg.optim_wrapper.optimizer.lr
        assert lr == 5e-4 * gpus * batch / 512  # BiFormer's (DeiT's) linear rule
        # at BiFormer-S's own 2048 images per step, auto_scale_lr gives BiFormer's lr
        assert lr * BIFORMER_S_BATCH / cfg.auto_scale_lr.base_batch_size == pytest.approx(5e-4 * BIFORMER_S_BATCH / 512)


# ---------------------------------------------------------------------------- the comments


def family(path: Path) -> str:
    return 'deit' if path.parent == ABL else path.name.split('-')[0]


@pytest.mark.parametrize('path', sorted([*CLS.glob('*.py'), *ABL.glob('*.py')]), ids=lambda p: p.name)
def test_every_classification_config_names_its_recipe_in_its_comment(path):
    comment = ' '.join(line[1:].strip() for line in path.read_text().splitlines() if line.startswith('#'))
    assert RECIPE_NAMES[family(path)] in comment
    assert 'depart' in comment.lower()  # its departures, or that it has none of its own
