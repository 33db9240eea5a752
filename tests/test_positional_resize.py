"""The resize of positional encodings by cached interpolation matrices equals ``F.interpolate``."""
import pytest
import torch
import torch.nn.functional as F

from projects.lisa.models.attention.layers import PositionalEncoding, interpolation_matrix, resize_grid


def interpolate(grid: torch.Tensor, size, mode: str) -> torch.Tensor:
    """``(h, w, C) -> (H, W, C)`` by ``F.interpolate`` on the channels-first grid."""
    out = F.interpolate(grid.permute(2, 0, 1)[None], size=size, mode=mode, align_corners=False)
    return out[0].permute(1, 2, 0)


@pytest.mark.parametrize('mode', ['bicubic', 'bilinear'])
@pytest.mark.parametrize('src, dst', [((7, 5), (13, 4)), ((4, 4), (4, 9)), ((6, 3), (2, 11)), ((3, 8), (1, 1))])
def test_resize_grid_equals_interpolate_in_float64(mode, src, dst):
    torch.manual_seed(0)
    grid = torch.randn(*src, 6, dtype=torch.float64)
    torch.testing.assert_close(resize_grid(grid, dst, mode), interpolate(grid, dst, mode), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize('mode', ['bicubic', 'bilinear'])
def test_resize_grid_gradient_equals_interpolate_gradient(mode):
    torch.manual_seed(0)
    grid = torch.randn(5, 7, 3, dtype=torch.float64, requires_grad=True)
    up = torch.randn(9, 4, 3, dtype=torch.float64)
    (ours, ) = torch.autograd.grad((resize_grid(grid, (9, 4), mode) * up).sum(), grid)
    (theirs, ) = torch.autograd.grad((interpolate(grid, (9, 4), mode) * up).sum(), grid)
    torch.testing.assert_close(ours, theirs, rtol=1e-13, atol=1e-13)


def test_interpolation_rows_are_the_keys_cubic_weights():
    """Upsampling 4 -> 8: output 4 sits at source coordinate (4 + 0.5) / 2 - 0.5 = 1.75 (half-pixel
    centres), so its weights on sources 0..3 are Keys' kernel (a = -0.75) at 1.75, 0.75, 0.25, 1.25."""
    a = -0.75

    def keys(t):
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1 if t <= 1 else a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a

    m = interpolation_matrix(4, 8, 'bicubic', torch.device('cpu'), torch.float64)
    expected = torch.tensor([keys(1.75), keys(0.75), keys(0.25), keys(1.25)], dtype=torch.float64)
    torch.testing.assert_close(m[4], expected, rtol=0, atol=1e-15)
    torch.testing.assert_close(m.sum(1), torch.ones(8, dtype=torch.float64), rtol=0, atol=1e-15)


def test_matrix_made_in_inference_mode_serves_training():
    interpolation_matrix.cache_clear()
    pe = PositionalEncoding(4, (3, 3), num_prefix_tokens=1)
    with torch.inference_mode():
        pe((5, 6))
    pe((5, 6)).sum().backward()  # raises if the cached matrix were an inference tensor
    assert pe.weight.grad.shape == pe.weight.shape


def test_resize_grid_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="mode='nearest' is not one of"):
        resize_grid(torch.zeros(2, 2, 1), (3, 3), 'nearest')


@pytest.mark.slow
def test_exported_positional_encoding_keeps_the_grid_size_symbolic():
    """Under torch.export with a dynamic grid the encoding is neither pinned to the traced size nor
    to its own ``pos_shape`` (a ``hw_shape == pos_shape`` test would specialise the graph)."""

    class Encode(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pe = PositionalEncoding(3, (4, 5), num_prefix_tokens=1)
            torch.nn.init.normal_(self.pe.weight)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.flatten(2).sum(1, keepdim=True).transpose(1, 2) + self.pe(x.shape[2:])[:, 1:]

    dynamic = {'x': {2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}}
    model = Encode()
    program = torch.export.export(model, (torch.randn(1, 2, 4, 5), ), dynamic_shapes=dynamic)
    for size in ((4, 5), (7, 3)):
        x = torch.randn(1, 2, *size)
        torch.testing.assert_close(program.module()(x), model(x))
