"""ONNX export (torch's dynamo exporter) of the attention family and of the dense models, checked by onnxruntime."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from projects.lisa import deploy
from projects.lisa.models.attention import build_attention, ops

ort = pytest.importorskip('onnxruntime')
from tools import export_onnx  # noqa: E402  (needs onnxruntime)

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    'softmax-sr2': dict(type='softmax', sr_ratio=2),
    'linear': dict(type='linear'),
    'flatten': dict(type='flatten'),
    'lisa': dict(type='lisa'),
    'lisa-geometric-elu': dict(type='lisa', step_weights='geometric', feature_map='elu', num_steps=4),
    'lisa-T-inf': dict(type='lisa', num_steps=math.inf, step_weights='geometric'),
    'lisa-local-only': dict(type='lisa', use_global=False),
    'lisa-global-only': dict(type='lisa', use_local=False),
    'window': dict(type='window', window_size=3, shift=False),
    'window-shifted': dict(type='window', window_size=3, shift=True),
}


class OnGrid(nn.Module):
    """An attention on the grid of an image (1x1 conv to 16 channels, a class token in front unless the
    attention covers grid tokens only): the exported unit."""

    output_names = ('out', )

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        torch.manual_seed(0)
        extra = dict(pos_shape=(4, 6)) if cfg['type'] not in ('softmax', 'window') else {}
        self.embed = nn.Conv2d(3, 16, 1)
        self.cls = nn.Parameter(torch.randn(1, int(cfg['type'] != 'window'), 16))
        self.attn = build_attention(cfg, 16, 2, num_prefix_tokens=self.cls.shape[1], **extra)
        with torch.no_grad():
            for p in self.attn.parameters():  # away from the initial values (alpha = 0.5, zero step MLP, ...)
                p.add_(0.3 * torch.randn_like(p))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), x.flatten(2).transpose(1, 2)], dim=1)
        return self.attn(tokens, x.shape[2:])


@pytest.mark.slow
@pytest.mark.parametrize('variant', list(VARIANTS))
def test_every_attention_variant_exports_with_dynamic_sizes_and_matches_eager(variant, tmp_path):
    model = OnGrid(VARIANTS[variant])
    deploy.export(model, (5, 7), tmp_path / 'unit.onnx', opset=18)
    errors = deploy.relative_errors(model, tmp_path / 'unit.onnx', [(5, 7), (8, 3)])  # export size, another
    assert max(e for _, _, e in errors) < 1e-4, errors


@pytest.mark.skipif(not ops.kernels_built(), reason='the CPU kernels are not built')
def test_legacy_exporter_refuses_the_fused_kernel_instead_of_dropping_it(tmp_path):
    """TorchScript export of the local-only LiSA must not pass silently with the fused kernel traced as
    ``empty_like`` (onnxruntime's output off by a relative error of 0.56): the kernel is a registered op, which
    that exporter refuses (at the first of the layer's ``lisa::`` ops: the fused features, then the local
    branch)."""
    model = OnGrid(VARIANTS['lisa-local-only'])
    with torch.no_grad(), pytest.raises(torch.onnx.errors.UnsupportedOperatorError,
                                        match='lisa::(kernel_features|neighbourhood)'):
        torch.onnx.export(model, (torch.randn(1, 3, 5, 7), ), str(tmp_path / 'legacy.onnx'), dynamo=False,
                          opset_version=17, input_names=['x'], dynamic_axes={'x': {2: 'h', 3: 'w'}})


def fpn_args(tmp_path: Path) -> list[str]:
    """The Table 3 LiSA-PVT-T Semantic FPN config with one block per stage (a shorter export)."""
    config = tmp_path / 'fpn_lisa-pvt-t_1-block.py'
    config.write_text(f"_base_ = '{ROOT}/configs/segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py'\n"
                      'model = dict(backbone=dict(arch=dict(_delete_=True, embed_dims=[64, 128, 320, 512], '
                      'depths=[1, 1, 1, 1], num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4])))\n')
    return [str(config), 'none', '--shape', '64', '96', '--out', str(tmp_path / 'fpn.onnx')]


@pytest.mark.slow
def test_tool_exports_semantic_fpn_lisa_pvt_and_checks_two_sizes(tmp_path, capsys):
    assert export_onnx.main(fpn_args(tmp_path)) == 0
    out = capsys.readouterr().out
    assert 'at 64x96, seg_logits' in out and 'at 96x160, seg_logits' in out and 'OK' in out
    session = ort.InferenceSession(str(tmp_path / 'fpn.onnx'), providers=['CPUExecutionProvider'])
    assert session.get_inputs()[0].shape[2:] != [64, 96]  # height and width stay symbolic


@pytest.mark.slow
def test_tool_fails_when_the_graph_does_not_compute_the_model(tmp_path, monkeypatch, capsys):
    """A graph exported from other weights than the eager model's is refused with exit status 1."""
    export = export_onnx.export

    def export_other_weights(model, *args, **kwargs):
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.01)
        export(model, *args, **kwargs)
        model.load_state_dict(saved)

    monkeypatch.setattr(export_onnx, 'export', export_other_weights)
    assert export_onnx.main(fpn_args(tmp_path)) == 1
    assert 'FAILED: relative error' in capsys.readouterr().err


@pytest.mark.parametrize('output_size', [1, 2, 3, 6, (2, 5)])
def test_symbolic_adaptive_pooling_computes_adaptive_average_pooling(output_size):
    """UperNet's pyramid pooling, rewritten for export, gives torch's adaptive means at every size
    (sizes that do not divide, and inputs smaller than the output)."""
    model = nn.Sequential(nn.AdaptiveAvgPool2d(output_size))
    deploy.symbolic_adaptive_pooling(model)
    for h, w in [(2, 2), (3, 4), (7, 5), (13, 17), (1, 9)]:
        x = torch.randn(2, 3, h, w)
        torch.testing.assert_close(model(x), F.adaptive_avg_pool2d(x, output_size), rtol=1e-6, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize('config, outputs', [
    ('configs/segmentation/upernet_lisa-swin-t_8xb2-160k_ade20k-512x512.py', ['seg_logits']),
    ('configs/detection/mask-rcnn_lisa-pvt-t_fpn_1x_coco.py', ['boxes', 'scores', 'labels', 'masks']),
])
def test_tool_exports_upernet_swin_and_the_whole_mask_rcnn(config, outputs, tmp_path, capsys):
    assert export_onnx.main([str(ROOT / config), 'none', '--shape', '64', '64', '--out', str(tmp_path / 'm.onnx')]) == 0
    session = ort.InferenceSession(str(tmp_path / 'm.onnx'), providers=['CPUExecutionProvider'])
    assert [o.name for o in session.get_outputs()] == outputs


@pytest.mark.parametrize('argv, message', [
    (['--shape', '64', '64', '--opset', '16'], '--opset=16 must be >= 17'),
    (['--shape', '16', '64'], '--shape=[16, 64]: both sides must be >= 32'),
    (['--shape', '64', '64', '--rtol', '0'], '--rtol=0.0 must be > 0'),
])
def test_tool_refuses_bad_arguments_naming_them(argv, message, capsys):
    with pytest.raises(SystemExit):
        export_onnx.parse_args(['configs/segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py', 'none', *argv])
    assert message in capsys.readouterr().err


def test_tool_refuses_a_missing_checkpoint(capsys):
    with pytest.raises(SystemExit):
        export_onnx.parse_args(['configs/segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py', 'no/such.pth',
                                '--shape', '64', '64'])
    assert "checkpoint 'no/such.pth' is not a file (or pass none" in capsys.readouterr().err
