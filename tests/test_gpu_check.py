"""tools/gpu_check.sh on the CPU at small sizes (as CI runs it), and its torch-only DeiT."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
MM = ('mmengine', 'mmcv', 'mmdet', 'mmseg', 'mmpretrain')


def test_the_gpu_check_modules_import_without_openmmlab():
    """The benchmark tools and the DeiT import with every OpenMMLab package made unimportable."""
    code = (f'import sys; sys.modules.update(dict.fromkeys({MM!r})); '
            'import tools.gpu_check, tools.benchmark_attention, tools.benchmark_model, projects.lisa.benchmarks.deit; '
            f'assert not any(sys.modules.get(m) for m in {MM!r})')
    subprocess.run([sys.executable, '-c', code], cwd=ROOT, env={**os.environ, 'PYTHONPATH': str(ROOT)}, check=True)


def test_torch_only_deit_is_lisavit_layer_for_layer():
    """Same state dict keys, and with the same weights the same class-token features."""
    from projects.lisa.benchmarks.deit import DeiT
    from projects.lisa.models.backbones.vit import LiSAViT

    torch.manual_seed(0)
    for cfg in (dict(type='lisa', num_steps=3), dict(type='softmax')):
        vit = LiSAViT(arch=dict(embed_dims=24, num_layers=2, num_heads=3, feedforward_channels=48),
                      pretrain_img_size=40, patch_size=8, attn_cfgs=cfg, drop_path_rate=0.0).eval()
        vit.init_weights()
        deit = DeiT(cfg, img_size=40, patch_size=8, embed_dims=24, num_layers=2, num_heads=3, mlp_ratio=2).eval()
        assert deit.state_dict().keys() == vit.state_dict().keys()
        deit.load_state_dict(vit.state_dict())
        x = torch.randn(2, 3, 44, 36)  # another grid than the training one, not a multiple of the patch
        with torch.no_grad():
            torch.testing.assert_close(deit(x), vit(x)[0])


@pytest.mark.slow
def test_gpu_check_runs_on_the_cpu_and_writes_json_and_markdown(tmp_path):
    env = {**os.environ, 'PYTHON': sys.executable, 'OMP_NUM_THREADS': '1'}
    proc = subprocess.run(['bash', str(ROOT / 'tools' / 'gpu_check.sh'), '--device', 'cpu', '--small',
                           '--out', str(tmp_path)], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / 'gpu_check.json').read_text())
    assert (results['device'], results['small']) == ('cpu', True)
    tests = results['steps']['tests']
    assert tests['passed'] > 20 and tests['failures'] == tests['errors'] == 0
    assert {(r['method'], r['N']) for r in results['attention']['rows']} == {
        (m, n) for m in ('softmax', 'linear', 'flatten', 'lisa') for n in (17, 65)}
    assert {(r['attention'], r['tokens']) for r in results['deit']['rows']} == {
        (a, n) for a in ('softmax', 'flatten', 'lisa') for n in (5, 17)}
    assert all(r['train_ms'] > 0 and r['fwd_ms'] > 0 for r in results['deit']['rows'])
    md = (tmp_path / 'gpu_check.md').read_text()
    assert f"{tests['passed']} passed, 0 failed" in md
    assert '| lisa | 64² | 17 |' in md and '| lisa | 65 | 8x8 |' in md
    rows = [json.loads(line) for line in (tmp_path / 'resolution' / 'rows.jsonl').read_text().splitlines()]
    assert {(r['kind'], r['step'], r['size'], r['model']) for r in rows} >= {
        ('time', 'infer', s, m) for s in (64, 128) for m in ('PVT-T', 'FLatten-PVT-T', 'LiSA-PVT-T')}
    assert "### LiSA over FLatten beside the paper's Table 13" in md
    assert '| paper, supp. Table 13: DeiT-T | GPU | 16,385 tokens | 1.76x | 2.12x |' in md


def test_a_step_whose_packages_are_missing_is_reported_skipped(tmp_path, monkeypatch):
    """Without MMSegmentation the sweep of the dense models is skipped and said so; the other steps run."""
    from tools import gpu_check

    monkeypatch.setattr(gpu_check, 'STEPS', {'resolution': gpu_check.STEPS['resolution']})
    monkeypatch.setattr(gpu_check, 'NEEDS', {'resolution': ('mmseg', 'no_such_package_here')})
    monkeypatch.setattr(gpu_check, 'TEST_FILES', ('tests/test_statistics.py', ))
    assert gpu_check.main(['--device', 'cpu', '--small', '--out', str(tmp_path)]) == 0
    md = (tmp_path / 'gpu_check.md').read_text()
    assert 'skipped: needs no_such_package_here (`make install`).' in md


def test_gpu_check_refuses_cuda_without_cuda():
    if torch.cuda.is_available():
        pytest.skip('this machine has CUDA')
    proc = subprocess.run([sys.executable, 'tools/gpu_check.py', '--device', 'cuda'], cwd=ROOT,
                          env={**os.environ, 'PYTHONPATH': str(ROOT)}, capture_output=True, text=True)
    assert proc.returncode == 2 and "--device='cuda' must be" in proc.stderr
