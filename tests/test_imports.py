"""Parts that stand alone: each entry point imported, or run, in a fresh Python that
refuses the packages it must not need.

The refusal is a meta-path finder installed before anything else: importing a refused package
(or any module under it) raises ``ModuleNotFoundError``, so code that needs it fails here; code that
merely tries it (``try: import torch``) goes on, and the check at the end finds none of them loaded.

* inference from an exported file (``tools/onnx_infer.py``, ``projects.lisa.deploy.infer`` /
  ``.detect`` / ``.metadata`` / ``.resize``): onnxruntime, numpy and OpenCV; no torch, no mm;
* the attention family (operators and attentions) and the GPU check's steps: torch; no mm;
* the package and its subpackages: nothing (no torch, no mm) and no registration;
* registration into the mm registries happens on importing ``projects.lisa.registry``, which
  configs name in ``custom_imports``, and nowhere else.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from projects.lisa.deploy.metadata import Metadata

ROOT = Path(__file__).resolve().parents[1]
MM = ('mmcv', 'mmengine', 'mmseg', 'mmdet', 'mmpretrain')
TORCH = ('torch', 'torchvision', 'torchaudio', 'triton')
# Installed first in the child: refuses REFUSED (and their submodules), and checks none was loaded before.
REFUSE = '''
import importlib.abc, sys
REFUSED = {refused!r}

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition('.')[0] in REFUSED:
            raise ModuleNotFoundError(f'{{name}} is refused in this test', name=name)
        return None

assert not [m for m in sys.modules if m.partition('.')[0] in REFUSED], 'loaded before the test started'
sys.meta_path.insert(0, Refuse())
'''
LOADED = '''
loaded = sorted({{m.partition('.')[0] for m in sys.modules}} & REFUSED)
assert not loaded, f'imported {{loaded}}'
'''


def run_refusing(refused: tuple[str, ...], code: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``code`` run by a fresh Python (the repository and ``tests/`` on its path) that refuses ``refused``;
    it fails if the code raises or if a refused package ends up loaded."""
    program = REFUSE.format(refused=set(refused)) + textwrap.dedent(code) + LOADED.format()
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join((str(ROOT), str(ROOT / 'tests')))}
    proc = subprocess.run([sys.executable, '-c', program, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_the_refusal_refuses():
    """The harness itself: a refused package fails to import and is reported if it was loaded."""
    proc = subprocess.run([sys.executable, '-c', REFUSE.format(refused={'json'}) + 'import json'],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and 'json is refused in this test' in proc.stderr
    proc = subprocess.run([sys.executable, '-c', REFUSE.format(refused={'numpy'}) + 'REFUSED.clear()\n'
                           'import numpy; REFUSED.add("numpy")\n' + LOADED.format()], capture_output=True, text=True)
    assert proc.returncode != 0 and "imported ['numpy']" in proc.stderr


@pytest.mark.parametrize('module', [
    'projects.lisa', 'projects.lisa.models', 'projects.lisa.deploy', 'projects.lisa.datasets',
    'projects.lisa.engine', 'projects.lisa.analysis', 'projects.lisa.deploy.metadata'])
def test_the_package_and_its_packages_import_with_neither_torch_nor_mm(module):
    run_refusing(TORCH + MM + ('onnxruntime', 'cv2'), f'import {module}')


def test_deployment_modules_import_with_neither_torch_nor_mm():
    run_refusing(TORCH + MM, '''
        import tools.onnx_infer
        import projects.lisa.deploy.detect, projects.lisa.deploy.infer, projects.lisa.deploy.metadata
        import projects.lisa.deploy.resize
        from projects.lisa.deploy import Metadata, MetadataError, OnnxDetector, OnnxSegmentor
    ''')


def test_the_deploy_package_names_resolve_lazily_to_their_modules():
    from projects.lisa import deploy
    from projects.lisa.deploy import config_metadata, detect, infer, metadata, onnx

    assert (deploy.OnnxSegmentor, deploy.OnnxDetector, deploy.Metadata) == (
        infer.OnnxSegmentor, detect.OnnxDetector, metadata.Metadata)
    assert (deploy.inference_metadata, deploy.export) == (config_metadata.inference_metadata, onnx.export)
    assert set(deploy.__all__) <= set(dir(deploy)) and all(getattr(deploy, name) for name in deploy.__all__)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        deploy.nothing  # noqa: B018


def segmentor_file(path: Path) -> None:
    """A segmentor ONNX file made with onnx alone: logits of a 4x4, stride-4 conv, with metadata."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((3, 3, 4, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node('Conv', ['input', 'w'], ['seg_logits'], strides=[4, 4])], 'conv',
        [helper.make_tensor_value_info('input', TensorProto.FLOAT, [1, 3, 'h', 'w'])],
        [helper.make_tensor_value_info('seg_logits', TensorProto.FLOAT, [1, 3, None, None])],
        [numpy_helper.from_array(weight, 'w')])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 18)], ir_version=9)
    metadata = Metadata(task='segmentation', mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375),
                        bgr_to_rgb=True, size_divisor=32, pad_val=0.0, align_corners=False,
                        classes=('sky', 'road', 'tree'), palette=((0, 0, 255), (128, 64, 128), (0, 128, 0)),
                        resize=dict(type='AlignResize', scale=(96, 64), size_divisor=32, interpolation='bilinear'))
    onnx.helper.set_model_props(model, metadata.to_props())
    onnx.save(model, str(path))


def detector_file(path: Path) -> None:
    """A Mask R-CNN ONNX file made with onnx alone: two fixed detections (in the resized frame), with metadata."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    masks = np.zeros((2, 28, 28), np.float32)
    masks[:, 4:24, 4:24] = 0.9
    outputs = dict(boxes=np.array([[4, 6, 40, 30], [20, 10, 60, 50]], np.float32),
                   scores=np.array([0.9, 0.6], np.float32), labels=np.array([1, 0], np.int64), masks=masks)
    types = dict(boxes=TensorProto.FLOAT, scores=TensorProto.FLOAT, labels=TensorProto.INT64, masks=TensorProto.FLOAT)
    graph = helper.make_graph(
        [helper.make_node('Identity', [f'{k}_value'], [k]) for k in outputs], 'fixed',
        [helper.make_tensor_value_info('input', TensorProto.FLOAT, [1, 3, 'h', 'w']),
         helper.make_tensor_value_info('img_shape', TensorProto.INT64, [2])],
        [helper.make_tensor_value_info(k, types[k], list(v.shape)) for k, v in outputs.items()],
        [numpy_helper.from_array(v, f'{k}_value') for k, v in outputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 18)], ir_version=9)
    metadata = Metadata(task='detection', mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375),
                        bgr_to_rgb=True, size_divisor=32, pad_val=0.0, align_corners=False,
                        classes=('person', 'car'), palette=((220, 20, 60), (0, 0, 142)), mask_thr=0.5,
                        resize=dict(type='Resize', scale=(80, 64), scale_factor=None, keep_ratio=True,
                                    interpolation='bilinear', backend='cv2'))
    onnx.helper.set_model_props(model, metadata.to_props())
    onnx.save(model, str(path))


@pytest.mark.parametrize('task', ['segmentation', 'detection'])
def test_onnx_infer_runs_with_onnxruntime_numpy_and_opencv_alone(task, tmp_path):
    """``tools/onnx_infer.py`` end to end, as on a deployment machine: no torch, no mm; its drawing and
    its printout are those of the same run with everything installed."""
    pytest.importorskip('onnx')
    pytest.importorskip('onnxruntime')
    import cv2

    (segmentor_file if task == 'segmentation' else detector_file)(tmp_path / 'model.onnx')
    image = np.random.default_rng(1).integers(0, 256, (45, 70, 3), dtype=np.uint8)
    cv2.imwrite(str(tmp_path / 'image.png'), image)
    argv = [str(tmp_path / 'model.onnx'), str(tmp_path / 'image.png')]
    proc = run_refusing(TORCH + MM, '''
        import sys
        from tools import onnx_infer
        assert onnx_infer.main(sys.argv[1:]) == 0
    ''', *argv, '--out', str(tmp_path / 'alone' / 'drawn.png'))
    full = subprocess.run([sys.executable, str(ROOT / 'tools/onnx_infer.py'), *argv, '--out', str(tmp_path / 'd.png')],
                          cwd=ROOT, env={**os.environ, 'PYTHONPATH': str(ROOT)}, capture_output=True, text=True)
    assert full.returncode == 0, full.stderr
    expected = {'segmentation': '45x70 label map', 'detection': '2 of 2 detections above --score-thr=0.3'}[task]
    assert expected in proc.stdout and proc.stdout.replace('alone/drawn', 'd') == full.stdout
    drawn = [cv2.imread(str(tmp_path / name)) for name in ('alone/drawn.png', 'd.png')]
    assert drawn[0].shape == image.shape
    np.testing.assert_array_equal(*drawn)


GPU_CHECK_TEST_MODULES = [Path(f).stem for f in ('tests/test_attention_baselines.py', 'tests/test_attention_lisa.py',
                                                 'tests/test_attention_local.py', 'tests/test_positional_resize.py')]


def test_the_attention_family_and_the_gpu_check_import_with_torch_alone():
    """The operators, the attentions, the GPU check's tools and test files (tools/gpu_check.py runs
    them on machines without OpenMMLab). Whether importing the attention package patches inductor
    is the attention package's matter, not checked here."""
    from tools import gpu_check

    assert [Path(f).stem for f in gpu_check.TEST_FILES] == GPU_CHECK_TEST_MODULES
    run_refusing(MM, f'''
        import projects.lisa.models.attention, projects.lisa.models.attention.ops
        from projects.lisa.models.attention import build_attention
        build_attention(dict(type='lisa', num_steps=2), dim=8, num_heads=2)
        import tools.gpu_check, tools.benchmark_attention, tools.benchmark_model, projects.lisa.benchmarks.deit
        for name in {GPU_CHECK_TEST_MODULES!r}:
            __import__(name)
    ''')


def test_importing_the_models_and_the_engine_registers_nothing_and_the_registry_everything():
    """Only ``projects.lisa.registry`` fills the mm registries and extends ``torch.load``'s allow-list."""
    run_refusing((), '''
        import torch
        from mmengine.logging import HistoryBuffer
        from mmengine.registry import HOOKS, OPTIM_WRAPPERS
        import mmdet.registry, mmpretrain.registry, mmseg.registry
        import projects.lisa.models.backbones, projects.lisa.models.attention, projects.lisa.deploy.onnx
        import projects.lisa.data_checks.data_check, projects.lisa.engine.checkpoint
        import projects.lisa.engine.runtime_config
        from projects.lisa.models.backbones import __all__ as backbones
        scopes = (mmseg.registry, mmdet.registry, mmpretrain.registry)
        assert not any(name in s.MODELS.module_dict for s in scopes for name in backbones)
        assert not {'SafeRuntimeHook', 'NonFiniteGuardHook'} & set(HOOKS.module_dict)
        assert 'AlignResize' not in mmseg.registry.TRANSFORMS.module_dict
        assert HistoryBuffer not in torch.serialization.get_safe_globals()

        import projects.lisa.registry
        assert all(s.MODELS.module_dict.get(name) is getattr(projects.lisa.models.backbones, name)
                   for s in scopes for name in backbones)
        assert {'SafeRuntimeHook', 'NonFiniteGuardHook'} <= set(HOOKS.module_dict)
        assert 'CPUAmpOptimWrapper' in OPTIM_WRAPPERS.module_dict
        assert 'AlignResize' in mmseg.registry.TRANSFORMS.module_dict
        assert HistoryBuffer in torch.serialization.get_safe_globals()
        assert projects.lisa.registry.register_all_modules() == ['mmseg', 'mmdet', 'mmpretrain']  # again: no-op
    ''')


def test_a_config_naming_the_registry_registers_and_one_naming_the_package_is_told_what_to_change(tmp_path):
    """What a config writes; a config naming the package (``imports=['projects.lisa']``) registers
    nothing, and the tools say what to change."""
    (tmp_path / 'new.py').write_text("custom_imports = dict(imports=['projects.lisa.registry'], "
                                     "allow_failed_imports=False)\n")
    (tmp_path / 'old.py').write_text("custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)\n")
    proc = run_refusing((), '''
        import sys
        from mmengine.config import Config
        import mmseg.registry
        old = Config.fromfile(sys.argv[2])
        assert 'LiSAPVT' not in mmseg.registry.MODELS.module_dict
        new = Config.fromfile(sys.argv[1])
        assert 'LiSAPVT' in mmseg.registry.MODELS.module_dict
        from projects.lisa.registry import legacy_imports
        assert legacy_imports(new) is None and legacy_imports(Config()) is None
        print(json.dumps(legacy_imports(old)))
    '''.replace('import sys', 'import json, sys'), str(tmp_path / 'new.py'), str(tmp_path / 'old.py'))
    message = json.loads(proc.stdout)
    assert "names 'projects.lisa', which registers nothing" in message and "name 'projects.lisa.registry'" in message


def test_the_repository_s_configs_name_the_registry():
    configs = sorted((ROOT / 'configs').rglob('*.py'))
    named = [c for c in configs if 'custom_imports' in c.read_text()]
    assert len(named) >= 63
    assert all("imports=['projects.lisa.registry'" in c.read_text() for c in named)
    assert not [c for c in configs if "'projects.lisa'" in c.read_text()]
