"""What ``tools/test.py --show-dir`` / ``--out`` add to a test run, as the mm libraries' test scripts do.

``--show-dir DIR`` turns on the library's visualisation hook for every test image (ground truth
beside the prediction, drawn by the config's visualiser; mmseg's hook draws every ``interval``-th
batch, so the interval becomes 1):

- mmseg: ``DIR/vis_data/vis_image/test_<image>_0.png`` (the visualiser's local backend);
- mmdet: ``DIR/<image>`` (``DetVisualizationHook.test_out_dir``);
- mmpretrain: ``DIR/<index>.png`` (``VisualizationHook.out_dir``).

``--out PATH`` keeps the predictions in the library's format: mmseg writes the label maps as PNG
files into the folder ``PATH`` (``IoUMetric(output_dir=PATH, keep_results=True)``); mmdet and
mmpretrain pickle every sample's prediction to ``PATH`` (``DumpDetResults`` / ``DumpResults``).
"""
from __future__ import annotations

import os
import os.path as osp
from collections.abc import Callable

from mmengine.config import Config
from mmengine.runner import Runner

from projects.lisa.registry import config_scope


def show_predictions(cfg: Config, show_dir: str) -> None:
    """Make the test run draw every image into ``show_dir``."""
    scope, show_dir = config_scope(cfg, 'test_dataloader'), osp.abspath(show_dir)
    hook = (cfg.get('default_hooks') or {}).get('visualization')
    if hook is None:
        raise ValueError(f'--show-dir: the config has no default_hooks.visualization (the {scope} '
                         'visualisation hook), so nothing can be drawn')
    if scope == 'mmseg':
        hook.update(draw=True, interval=1)
        cfg.visualizer['save_dir'] = show_dir
    elif scope == 'mmdet':
        hook.update(draw=True, test_out_dir=show_dir)  # an absolute test_out_dir is used as it is
    else:
        hook.update(enable=True, interval=1, out_dir=show_dir)


def dump_predictions(cfg: Config, out: str) -> Callable[[Runner], None]:
    """What makes a test run keep its predictions at ``out``: call it on the built runner before ``test()``.
    Raises ``ValueError`` now if ``out`` cannot take the library's format."""
    scope = config_scope(cfg, 'test_dataloader')
    if scope != 'mmseg' and not out.endswith(('.pkl', '.pickle')):
        raise ValueError(f'--out {out!r}: {scope} predictions are pickled; give a .pkl file')

    def add(runner: Runner) -> None:
        metrics = runner.test_evaluator.metrics
        if scope == 'mmseg':
            writers = [m for m in metrics if hasattr(m, 'output_dir')]
            if not writers:
                raise ValueError('--out: the test evaluator has no metric that writes label maps (mmseg IoUMetric)')
            os.makedirs(out, exist_ok=True)
            writers[0].output_dir, writers[0].keep_results = out, True
        elif scope == 'mmdet':
            from mmdet.evaluation import DumpDetResults
            metrics.append(DumpDetResults(out_file_path=out))
        else:
            from mmengine.evaluator import DumpResults
            metrics.append(DumpResults(out_file_path=out))
    return add
