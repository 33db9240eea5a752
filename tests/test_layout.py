"""The package's layout as properties of its source: layers, no import cycles, one file per name.

Read from the source (``ast``), nothing imported: every ``import`` and ``from ... import`` (also inside
functions) and every ``importlib.import_module`` of a literal or ``f'{__package__}.…'`` name.
"""
from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / 'projects' / 'lisa'

#: Bottom up: a part imports only parts of its own layer or of the layers below it.
LAYERS = (
    {'models', 'synthetic', 'configs'},             # the operator and backbones; generated data
    {'analysis', 'data_checks', 'datasets', 'deploy'},
    {'engine', 'long_range', 'dynamics'},            # run safety (uses the data checks); the studies
    {'registry'},                                    # registers what a config names
    {'apis', 'benchmarks'},                          # what the tools call
)
LAYER = {part: i for i, parts in enumerate(LAYERS) for part in parts}
SHARED_NAMES = {'__init__.py', 'base.py', 'registry.py'}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent.parent).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def imported(path: Path) -> set[str]:
    """The ``projects.lisa`` modules (or names in them) that the file at ``path`` imports."""
    name = module_name(path)
    package = name if path.name == '__init__.py' else name.rsplit('.', 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split('.')[:len(package.split('.')) - node.level + 1] if node.level else []
            module = '.'.join(base + ([node.module] if node.module else []))
            for alias in node.names:  # `from . import sub` imports the module sub, a name of the package otherwise
                sub = f'{module}.{alias.name}'
                found.add(sub if resolve(sub) == sub else module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Call) and getattr(node.func, 'attr', None) == 'import_module' and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant):  # importlib.import_module('projects.lisa.x')
                found.add(str(arg.value))
            elif (isinstance(arg, ast.JoinedStr) and len(arg.values) == 2  # f'{__package__}.datasets.transforms'
                  and getattr(arg.values[0].value, 'id', None) == '__package__'):
                found.add(package + str(getattr(arg.values[1], 'value', '')))
    return {m for m in found if m.startswith('projects.lisa.') and resolve(m)}


def resolve(name: str) -> str | None:
    """The module of the package that ``name`` (a module, or a name defined in one) belongs to."""
    while name.count('.') >= 2:
        relative = Path(*name.split('.')[2:])
        if (PACKAGE / relative).with_suffix('.py').is_file() or (PACKAGE / relative / '__init__.py').is_file():
            return name
        name = name.rsplit('.', 1)[0]
    return None


def graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (a package's ``__init__`` counted as itself)."""
    return {module_name(p): {resolve(m) for m in imported(p)} - {module_name(p)} for p in PACKAGE.rglob('*.py')}


def part(module: str) -> str:
    return module.split('.')[2]


def test_every_part_has_a_layer():
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == '.py' and p.name != '__init__.py') or (p.is_dir() and not p.name.startswith('__'))}
    assert parts == set(LAYER), f'parts without a layer: {parts - set(LAYER)}; layers of no part: {set(LAYER) - parts}'


def test_no_module_imports_from_a_layer_above_its_own():
    upward = sorted(f'{a} -> {b}' for a, targets in graph().items() if a != 'projects.lisa' for b in targets
                    if b != 'projects.lisa' and LAYER[part(b)] > LAYER[part(a)])
    assert not upward, '\n'.join(upward)


def test_no_import_cycles():
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(' -> '.join(path[path.index(nxt):] + [node, nxt]) if nxt in path else f'{node} -> {nxt}')
            elif nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    assert not cycles, '\n'.join(cycles)


def test_no_two_modules_share_a_file_name():
    counts = Counter(p.name for p in PACKAGE.rglob('*.py'))
    assert not {name for name, n in counts.items() if n > 1} - SHARED_NAMES


def test_the_checks_see_imports_of_every_kind():
    """The reader finds a relative, an absolute, a function-level and an ``import_module`` import."""
    names = imported(PACKAGE / 'registry.py')
    assert {'projects.lisa.engine.checkpoint', 'projects.lisa.models.backbones'} <= {resolve(m) for m in names}
    assert 'projects.lisa.long_range.metric' in names  # importlib.import_module(f'{__package__}.{module}')
    assert 'projects.lisa.registry' in {resolve(m) for m in imported(PACKAGE / 'apis' / 'predictions.py')}
