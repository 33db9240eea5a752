"""The GPU check of the attention family with torch alone: tests, layer benchmark, Table 13 DeiT-T.

Run by ``tools/gpu_check.sh`` from the repository root (``PYTHONPATH=.``) on a
machine that may have no OpenMMLab package: what the steps import needs torch
alone, which ``tests/test_imports.py`` checks in a Python that refuses
``mmengine``, ``mmcv``, ``mmdet``, ``mmseg`` and ``mmpretrain``. Three steps,
each in a fresh Python process:

1. ``tests``: the attention test files (:data:`TEST_FILES`) under pytest with
   every tensor created on ``--device`` by default (``torch.set_default_device``);
2. ``attention``: ``tools/benchmark_attention.py``, one attention layer of
   DeiT-T (C = 192, 3 heads) from 197 to 65,536 tokens;
3. ``deit``: ``tools/benchmark_model.py``, DeiT-T (``projects.lisa.benchmarks.deit``)
   at 224² and 2048² (197 and 16,385 tokens), beside the paper's Table 13;
4. ``resolution``: ``tools/benchmark_resolution.py``, the Table 3 dense models from 512² to 4096²
   (time, peak memory, FLOPs; a training step at 1024² with and without ``with_cp``), LiSA over
   FLatten beside Table 13. It builds the models from their configs, so it needs MMEngine, MMCV and
   MMSegmentation: where they are missing the step is reported as skipped, and the others run.

Writes ``gpu_check.json`` and ``gpu_check.md`` (and each step's own files) to
``--out``; exits non-zero if a step failed. ``--small`` runs tiny sizes and
the tests not marked slow, for CI on the CPU.

This module is also the pytest plugin of step 1 (``-p tools.gpu_check``).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_FILES = ('tests/test_attention_baselines.py', 'tests/test_attention_lisa.py', 'tests/test_attention_local.py',
              'tests/test_positional_resize.py')
DEVICE_ENV = 'LISA_TEST_DEVICE'
# Per step: (full arguments, --small arguments).
STEPS = {
    'attention': ('tools/benchmark_attention.py',
                  ['--sizes', '197', '1024', '4096', '16385', '65536'],
                  ['--sizes', '17', '65', '--repeats', '1', '--warmup', '0']),
    'deit': ('tools/benchmark_model.py',
             ['--img-sizes', '224', '2048'],
             ['--img-sizes', '32', '64', '--repeats', '1', '--warmup', '1']),
    'resolution': ('tools/benchmark_resolution.py',
                   ['--sizes', '512', '1024', '2048', '4096', '--train-size', '1024'],
                   ['--sizes', '64', '128', '--families', 'pvt', '--train-size', '64', '--repeats', '1',
                    '--warmup', '0', '--threads', '1', '--backends', 'eager', '--profile-size', '0']),
}
#: Step -> the packages it needs beyond torch.
NEEDS = {'resolution': ('mmengine', 'mmcv', 'mmseg')}


def pytest_configure(config) -> None:
    """Plugin hook of step 1: create tensors on ``$LISA_TEST_DEVICE``."""
    import torch

    torch.set_default_device(os.environ.get(DEVICE_ENV, 'cpu'))


def run_step(name: str, cmd: list[str], out: Path, env: dict | None = None) -> dict:
    """Run one step, its output to ``out/NAME.log``; returns its status and wall time."""
    start = time.perf_counter()
    print(f'[gpu_check] {name}: {" ".join(cmd[1:])}', flush=True)
    with open(out / f'{name}.log', 'w') as log:
        rc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=log,
                            stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - start
    print(f'[gpu_check] {name}: exit {rc} after {seconds:.0f} s', flush=True)
    return {'returncode': rc, 'seconds': round(seconds, 1), 'log': f'{name}.log'}


def test_summary(junit: Path) -> dict:
    """Counts and the failed test ids from pytest's JUnit XML."""
    if not junit.exists():
        return {}
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == 'testsuite' else suite.find('testsuite')
    failed = [f"{case.get('classname')}::{case.get('name')}" for case in suite.iter('testcase')
              if case.find('failure') is not None or case.find('error') is not None]
    counts = {k: int(suite.get(k, 0)) for k in ('tests', 'failures', 'errors', 'skipped')}
    return {**counts, 'passed': counts['tests'] - counts['failures'] - counts['errors'] - counts['skipped'],
            'failed': failed}


