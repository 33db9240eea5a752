"""Issue #38: with only ``type`` changed, the upstream backbones' own expectations hold, part by part.

Each test builds the upstream backbone and the LiSA one from the same arguments (the upstream
vocabulary), and compares what the upstream library promises for that argument: the outputs
given the same weights, the trainable parameters of each ``frozen_stages``, the state dict,
the default model. The walk over every shipped config is ``test_upstream_dropin.py``.
"""
from __future__ import annotations

import pytest
import torch

import projects.lisa  # noqa: F401  (registers the backbones)
from projects.lisa.models.backbones import LiSASwinTransformer

mmpretrain_backbones = pytest.importorskip('mmpretrain.models.backbones')

pytestmark = pytest.mark.usefixtures('seed_and_one_thread')

SWIN = dict(embed_dims=8, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4])


def perturbed(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` initialised, every parameter moved off its init value (so a misplaced weight shows),
    in eval mode (some upstream ``train()`` return None)."""
    model.init_weights()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.eval()
    return model


def assert_same_outputs(ours: torch.nn.Module, reference: torch.nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        got, want = ours(x), reference(x)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- 1. mmpretrain Swin's pad_small_map


@pytest.mark.parametrize('pad_small_map', [None, False, True])  # None: not given, mmpretrain's default (False)
@pytest.mark.parametrize('size', [(224, 224), (224, 233)])     # stage 4: 7 x 7, 7 x 8 (min side = window)
def test_mmpretrain_swin_pad_small_map_as_given_or_its_default_gives_mmpretrain_outputs(pad_small_map, size):
    kwargs = dict(arch=SWIN, img_size=224, out_indices=(0, 1, 2, 3))
    if pad_small_map is not None:
        kwargs['pad_small_map'] = pad_small_map
    reference = perturbed(mmpretrain_backbones.SwinTransformer(**kwargs))
    ours = LiSASwinTransformer(**kwargs).eval()
    ours.load_state_dict(reference.state_dict())
    assert_same_outputs(ours, reference, torch.randn(1, 3, *size))


def test_mmpretrain_swin_without_pad_small_map_refuses_a_map_smaller_than_the_window_as_mmpretrain_does():
    kwargs = dict(arch=SWIN, img_size=224, pad_small_map=False)
    x = torch.randn(1, 3, 190, 190)  # stage 4: 6 x 6 < window 7
    with pytest.raises(AssertionError, match='pad_small_map'):
        mmpretrain_backbones.SwinTransformer(**kwargs)(x)
    with pytest.raises(ValueError, match=r'6x6 map .*window_size=7.*pad_small_map=False'):
        LiSASwinTransformer(**kwargs).eval()(x)
    assert LiSASwinTransformer(**dict(kwargs, pad_small_map=True))(x)[0].shape == (1, 64, 6, 6)
