"""Preflight of a training config (``tools/train.py CONFIG --dry-run``): minute 0 instead of hour 10.

In one process, on the machine at hand, and in this order:

1. build the model and load its initial weights (``init_cfg`` and ``load_from``,
   with the backbones' weight-loading report);
2. read one batch from each configured data loader (train, val, test), and
   compare the classes of its dataset and the labels of the batch with every
   ``num_classes`` of the model (:func:`.head_class_problems`);
3. run one training step with the config's optimizer and schedulers, and
   check that the loss, every gradient and every updated weight are finite;
4. print the recipe that will run: optimizer, learning rate, the weight decay
   each parameter actually gets, batch per GPU x GPUs, schedule, crop /
   resize sizes and the stochastic-depth and dropout rates.

Every problem is collected and printed, first, with the verdict; :func:`preflight`
returns them, and the tool exits non-zero when there is any. The libraries' own
output (the Runner's environment and config dump, warnings) goes to a log file.
"""
from __future__ import annotations

import copy
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping

import torch
from mmengine.config import Config
from mmengine.optim import OptimWrapper

from ..data_checks.dataset_loading import leaves
from ..data_checks.head_classes import head_class_problems
from .library_output import library_output_to
from .nonfinite import nonfinite_tensors

SIZE_KEYS = ('crop_size', 'scale', 'img_scale', 'size')
REGULARISATION_KEYS = ('drop_path_rate', 'drop_rate', 'attn_drop_rate', 'dropout_ratio', 'dropout')
SCHEDULE_KEYS = ('begin', 'end', 'by_epoch', 'eta_min', 'power', 'start_factor', 'milestones', 'gamma', 'T_max',
                 'convert_to_iter_based')
LOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')


def _walk(cfg, keys: tuple[str, ...], path: str = '') -> Iterator[tuple[str, object]]:
    """``(path, value)`` of every entry named in ``keys`` anywhere in a nested config."""
    items = cfg.items() if isinstance(cfg, Mapping) else enumerate(cfg) if isinstance(cfg, (list, tuple)) else ()
    for key, value in items:
        where = f'{path}.{key}' if path else str(key)
        if key in keys and not isinstance(value, (Mapping, list)):
            yield where, value
        elif isinstance(value, (Mapping, list, tuple)):
            yield from _walk(value, keys, where)


def _brief(cfg: Mapping, keys: tuple[str, ...] = ()) -> str:
    """``k=v, ...`` of ``cfg`` (of ``keys`` only, in their order, when given)."""
    return ', '.join(f'{k}={cfg[k]}' for k in (keys or cfg) if k in cfg)


def recipe(cfg: Config, optim_wrapper=None, model: torch.nn.Module | None = None, batch=None) -> list[str]:
    """The lines of the recipe a config trains with (the built optimizer's groups when given)."""
    opt = cfg.optim_wrapper
    lines = [f'optimizer: {opt.get("type", "OptimWrapper")}({_brief(opt.optimizer)})'
             + (f', clip_grad={opt.clip_grad}' if opt.get('clip_grad') else '')
             + (f', accumulative_counts={opt.accumulative_counts}' if opt.get('accumulative_counts') else '')]
    if opt.get('paramwise_cfg'):
        lines.append(f'weight decay rules (paramwise_cfg): {dict(opt.paramwise_cfg)}')
    if isinstance(optim_wrapper, OptimWrapper) and model is not None:
        names = {id(p): n for n, p in model.named_parameters()}
        groups: dict[tuple[float, float], list[str]] = {}
        for group in optim_wrapper.optimizer.param_groups:
            key = (group['lr'], group.get('weight_decay', 0.0))
            groups.setdefault(key, []).extend(names.get(id(p), '?') for p in group['params'])
        for (lr, decay), params in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            lines.append(f'  {len(params)} tensors: lr {lr:g} (after the schedulers\' start), weight decay {decay:g}'
                         f'  e.g. {params[:3]}')
    loader = cfg.train_dataloader
    world = int(os.environ.get('WORLD_SIZE', 1))
    line = f'batch: {loader.batch_size} per GPU x {world} GPU(s) = {loader.batch_size * world} images per step'
    base = (cfg.get('auto_scale_lr') or {}).get('base_batch_size')
    if base:
        line += (f'; the recipe\'s total is {base} (auto_scale_lr.base_batch_size) = {base // loader.batch_size} '
                 f'GPUs x {loader.batch_size}')
    lines.append(line)
    lines.append(f'schedule: {_brief(cfg.train_cfg)}')
    for scheduler in cfg.get('param_scheduler') or []:
        lines.append(f'  {scheduler["type"]}({_brief(scheduler, SCHEDULE_KEYS)})')
    pipeline = loader.dataset.get('pipeline') or []
    sizes = [f'{t["type"]}({_brief(t, SIZE_KEYS)})' for t in pipeline if any(k in t for k in SIZE_KEYS)]
    preprocessor = cfg.model.get('data_preprocessor') or {}
    crop = f'crop / resize: {", ".join(sizes) or "none in the train pipeline"}'
    if preprocessor.get('size') or preprocessor.get('size_divisor'):
        crop += f'; data_preprocessor pads to {preprocessor.get("size") or preprocessor.get("size_divisor")}'
    if isinstance(batch, Mapping) and isinstance(batch.get('inputs'), (list, tuple)) and batch['inputs']:
        crop += f'; first training images: {[tuple(t.shape) for t in batch["inputs"][:4]]}'
    lines.append(crop)
    rates = ', '.join(f'{k}={v}' for k, v in _walk(cfg.model, REGULARISATION_KEYS, 'model'))
    lines.append(f'stochastic depth / dropout: {rates or "none"}')
    return lines


