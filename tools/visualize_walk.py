"""Draw what one query patch reads through LiSA's attention (the paper's Fig. 4).

For one attention layer of a model built from a config (random weights, or a
checkpoint), the image goes through the model's data preprocessor and backbone;
at the chosen layer the rows of the query token are taken from the exact
operators (``projects/lisa/analysis/walk_maps.py``: the identity fed through
the layer's own code path) and drawn over the image:

* ``S^k``: k hops of the walk on the transition matrix ``S = Q~ K^T``;
* ``P^(T)``: the truncated walk of Eq. 4 with the geometric weights, T = 1, 3, 5, 7;
* ``global`` (the layer's own walk: its T and adaptive weights), ``local``
  (3x3 branch) and ``fused`` (``alpha global + (1 - alpha) local``).

Each map is the mean over heads (or one ``--head``), coloured from zero to its
largest weight on another token (the query's own cell saturates); the weight
the query keeps on itself and on a class token, if any, are in the title.

Examples (the second on a long-range probe image with a trained probe model)::

    python tools/visualize_walk.py configs/classification/deit-tiny_lisa_8xb128_in1k.py \\
        --layer layers.11.attn --query 120 90 --out work_dirs/walk.png
    python tools/visualize_walk.py configs/long_range/lookup_vit-1l_lisa_64px.py --probe lookup \\
        --checkpoint work_dirs/long_range/lookup-hops2/lisa-1l/lr0.002-2000it/test1000/iter_2000.pth
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope
from mmengine.runner import load_checkpoint
from torch import nn

from projects.lisa.analysis.walk_maps import attention_matrices, query_row, query_token, split_row
from projects.lisa.benchmarks.flops import backbone_input_hw
from projects.lisa.long_range.tasks import IGNORE, lookup_scene, pathfinder_scene, rng_for
from projects.lisa.models.attention import KernelAttention
from projects.lisa.registry import register_all_modules
from projects.lisa.synthetic.synthetic import coco_scene


def kernel_attentions(backbone: nn.Module) -> dict[str, nn.Module]:
    return {name: m for name, m in backbone.named_modules() if isinstance(m, KernelAttention)}


def load_image(path: Path | None, input_hw: tuple[int, int], seed: int) -> np.ndarray:
    """``(H, W, 3)`` uint8 RGB at ``input_hw``: the file, or a generated scene."""
    import mmcv
    if path is None:
        image, _ = coco_scene(np.random.default_rng(seed), max(input_hw))
    else:
        image = mmcv.imread(str(path), channel_order='rgb')
    return mmcv.imresize(image, input_hw[::-1])


def probe_image(task: str, size: int, seed: int) -> tuple[np.ndarray, tuple[float, float]]:
    """A long-range probe image (``projects/lisa/long_range/tasks.py``) of side ``size`` and
    the query ``(x, y)`` where range matters: the shape cell farthest from the cue (lookup),
    the far end of the marked curve (pathfinder)."""
    rng = rng_for(seed, task, 'val', 0)
    if task == 'lookup':
        image, label, probe, _ = lookup_scene(rng, size=size, hops=(2, 2))
        distance = np.where(label != IGNORE, probe[0].astype(int), -1)
    else:
        image, label, probe, _ = pathfinder_scene(rng, size=size)
        distance = np.where(label == 1, probe[0].astype(int), -1)
    y, x = np.unravel_index(int(distance.argmax()), distance.shape)
    return image, (x + 0.5, y + 0.5)


def capture_input(model: nn.Module, attention: nn.Module, inputs: torch.Tensor) -> tuple[torch.Tensor, tuple]:
    """Run the backbone and return the ``(x, hw_shape)`` the attention was called with."""
    seen = {}
    handle = attention.register_forward_pre_hook(lambda m, args: seen.setdefault('args', args))
    try:
        with torch.no_grad():
            model.backbone(inputs)
    finally:
        handle.remove()
    x, hw_shape = seen['args'][:2]
    return x, tuple(hw_shape)


def draw(image: np.ndarray, maps: dict[str, torch.Tensor], query: int, point_xy, hw_shape, num_prefix: int,
         head: int | None, title: str, path: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    groups = [['input'] + [k for k in maps if k.startswith('S^')], [k for k in maps if k.startswith('P^(')],
              [k for k in ('global', 'local', 'fused') if k in maps]]
    cols = max(len(g) for g in groups)
    fig, axes = plt.subplots(len(groups), cols, figsize=(2.6 * cols, 2.4 * len(groups)), squeeze=False)
    ih, iw = image.shape[:2]
    for r, group in enumerate(groups):
        for c in range(cols):
            ax = axes[r][c]
            ax.axis('off')
            if c >= len(group):
                continue
            ax.imshow(image)
            name = group[c]
            if name != 'input':
                row = query_row(maps[name], query, head).float()
                prefix, grid = split_row(row, hw_shape, num_prefix)
                others = grid.flatten().clone()
                if query >= num_prefix:
                    others[query - num_prefix] = 0  # the self-loop would wash out the colour scale
                ax.imshow(grid.numpy(), cmap='inferno', alpha=0.65, extent=(0, iw, ih, 0),
                          interpolation='nearest', vmin=0, vmax=max(float(others.max()), 1e-12))
                name += f'\nself {float(row[query]):.2f}' + (f', cls {float(prefix.sum()):.3f}' if num_prefix else '')
            ax.plot(*point_xy, marker='+', color='cyan', markersize=12, markeredgewidth=2)
            ax.set_title(name, fontsize=9)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config', type=Path, help='an mmpretrain / mmseg / mmdet config with a LiSA backbone')
    parser.add_argument('--checkpoint', type=Path, help='weights (default: random initialisation)')
    parser.add_argument('--image', type=Path, help='image file (default: a generated scene)')
    parser.add_argument('--probe', choices=('lookup', 'pathfinder'),
                        help='a long-range probe image instead, queried at its farthest labelled pixel '
                             '(tools/long_range.py): does the walk reach the cue, follow the contour?')
    parser.add_argument('--input-size', type=int, nargs=2, metavar=('H', 'W'),
                        help="model input (default: the backbone's image size, e.g. 224x224)")
    parser.add_argument('--query', type=float, nargs=2, metavar=('X', 'Y'),
                        help='query pixel in the model input (default: its centre)')
    parser.add_argument('--layer', help='attention module of the backbone (default: the first kernel attention)')
    parser.add_argument('--head', type=int, help='one head (default: the mean over heads)')
    parser.add_argument('--powers', type=int, nargs='+', default=[1, 2, 4, 6], help='k of the S^k rows')
    parser.add_argument('--steps', type=int, nargs='+', default=[1, 3, 5, 7], help='T of the P^(T) rows')
    parser.add_argument('--seed', type=int, default=0, help='seed of the weights and the generated image')
    parser.add_argument('--out', type=Path, default=Path('work_dirs/visualize_walk.png'))
    args = parser.parse_args(argv)
    for name in ('config', 'checkpoint', 'image'):
        path = getattr(args, name)
        if path is not None and not path.is_file():
            parser.error(f'--{name} {path} does not exist')
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    register_all_modules()  # also for configs that do not import projects.lisa.registry
    cfg = Config.fromfile(str(args.config))
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    torch.manual_seed(args.seed)
    model = MODELS.build(cfg.model).eval()
    if args.checkpoint is not None:
        load_checkpoint(model, str(args.checkpoint), map_location='cpu')
    candidates = kernel_attentions(model.backbone)
    if not candidates:
        raise SystemExit(f'{args.config}: the backbone has no kernel attention (linear, flatten, lisa)')
    layer = args.layer or next(iter(candidates))
    if layer not in candidates:
        raise SystemExit(f'--layer {layer!r} is not a kernel attention of the backbone; one of {list(candidates)}')
    attention = candidates[layer]

    input_hw = tuple(args.input_size) if args.input_size else backbone_input_hw(cfg)
    if args.probe:
        if args.image is not None or input_hw[0] != input_hw[1]:
            raise SystemExit(f'--probe draws a square image of its own: got --image {args.image}, input {input_hw}')
        image, probe_query = probe_image(args.probe, input_hw[0], args.seed)
    else:
        image, probe_query = load_image(args.image, input_hw, args.seed), None
    bgr = torch.from_numpy(np.ascontiguousarray(image[..., ::-1])).permute(2, 0, 1)  # as mmcv loads it
    inputs = model.data_preprocessor(dict(inputs=[bgr], data_samples=None), False)['inputs']
    x, hw_shape = capture_input(model, attention, inputs)

    point_xy = tuple(args.query) if args.query else probe_query or (input_hw[1] / 2, input_hw[0] / 2)
    num_prefix = attention.num_prefix_tokens
    query = query_token(point_xy, input_hw, hw_shape, num_prefix)
    maps = attention_matrices(attention, x, hw_shape, args.powers, args.steps)
    heads = 'mean of heads' if args.head is None else f'head {args.head}'
    title = (f'{args.config.name} ({"random weights" if args.checkpoint is None else args.checkpoint.name}), '
             f'{layer}, grid {hw_shape[0]}x{hw_shape[1]}, query token {query}, {heads}')
    draw(image, maps, query, point_xy, hw_shape, num_prefix, args.head, title, args.out)
    print(f'saved {args.out}')


if __name__ == '__main__':
    main()
