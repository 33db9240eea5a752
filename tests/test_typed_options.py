"""Every option of every registered attention and backbone is checked against its type hint when
the class is built: a flag takes only True or False (numpy's too), a count no
bool, and the error names the class, the option, the value and what is valid.

The options are read here from the constructors' own hints (following ``**kwargs`` to the base
class), independently of the check, so an option left unchecked shows up as a failing case.
"""
from __future__ import annotations

import inspect
import re
import types
import typing
from contextlib import AbstractContextManager
from typing import Literal, get_args, get_origin

import numpy as np
import pytest
from test_backbone_common import BACKBONES

import projects.lisa.registry  # noqa: F401  (registers the backbones)
from projects.lisa.models import backbones
from projects.lisa.models.attention import (
    ATTENTIONS,
    AngularAttention,
    FocusedLinearAttention,
    LiSAAttention,
    ShiftedWindowAttention,
    build_attention,
)
from projects.lisa.models.backbones import LiSAPVT, LiSASwinTransformer, LiSAViT
from projects.lisa.models.backbones.blocks import TransformerBlock

ATTENTION_CLASSES = [ATTENTIONS[name] for name in sorted(ATTENTIONS)]
BACKBONE_CLASSES = [getattr(backbones, name) for name in backbones.__all__]  # what projects.lisa registers
SMALL = {b.cls: b.kwargs for b in BACKBONES}  # a small model of each backbone (test_backbone_common)
SCALARS = (bool, int, float, str, type(None))


def options(cls: type) -> dict[str, tuple[object, object]]:
    """``{name: (hint, default)}`` of the constructor's annotated parameters, a subclass's first,
    then those of the base class that its ``**kwargs`` go to."""
    found = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get('__init__')
        if not inspect.isfunction(init):  # inherited, or object's
            continue
        init = inspect.unwrap(init)  # through decorators (functools.wraps)
        params = inspect.signature(init).parameters
        for name, hint in typing.get_type_hints(init).items():
            if name != 'return':
                found.setdefault(name, (hint, params[name].default))
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return found
    return found


def members(hint: object) -> tuple:
    return get_args(hint) if get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def numpy_defaults(cls: type, kind: type, convert) -> dict[str, object]:
    """``convert(default)`` of each option of ``cls`` typed ``kind`` whose default is a ``kind`` (a numpy value)."""
    return {name: convert(default) for name, (hint, default) in options(cls).items()
            if kind in members(hint) and type(default) is kind}


def takes(member: object, value: object) -> bool:
    """Whether one scalar (or Literal) member of a hint takes ``value``."""
    if get_origin(member) is Literal:
        return any(type(value) is type(v) and value == v for v in get_args(member))
    return {bool: type(value) is bool, int: type(value) is int, float: type(value) in (int, float),
            str: type(value) is str, type(None): value is None}[member]


def wrong_value(hint: object) -> object | None:
    """A value of the wrong type for a scalar option (``'no'`` for a flag, else ``True``); None for
    configs and sequences, which the cases below leave out."""
    if not all(m in SCALARS or get_origin(m) is Literal for m in members(hint)):
        return None
    value = 'no' if bool in members(hint) else True
    assert not any(takes(m, value) for m in members(hint))
    return value


def cases(classes: list[type]) -> list:
    return [pytest.param(cls, name, wrong_value(hint), id=f'{cls.__name__}-{name}')
            for cls in classes for name, (hint, _) in options(cls).items() if wrong_value(hint) is not None]


def refused(cls: type, name: str, value: object) -> AbstractContextManager:
    return pytest.raises(ValueError, match=rf'^{cls.__name__}: {name}={re.escape(repr(value))} must be ')


@pytest.mark.parametrize('cls, name, value', cases(ATTENTION_CLASSES))
def test_every_attention_refuses_a_wrong_typed_option_naming_it(cls, name, value):
    with refused(cls, name, value):
        cls(**{'dim': 8, 'num_heads': 2, name: value})


@pytest.mark.parametrize('cls, name, value', cases(BACKBONE_CLASSES))
def test_every_backbone_refuses_a_wrong_typed_option_naming_it(cls, name, value):
    with refused(cls, name, value):
        cls(**{**SMALL[cls], name: value})


def test_the_cases_cover_every_registered_class_and_its_boolean_and_integer_flags():
    covered = {(p.values[0], p.values[1]) for p in cases(ATTENTION_CLASSES + BACKBONE_CLASSES)}
    assert {(cls, 'qkv_bias') for cls in ATTENTION_CLASSES + BACKBONE_CLASSES} <= covered
    assert {(cls, 'with_cp') for cls in BACKBONE_CLASSES} <= covered
    assert {(FocusedLinearAttention, 'dwc'), (ShiftedWindowAttention, 'shift'), (LiSAAttention, 'num_steps'),
            (AngularAttention, 'focusing')} <= covered


