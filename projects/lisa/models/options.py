"""One typed check of constructor options, read from the constructor's type hints.

:func:`checked_init` makes every construction of a class check the options it is given
(:func:`check_options`) before its ``__init__`` runs: the attention registry applies it to each
registered type, :class:`.backbones.base.LiSABackbone` to each backbone. A hint is checked where
it is made of

* ``bool``: True or False (numpy's too), not ``'no'``, 0 or None;
* ``int``: an int (numpy's too, passed on as a Python int), not a bool; ``float``: an int or a float
  (numpy's too), not a bool;
* ``str``, ``None``, ``Literal[...]`` (the values listed, of their type), unions of these, and
  ``Sequence[X]``: a sequence (a list, a tuple; not a str) of items that ``X`` takes.

Other hints (config dicts, modules) are left to the code that uses the value, and so is a union
holding one. An option the constructor does not take stops with :class:`UnknownOptionError`, which
names the nearest valid names. Standard library only (the attentions depend on torch alone): a numpy bool can only
exist once numpy is imported, so it is looked up there.
"""
from __future__ import annotations

import difflib
import functools
import inspect
import numbers
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Literal, get_args, get_origin

SCALARS: dict[object, str] = {bool: 'True or False', int: 'an int', float: 'a float', str: 'a str',
                              type(None): 'None'}


def _members(hint: object) -> tuple:
    return get_args(hint) if get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def _is_checked(hint: object) -> bool:
    """Whether :func:`accepts` checks ``hint`` (else it takes any value)."""
    return all(m in SCALARS or get_origin(m) is Literal or (get_origin(m) is Sequence and _is_checked(get_args(m)[0]))
               for m in _members(hint))


def accepts(hint: object, value: object) -> bool:
    """Whether ``value`` is of the type ``hint`` names (True for the hints this module does not check)."""
    if not _is_checked(hint):
        return True
    for member in _members(hint):
        origin = get_origin(member)
        if origin is Literal:
            ok = any(type(value) is type(v) and value == v for v in get_args(member))
        elif origin is Sequence:
            ok = (isinstance(value, Sequence) and not isinstance(value, str)
                  and all(accepts(get_args(member)[0], v) for v in value))
        elif member is bool:
            numpy = sys.modules.get('numpy')
            ok = isinstance(value, bool) or (numpy is not None and isinstance(value, numpy.bool_))
        elif member is int:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        elif member is float:
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        else:
            ok = isinstance(value, member)  # str, NoneType
        if ok:
            return True
    return False


def describe(hint: object) -> str:
    """What ``hint`` takes, in words: ``int | None`` -> 'an int or None'."""
    words = []
    for member in _members(hint):
        if get_origin(member) is Literal:
            words.extend(repr(v) for v in get_args(member))
        elif get_origin(member) is Sequence:
            item = get_args(member)[0]
            words.append(f'a list or tuple of {getattr(item, "__name__", item)}')
        else:
            words.append(SCALARS[member])
    return ' or '.join(words)


@functools.cache
def option_hints(cls: type) -> dict[str, object]:
    """The type hints of ``cls``'s constructor parameters; where it takes ``**kwargs``, also those of
    the base class's constructor (where a subclass passes them), a subclass's hint first."""
    hints: dict[str, object] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get('__init__')
        if not inspect.isfunction(init):  # inherited, or object's
            continue
        init = inspect.unwrap(init)  # through checked_init and other functools.wraps decorators
        for name, hint in typing.get_type_hints(init).items():
            if name != 'return':
                hints.setdefault(name, hint)
        if all(p.kind is not p.VAR_KEYWORD for p in inspect.signature(init).parameters.values()):
            break
    return hints


def check_options(cls: type, options: Mapping[str, object], name: str | None = None) -> None:
    """Raise a ValueError for the first of ``options`` that its hint in ``cls``'s constructor does not
    take (:func:`option_hints`), naming the class (``name``, default ``cls``'s), the option, the value
    and what is valid."""
    hints = option_hints(cls)
    for option, value in options.items():
        if option in hints and not accepts(hints[option], value):
            raise ValueError(f'{name or cls.__name__}: {option}={value!r} must be {describe(hints[option])}')


class UnknownOptionError(TypeError):
    """A constructor got an option it does not take; ``option`` is its name (``None`` where not known)."""

    option: str | None = None


def option_names(cls: type) -> list[str]:
    """The names ``cls``'s constructor takes: its parameters and, where it takes ``**kwargs``, those of the
    base class's constructor it passes them to."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get('__init__')
        if not inspect.isfunction(init):
            continue
        params = list(inspect.signature(inspect.unwrap(init)).parameters.values())[1:]  # after self
        names += [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in names]
        if all(p.kind is not p.VAR_KEYWORD for p in params):
            break
    return names


def unknown_option(cls: type, name: str, option: str, value: object) -> UnknownOptionError:
    """The error for ``option=value``, which ``cls`` (called ``name``) does not take, with the nearest valid names."""
    valid = option_names(cls)
    close = difflib.get_close_matches(option, valid, n=3, cutoff=0.6)
    nearest = f'did you mean {" or ".join(close)}? ' if close else ''
    error = UnknownOptionError(f'{name}: unknown option {option}={value!r}; {nearest}valid options: {valid}')
    error.option = option
    return error


def _as_int(hint: object, value: object) -> object:
    """A numpy integer as a Python int where ``hint`` takes an int (the code behind it may test ``isinstance``)."""
    if int in _members(hint) and isinstance(value, numbers.Integral) and not isinstance(value, (bool, int)):
        return int(value)
    return value


def checked_init(cls: type) -> type:
    """``cls`` with its ``__init__`` (its own or inherited) wrapped to :func:`check_options` first,
    so that a direct call and a build from a config are checked alike, and an option it does not take
    named with the nearest valid ones (:func:`unknown_option`); a class already wrapped (registered
    again) is returned as it is."""
    if getattr(cls.__dict__.get('__init__'), 'checks_options', False):
        return cls
    init = cls.__init__
    params = list(inspect.signature(init).parameters.values())[1:]  # after self
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    @functools.wraps(init)
    def __init__(self, *args, **kwargs) -> None:
        name = type(self).__name__
        check_options(cls, {**dict(zip(positional, args)), **kwargs}, name)
        hints = option_hints(cls)
        args = tuple(_as_int(hints.get(k), v) for k, v in zip(positional, args)) + args[len(positional):]
        kwargs = {k: _as_int(hints.get(k), v) for k, v in kwargs.items()}
        try:
            init(self, *args, **kwargs)
        except TypeError as error:  # Python's, or a base class's error for an option of this call
            found = error.option if isinstance(error, UnknownOptionError) else (
                re.search(r"unexpected keyword argument '(\w+)'", str(error)) or [None, None])[1]
            if found not in kwargs:
                raise
            raise unknown_option(type(self), name, found, kwargs[found]) from None

    __init__.checks_options = True
    cls.__init__ = __init__
    return cls