def report(results: dict) -> str:
    """Markdown: the setting, the tests, and each benchmark's own table."""
    tests = results['steps']['tests']
    lines = [f"# GPU check: {results['device_name']}", '',
             f"torch {results['torch']}, device `{results['device']}`{' (small sizes)' if results['small'] else ''}, "
             f"{results['seconds']:.0f} s in all.", '', '## Attention tests', '']
    if 'tests' in tests:
        lines.append(f"{tests['passed']} passed, {tests['failures'] + tests['errors']} failed, "
                     f"{tests['skipped']} skipped ({', '.join(TEST_FILES)}), {tests['seconds']:.0f} s.")
        lines += [f'- failed: `{t}`' for t in tests['failed']]
    else:
        lines.append(f"pytest exited {tests['returncode']} without a report: see `{tests['log']}`.")
    for name, title in (('attention', 'Attention layer (tools/benchmark_attention.py)'),
                        ('deit', "DeiT-T beside the paper's Table 13 (tools/benchmark_model.py)"),
                        ('resolution', 'Dense models against the image size (tools/benchmark_resolution.py)')):
        step = results['steps'].get(name)
        if step is None:
            continue
        lines += ['', f'## {title}', '']
        table = Path(results['out']) / name / 'table.md'
        if 'skipped' in step:
            lines.append(f"skipped: {step['skipped']}.")
        elif step['returncode'] == 0 and table.exists():
            lines.append(table.read_text().strip())
        else:
            lines.append(f"failed (exit {step['returncode']}): see `{step['log']}`.")
    if 'resolution' in results:
        lines += ['', "### LiSA over FLatten beside the paper's Table 13", '', results['resolution']]
    return '\n'.join(lines) + '\n'


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--device', default='auto', help="'cuda', 'cpu' or 'auto' (cuda when available)")
    parser.add_argument('--small', action='store_true', help='tiny sizes and the tests not marked slow (CI)')
    parser.add_argument('--out', type=Path, default=Path('work_dirs/gpu_check'))
    args = parser.parse_args(argv)
    import torch

    if args.device == 'auto':
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if args.device not in ('cpu', 'cuda') or (args.device == 'cuda' and not torch.cuda.is_available()):
        parser.error(f"--device={args.device!r} must be 'cpu', 'auto', or 'cuda' on a machine with CUDA")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    junit = out / 'tests.xml'
    junit.unlink(missing_ok=True)
    pytest_args = ['-q', '-p', 'tools.gpu_check', f'--junitxml={junit}', *(['-m', 'not slow'] if args.small else []),
                   *TEST_FILES]
    env = {'PYTHONPATH': os.pathsep.join(filter(None, (str(ROOT), os.environ.get('PYTHONPATH'))))}
    steps = {'tests': run_step('tests', [sys.executable, '-m', 'pytest', *pytest_args], out,
                               {**env, DEVICE_ENV: args.device})}
    steps['tests'].update(test_summary(junit))
    for name, (script, full, small) in STEPS.items():
        missing = [m for m in NEEDS.get(name, ()) if importlib.util.find_spec(m) is None]
        if missing:
            steps[name] = {'returncode': None, 'skipped': f'needs {", ".join(missing)} (`make install`)'}
            print(f'[gpu_check] {name}: {steps[name]["skipped"]}', flush=True)
            continue
        cmd = [sys.executable, script, *(small if args.small else full), '--device', args.device,
               '--out', str(out / name), '--markdown', str(out / name / 'table.md')]
        steps[name] = run_step(name, cmd, out, env)
    results = {
        'device': args.device, 'small': args.small, 'torch': torch.__version__,
        'device_name': torch.cuda.get_device_name() if args.device == 'cuda' else 'CPU',
        'seconds': round(time.perf_counter() - start, 1), 'out': str(out), 'steps': steps}
    for name, file in (('attention', 'attention/attention_benchmark.json'), ('deit', 'deit/benchmark_model.json')):
        if (out / file).exists():
            results[name] = json.loads((out / file).read_text())
    if steps['resolution'].get('returncode') == 0:
        from projects.lisa.benchmarks.resolution import beside_table_13, load_rows

        results['resolution'] = beside_table_13(load_rows(out / 'resolution' / 'rows.jsonl'))
    (out / 'gpu_check.json').write_text(json.dumps(results, indent=1))
    (out / 'gpu_check.md').write_text(report(results))
    print(f'[gpu_check] wrote {out}/gpu_check.{{json,md}} in {results["seconds"]:.0f} s', flush=True)
    return int(any(step['returncode'] for step in steps.values()))  # a skipped step's is None


if __name__ == '__main__':
    sys.exit(main())
