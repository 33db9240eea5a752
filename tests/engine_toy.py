"""A model and a dataset small enough to train in milliseconds, for the engine tests.

They draw from every random generator a real run uses: the dataset augments
with NumPy and Python's ``random`` (as mmcv's transforms do), the model applies
dropout (torch), so an inexact resume shows in the weights. A config names
them after ``custom_imports=dict(imports=['engine_toy'])`` (``tests/`` on the path).
"""
from __future__ import annotations

import random

import numpy as np
import torch
from mmengine.evaluator import BaseMetric
from mmengine.model import BaseModel
from mmengine.registry import DATASETS, METRICS, MODELS
from torch.utils.data import Dataset

import projects.lisa.registry  # noqa: F401  (the hooks toy_config names: Config(dict) runs no custom_imports)

#: The dense demo configs start from the demo's pretrained classifier (tools/demo.py writes it); the
#: engine tests run them on their own, from scratch.
FROM_SCRATCH = 'model.backbone.init_cfg=None'


def from_scratch(args: list[str]) -> list[str]:
    """Tool arguments with ``--cfg-options`` (one list: a second flag would replace it) holding FROM_SCRATCH."""
    if '--cfg-options' not in args:
        return [*args, '--cfg-options', FROM_SCRATCH]
    i = args.index('--cfg-options') + 1
    return [*args[:i], FROM_SCRATCH, *args[i:]]


@DATASETS.register_module()
class ToyRegressionDataset(Dataset):
    """``x`` of 8 values with random noise and sign flips; target ``sum(x)``. ``nan_at`` puts a NaN target there."""

    def __init__(self, length: int = 32, nan_at: tuple[int, ...] = ()) -> None:
        self.x = torch.linspace(-1, 1, length * 8).reshape(length, 8)
        self.nan_at = set(nan_at)
        self.metainfo = dict(classes=('value', ))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, idx: int) -> dict:
        x = self.x[idx] + torch.from_numpy(np.random.normal(0, 0.1, 8).astype(np.float32))
        x = -x if random.random() < 0.5 else x
        target = torch.tensor(float('nan') if idx in self.nan_at else float(x.sum()))
        return dict(inputs=x, data_samples=target)


@MODELS.register_module()
class ToyRegressor(BaseModel):
    """An MLP with dropout; ``loss`` is the squared error, ``predict`` returns the outputs."""

    def __init__(self, hidden: int = 16, dropout: float = 0.5, init_cfg: dict | None = None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout),
                                       torch.nn.Linear(hidden, 1))

    def forward(self, inputs, data_samples=None, mode: str = 'tensor'):
        out = self.net(torch.stack(inputs)).squeeze(1)
        if mode == 'loss':
            return dict(loss=((out - torch.stack(data_samples)) ** 2).mean())
        return list(out) if mode == 'predict' else out  # predictions: one per sample, as mm models return


@METRICS.register_module()
class ToyMSE(BaseMetric):
    """The mean squared error of :class:`ToyRegressor`'s predictions."""

    def process(self, data_batch, data_samples) -> None:
        targets = data_batch['data_samples']
        self.results.extend(((out - target) ** 2).item() for out, target in zip(data_samples, targets))

    def compute_metrics(self, results: list) -> dict:
        return dict(mse=sum(results) / len(results))


def toy_config(work_dir: str, max_iters: int = 8, interval: int = 2, lr: float = 0.01, safe: bool = True,
               nan_at: tuple[int, ...] = (), guard: dict | None = None, **checkpoint) -> dict:
    """An iteration-based MMEngine config of the toy.

    ``safe``: with the hooks of ``configs/_base_/safe_runtime.py`` (``guard``: the
    ``NonFiniteGuardHook``'s arguments); ``checkpoint``: ``CheckpointHook`` arguments.
    """
    return dict(
        custom_imports=dict(imports=['projects.lisa.registry', 'engine_toy'], allow_failed_imports=False),
        model=dict(type='ToyRegressor'),
        work_dir=work_dir,
        train_dataloader=dict(batch_size=4, num_workers=0, dataset=dict(type='ToyRegressionDataset', nan_at=nan_at),
                              sampler=dict(type='InfiniteSampler', shuffle=True),
                              collate_fn=dict(type='pseudo_collate')),
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=10 ** 6),
        optim_wrapper=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=lr, weight_decay=0.01)),
        param_scheduler=[dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=max_iters, by_epoch=False)],
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=interval, **checkpoint),
                           logger=dict(type='LoggerHook', interval=1)),
        custom_hooks=[dict(type='SafeRuntimeHook'), dict(type='NonFiniteGuardHook', **(guard or {}))] if safe else [],
        log_processor=dict(window_size=1, by_epoch=False),
        randomness=dict(seed=0),
        test_dataloader=dict(batch_size=4, num_workers=0, dataset=dict(type='ToyRegressionDataset'),
                             sampler=dict(type='DefaultSampler', shuffle=False),
                             collate_fn=dict(type='pseudo_collate')),
        test_cfg=dict(type='TestLoop'),
        test_evaluator=dict(type='ToyMSE'),
        default_scope=None,
    )