class _Stages:
    """Runs the preflight stages in order; a failed stage is recorded and the stages that need it are skipped."""

    def __init__(self) -> None:
        self.lines: list[str] = []  # one per stage, said after the verdict and its problems
        self.problems: list[str] = []

    def __call__(self, name: str, fn: Callable[[], object], returns_problems: bool = False):
        """``fn()``, or None if it raised; with ``returns_problems``, ``fn`` returns the problems it found."""
        try:
            result = fn()
        except Exception as error:  # the run would fail here: report it and go on where possible
            result, found = None, [f'{type(error).__name__}: {error}']
        else:
            found = list(result or []) if returns_problems else []
        self.problems += [f'{name}: {problem}' for problem in found]
        self.lines.append(f'[preflight] {name}: {"FAILED" if found else "ok"}')
        return result


def _one_batch(runner, cfg: Config, loader: str):
    """The dataset of a dataloader (unwrapped from the data check's) and its first batch."""
    dataloader = runner.build_dataloader(copy.deepcopy(cfg[loader]), seed=runner.seed)
    return getattr(dataloader.dataset, 'wrapped', dataloader.dataset), next(iter(dataloader))


def batch_labels(batch, ignore_index: int = 255) -> set[int]:
    """The class ids of a batch's ground truth: label map values (but ``ignore_index``), instance and image
    labels."""
    labels: set[int] = set()
    for sample in (batch or {}).get('data_samples', []) if isinstance(batch, Mapping) else []:
        for field in ('gt_sem_seg', 'gt_instances', 'gt_label'):
            value = getattr(sample, field, None)
            value = getattr(value, 'data', None) if field == 'gt_sem_seg' else \
                getattr(value, 'labels', None) if field == 'gt_instances' else value
            if isinstance(value, torch.Tensor):
                labels |= {v for v in value.unique().tolist() if v != ignore_index or field != 'gt_sem_seg'}
    return labels


def _classes_against_model(cfg: Config, loader: str, dataset, batch) -> list[str]:
    """The ``num_classes`` settings of the model that disagree with the classes of ``loader``'s data."""
    return [str(problem) for leaf in leaves(dataset)
            for problem in head_class_problems(cfg, leaf, batch_labels(batch), f'{loader}.dataset')]