@pytest.mark.parametrize('build, message', [
    (lambda: FocusedLinearAttention(8, 2, qkv_bias='no'), "FocusedLinearAttention: qkv_bias='no' must be True or "
                                                          'False'),
    (lambda: FocusedLinearAttention(8, 2, dwc='no'), "FocusedLinearAttention: dwc='no' must be True or False"),
    (lambda: ShiftedWindowAttention(8, 2, shift='no'), "ShiftedWindowAttention: shift='no' must be True or False "
                                                       'or None'),
    (lambda: LiSAAttention(8, 2, num_steps=True), "LiSAAttention: num_steps=True must be an int or a float or 'inf'"),
    (lambda: AngularAttention(8, 2, focusing='no'), "AngularAttention: focusing='no' must be True or False"),
    (lambda: LiSAViT(**SMALL[LiSAViT], with_cp='no'), "LiSAViT: with_cp='no' must be True or False"),
    (lambda: LiSAPVT(**SMALL[LiSAPVT], out_indices=(0, True)),
     'LiSAPVT: out_indices=(0, True) must be an int or a list or tuple of int'),
    # the upstream backbones' arguments (mmdet's PVT, mmseg's Swin) take the same check
    (lambda: LiSAPVT(embed_dims=8, num_layers=[1] * 4, qkv_bias='no'), "LiSAPVT: qkv_bias='no' must be True or False"),
    (lambda: LiSASwinTransformer(embed_dims=8, depths=[1] * 4, num_heads=[1] * 4, with_cp='no'),
     "LiSASwinTransformer: with_cp='no' must be True or False"),
])
def test_wrong_typed_options_are_refused_saying_what_is_valid(build, message):
    with pytest.raises(ValueError, match=f'^{re.escape(message)}$'):
        build()


@pytest.mark.parametrize('cls', ATTENTION_CLASSES, ids=lambda c: c.__name__)
def test_every_attention_takes_numpy_flags(cls):
    flags = numpy_defaults(cls, bool, np.bool_)
    attn = cls(**{'dim': 8, 'num_heads': 2, **flags, 'qkv_bias': np.False_})
    assert attn.qkv.bias is None


@pytest.mark.parametrize('cls', BACKBONE_CLASSES, ids=lambda c: c.__name__)
def test_every_backbone_takes_numpy_flags(cls):
    flags = numpy_defaults(cls, bool, np.bool_)
    model = cls(**{**SMALL[cls], **flags, 'qkv_bias': np.False_, 'with_cp': np.True_})
    blocks = [m for m in model.modules() if isinstance(m, TransformerBlock)]
    assert blocks and all(b.with_cp and b.attn.qkv.bias is None for b in blocks)


@pytest.mark.parametrize('cls', ATTENTION_CLASSES + BACKBONE_CLASSES, ids=lambda c: c.__name__)
def test_a_misspelt_option_is_refused_with_the_nearest_valid_names(cls):
    base = SMALL[cls] if cls in SMALL else {'dim': 8, 'num_heads': 2}
    with pytest.raises(TypeError, match=rf'^{cls.__name__}: unknown option qkv_bais=True; did you mean qkv_bias\?'
                                        r" valid options: \[.*'qkv_bias'"):
        cls(**base, qkv_bais=True)


@pytest.mark.parametrize('build, message', [
    (lambda: LiSAViT(**{**SMALL[LiSAViT], 'atn_cfgs': dict(type='lisa')}),
     "LiSAViT: unknown option atn_cfgs={'type': 'lisa'}; did you mean attn_cfgs"),
    # an option of LiSA's base class (KernelAttention), misspelt in a config: named for the type built
    (lambda: build_attention(dict(type='lisa', focussing=False), 8, 2),
     'LiSAAttention: unknown option focussing=False; did you mean focusing'),
    (lambda: build_attention(dict(type='lisa', num_step=3), 8, 2),
     'LiSAAttention: unknown option num_step=3; did you mean num_steps'),
])
def test_misspelt_options_name_the_valid_one(build, message):
    with pytest.raises(TypeError, match=f'^{re.escape(message)}'):
        build()


@pytest.mark.parametrize('cls', ATTENTION_CLASSES, ids=lambda c: c.__name__)
def test_every_attention_takes_numpy_integers_as_ints(cls):
    counts = numpy_defaults(cls, int, np.int64)
    attn = cls(**{**counts, 'dim': np.int64(8), 'num_heads': np.int64(2)})
    assert sum(p.numel() for p in attn.parameters()) == sum(p.numel() for p in cls(8, 2).parameters())


def test_numpy_num_steps_builds_the_same_walk_as_an_int():
    attn = build_attention(dict(type='lisa', num_steps=np.int64(3)), 8, 2)
    assert type(attn.num_steps) is int and attn.num_steps == 3
    assert attn.step_mlp[-1].out_features == 3
