"""A checkpoint that does not load is named with what it is, by every tool, as ``--resume`` without CKPT does.

A truncated file (the first third of a real checkpoint) and a file that is no checkpoint (a
pickled object of this module: code, which ``torch.load(weights_only=True)`` refuses) given to
``tools/train.py --resume CKPT``, ``tools/test.py`` and ``tools/export_onnx.py``: each stops
with one line naming the file and what is wrong, never a traceback and never advice to load
the file unsafely. A checkpoint of another model is refused by the export with a hint whose
option the tool takes.
"""
from __future__ import annotations

import sys
from pathlib import Path

import engine_toy
import pytest
import torch
from mmengine.config import Config
from test_loading_strict import toy_checkpoint

import projects.lisa.registry  # noqa: F401  (registers the hooks)
from projects.lisa.engine.checkpoint import CheckpointReadError, load_checkpoint_file
from projects.lisa.engine.resume import checkpoint_problem, find_resumable_checkpoint

ROOT = Path(__file__).resolve().parents[1]
SEG_DEMO = ROOT / 'configs/segmentation/demo/fpn_lisa-pvt-t_1xb4-150iter_synthetic-ade20k-96x96.py'


class Pickled:
    """An object a checkpoint must not hold: unpickling it means running this module's code."""


def truncated(tmp_path: Path) -> str:
    path = Path(toy_checkpoint(tmp_path / 'iter_4.pth'))
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 3])
    return str(path)


def not_a_checkpoint(tmp_path: Path) -> str:
    path = tmp_path / 'iter_4.pth'
    torch.save(dict(state_dict={}, meta={}, trainer=Pickled()), path)
    return str(path)


UNSAFE_ADVICE = ('weights_only=False', 'weights_only` set to `False', 'TORCH_FORCE', 'add_safe_globals')
SAFE_REFUSAL = ('not a checkpoint this project can load safely: it holds Python code '
                '(test_checkpoint_read_errors.Pickled)')


def test_a_file_of_code_is_named_not_loadable_safely_without_unsafe_advice(tmp_path):
    path = not_a_checkpoint(tmp_path)
    with pytest.raises(CheckpointReadError) as error:
        load_checkpoint_file(path)
    assert str(error.value).startswith(f'{path}: {SAFE_REFUSAL}')
    assert not any(advice in str(error.value) for advice in UNSAFE_ADVICE)
    assert checkpoint_problem(path).startswith(SAFE_REFUSAL)  # --resume without CKPT says the same
    assert find_resumable_checkpoint(str(tmp_path)) == (None, [(path, checkpoint_problem(path))])


def toy_config(tmp_path: Path) -> str:
    config = tmp_path / 'toy.py'
    Config(engine_toy.toy_config(str(tmp_path / 'work'), max_iters=1, safe=False)).dump(str(config))
    return str(config)


@pytest.mark.parametrize('make, problem', [(truncated, 'unreadable ('), (not_a_checkpoint, SAFE_REFUSAL)])
def test_train_resume_and_test_name_a_bad_checkpoint_given_explicitly(tmp_path, monkeypatch, make, problem):
    from tools import test as tools_test
    from tools import train as tools_train
    path, config = make(tmp_path), toy_config(tmp_path)
    monkeypatch.setattr(sys, 'argv', ['train.py', config, '--resume', path])
    with pytest.raises(SystemExit) as error:
        tools_train.main()
    assert str(error.value.code).startswith(f'--resume: cannot resume from {path}: {problem}')
    monkeypatch.setattr(sys, 'argv', ['test.py', config, path])
    with pytest.raises(SystemExit) as error:
        tools_test.main()
    assert str(error.value.code).startswith(f'checkpoint {path}: {problem}')
    assert not any(advice in str(error.value.code) for advice in UNSAFE_ADVICE)
    assert not (tmp_path / 'work').exists()  # stopped before anything was built or written


@pytest.mark.parametrize('make, problem', [(truncated, 'unreadable ('), (not_a_checkpoint, SAFE_REFUSAL)])
def test_export_names_a_bad_checkpoint(tmp_path, capsys, make, problem):
    pytest.importorskip('onnxruntime')
    from tools import export_onnx
    path = make(tmp_path)
    with pytest.raises(SystemExit):
        export_onnx.parse_args([str(SEG_DEMO), path, '--shape', '64', '64'])
    err = capsys.readouterr().err
    assert f'checkpoint {path}: {problem}' in err and 'Traceback' not in err


def test_export_refuses_another_models_checkpoint_with_an_option_it_takes(tmp_path, capsys):
    pytest.importorskip('onnxruntime')
    from mmengine.registry import MODELS, init_default_scope

    from tools import export_onnx
    init_default_scope('mmseg')
    cfg = Config.fromfile(str(SEG_DEMO))
    cfg.model.backbone.init_cfg = None
    cfg.model.decode_head.num_classes += 1  # trained for one class more
    path = tmp_path / 'other.pth'
    torch.save(dict(state_dict=MODELS.build(cfg.model).state_dict()), path)
    argv = [str(SEG_DEMO), str(path), '--shape', '64', '64', '--out', str(tmp_path / 'm.onnx')]
    assert export_onnx.main(argv) == 1
    err = capsys.readouterr().err
    assert 'SHAPE MISMATCH' in err and '--allow-mismatch seg_head' in err and 'Traceback' not in err
    assert export_onnx.parse_args([*argv, '--allow-mismatch', 'seg_head']).allow_mismatch == ['seg_head']