def _train_step(runner, cfg: Config, batch, lines: list[str]) -> list[str]:
    """One optimizer step, its losses added to ``lines``; the problems of its loss, gradients and updated weights."""
    runner.optim_wrapper = runner.build_optim_wrapper(copy.deepcopy(cfg.optim_wrapper))
    if cfg.get('param_scheduler'):
        runner.param_schedulers = runner.build_param_scheduler(copy.deepcopy(cfg.param_scheduler))
    model = runner.model
    names = {id(p): n for n, p in model.named_parameters()}
    grads: list[str] = []
    handle = runner.optim_wrapper.optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: grads.extend(nonfinite_tensors(
            (names.get(id(p), '?'), p.grad) for g in opt.param_groups for p in g['params'] if p.grad is not None)))
    model.train()
    try:
        log_vars = model.train_step(batch, optim_wrapper=runner.optim_wrapper)
    finally:
        handle.remove()
    log_vars = {k: torch.as_tensor(v).detach() for k, v in log_vars.items()}
    problems = [f'non-finite loss {k}={float(v)}' for k, v in log_vars.items()
                if v.numel() == 1 and not math.isfinite(float(v))]
    if grads:
        problems.append(f'non-finite gradients in {len(grads)} parameters (first: {grads[:3]})')
    weights = nonfinite_tensors(model.state_dict().items())
    if weights:
        problems.append(f'{len(weights)} weights non-finite after one step (first: {weights[:3]})')
    losses = ', '.join(f'{k}={float(v):.4f}' for k, v in log_vars.items() if v.numel() == 1)
    lines.append(f'[preflight] losses of the training step: {losses}')
    return problems


def preflight(cfg: Config, say: Callable[[str], None] = print, show_config: bool = False) -> list[str]:
    """Check that ``cfg`` trains (see the module docstring); return the problems found.

    Says the verdict first, then each stage and the recipe (the full config too with ``show_config``).
    What the libraries print meanwhile (the Runner's environment and config, their warnings) goes to
    ``preflight.log`` in ``cfg.work_dir``, which the last line names.
    """
    from ..data_checks.data_check import Runner
    log_file = os.path.join(cfg.work_dir, 'preflight.log')
    config_text = cfg.pretty_text if show_config else ''
    cfg = copy.deepcopy(cfg)
    cfg.launcher = 'none'
    cfg.resume = False
    for loader in LOADERS:  # the same datasets and pipelines, read in this process
        if cfg.get(loader):
            cfg[loader].update(num_workers=0, persistent_workers=False)
    stage = _Stages()
    recipe_lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix='preflight-') as work_dir, library_output_to(log_file):
        cfg.work_dir = work_dir
        runner = stage('build the model', lambda: Runner.from_cfg(cfg))
        if runner is not None:
            stage('load the initial weights', lambda: runner.model.init_weights())
            if cfg.load_from:
                stage(f'load_from {cfg.load_from}', lambda: runner.load_checkpoint(cfg.load_from))
            batches = {}
            for loader in LOADERS:
                if cfg.get(loader):
                    read = stage(f'read one batch of {loader}', lambda loader=loader: _one_batch(runner, cfg, loader))
                    dataset, batches[loader] = read or (None, None)
                    if dataset is not None:
                        stage(f'{loader} vs the model', returns_problems=True,
                              fn=lambda loader=loader, dataset=dataset: _classes_against_model(
                                  cfg, loader, dataset, batches[loader]))
            train = batches.get('train_dataloader')
            if train is not None:
                stage('one training step', lambda: _train_step(runner, cfg, train, stage.lines), returns_problems=True)
            model = runner.model
            recipe_lines = stage('the recipe', lambda: recipe(cfg, runner.optim_wrapper, model, train)) or []
    say('[preflight] ' + ('OK: the config builds, loads, reads its data and trains one finite step'
                          if not stage.problems else f'{len(stage.problems)} problem(s):'))
    for problem in stage.problems:
        say(f'  - {problem}')
    for line in stage.lines:
        say(line)
    if recipe_lines:
        say('[preflight] recipe:')
        for line in recipe_lines:
            say('  ' + line)
    if show_config:
        say('[preflight] config:')
        say(config_text)
    with open(log_file, errors='replace') as log:
        text = log.read()
    warned = text.count('Warning:') + text.count('WARNING')
    say(f"[preflight] the libraries' own output (the Runner's environment and config, {warned} warnings; "
        f'{len(text.splitlines())} lines): {log_file}' + ('' if show_config else '; the config here: --show-config'))
    return stage.problems
