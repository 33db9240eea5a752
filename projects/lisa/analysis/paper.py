"""Every figure the paper gives, in one place: its models with their configs and GFLOPs, its result rows, Table 13.

:data:`ROWS` holds every row of Tables 1-8 and Fig. 3 (the paper's metric values and the model keys of
the configs that reproduce each row), :data:`TABLES` their captions; ``tools/collect_results.py`` sets the
runs' own figures beside them (:mod:`.results`).

:data:`PAPER_MODELS` lists each config of ``configs/`` that a row of LiSA's Table 2 (BiFormer),
Table 3 (ADE20K) or Table 4 (COCO) names, with the paper's GFLOPs where it gives them. The FLOP
counter (``tools/get_flops.py --paper``), the deployment benchmark (``tools/benchmark_deploy.py``)
and the dense-model benchmark (``tools/benchmark_model.py --dense``) read their models from here,
so that a config renamed or a row added changes one place. :data:`TABLE_13` holds the supplement's
DeiT-T latency and memory, which ``tools/benchmark_model.py`` and ``tools/collect_results.py``
set beside their measurements.

The standard library only: the torch-only DeiT benchmark imports this on machines without the mm
packages.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PaperModel:
    """One model of a paper table and the config of this project that builds it.

    Args:
        table: The paper's label, e.g. ``'Table 3'``.
        method: The segmentor or detector as the tables name it (``'S-FPN'``, ``'UperNet'``,
            ``'Mask R-CNN'``); ``''`` for a classifier.
        backbone: The backbone with its attention, e.g. ``'LiSA-PVT-T'``.
        config: The config's path under ``configs/``.
        gflops: The paper's GFLOPs (None where the paper gives none).
    """

    table: str
    method: str
    backbone: str
    config: str
    gflops: float | None

    @property
    def name(self) -> str:
        """``'S-FPN LiSA-PVT-T'``, ``'Mask R-CNN Swin-T'``; the backbone alone for a classifier."""
        return f'{self.method} {self.backbone}'.strip()


_FPN = 'segmentation/fpn_{}_8xb4-40k_ade20k-512x512.py'
_UPERNET = 'segmentation/upernet_{}_8xb2-160k_ade20k-512x512.py'
_MASK_RCNN = 'detection/mask-rcnn_{}_fpn_1x_coco.py'
_BIFORMER = 'classification/biformer-{}_8xb128_in1k.py'
_BIFORMER_FPN = 'segmentation/fpn_{}_8xb4-80k_ade20k-512x512.py'

PAPER_MODELS: tuple[PaperModel, ...] = (
    # Table 3 (ADE20K), GFLOPs at 2048x512
    PaperModel('Table 3', 'S-FPN', 'PVT-T', _FPN.format('pvt-t'), 158),
    PaperModel('Table 3', 'S-FPN', 'FLatten-PVT-T', _FPN.format('flatten-pvt-t'), 169),
    PaperModel('Table 3', 'S-FPN', 'LiSA-PVT-T', _FPN.format('lisa-pvt-t'), 170),
    PaperModel('Table 3', 'UperNet', 'Swin-T', _UPERNET.format('swin-t'), 945),
    PaperModel('Table 3', 'UperNet', 'FLatten-Swin-T', _UPERNET.format('flatten-swin-t'), 946),
    PaperModel('Table 3', 'UperNet', 'LiSA-Swin-T', _UPERNET.format('lisa-swin-t'), 947),
    # Table 4 (COCO), GFLOPs at 1280x800; the paper has no FLatten rows
    PaperModel('Table 4', 'Mask R-CNN', 'PVT-T', _MASK_RCNN.format('pvt-t'), 240),
    PaperModel('Table 4', 'Mask R-CNN', 'FLatten-PVT-T', _MASK_RCNN.format('flatten-pvt-t'), None),
    PaperModel('Table 4', 'Mask R-CNN', 'LiSA-PVT-T', _MASK_RCNN.format('lisa-pvt-t'), 245),
    PaperModel('Table 4', 'Mask R-CNN', 'Swin-T', _MASK_RCNN.format('swin-t'), 267),
    PaperModel('Table 4', 'Mask R-CNN', 'FLatten-Swin-T', _MASK_RCNN.format('flatten-swin-t'), None),
    PaperModel('Table 4', 'Mask R-CNN', 'LiSA-Swin-T', _MASK_RCNN.format('lisa-swin-t'), 269),
    # Table 2 gives no FLOPs: BiFormer's own published figures at 224 (rayleizhu/BiFormer), none for LiSA
    PaperModel('Table 2', '', 'BiFormer-T', _BIFORMER.format('tiny_bra'), 2.2),
    PaperModel('Table 2', '', 'LiSA-BiFormer-T', _BIFORMER.format('tiny_lisa'), None),
    PaperModel('Table 2', '', 'BiFormer-S', _BIFORMER.format('small_bra'), 4.5),
    PaperModel('Table 2', '', 'LiSA-BiFormer-S', _BIFORMER.format('small_lisa'), None),
    PaperModel('Table 2', '', 'BiFormer-B', _BIFORMER.format('base_bra'), 9.8),
    PaperModel('Table 2', '', 'LiSA-BiFormer-B', _BIFORMER.format('base_lisa'), None),
    PaperModel('Table 2', 'S-FPN', 'BiFormer-S', _BIFORMER_FPN.format('biformer-s'), None),
    PaperModel('Table 2', 'S-FPN', 'LiSA-BiFormer-S', _BIFORMER_FPN.format('lisa-biformer-s'), None),
)
"""Every model of Tables 2-4, by table; in each family the softmax (or BRA) baseline first."""

PAPER_GFLOPS: dict[str, float | None] = {m.config: m.gflops for m in PAPER_MODELS}
"""Config path under ``configs/`` -> the paper's GFLOPs (None: not in the paper)."""


def paper_models(table: str, method: str | None = None) -> list[PaperModel]:
    """The models of one table (of one ``method``, e.g. ``'UperNet'``), in the table's order."""
    return [m for m in PAPER_MODELS if m.table == table and method in (None, m.method)]


TABLE_13: dict[int, dict[str, tuple[float, float | None]]] = {
    197: {'softmax': (3.50, None), 'flatten': (7.15, None), 'lisa': (13.53, None)},
    16385: {'softmax': (898.92, 50281.7), 'flatten': (91.84, 1605.2), 'lisa': (161.71, 3409.1)},
}
"""Supp. Table 13, DeiT-T at batch 1 (GPU not stated): tokens -> attention -> (latency ms, peak memory MB)."""


@dataclass(frozen=True)
class Row:
    """One row of a paper table: the configs that reproduce it and the paper's values.

    Args:
        table: The paper's label, e.g. ``'Table 1'``.
        label: The row as the paper names it.
        keys: Model keys (:func:`parse_config_name`) of the configs of this row.
        data: Regular expression the config's data field must match in full.
        paper: Metric name (:data:`METRICS`) -> the paper's value (None: not reported).
        paper_std: Metric -> the paper's standard deviation, where it reports one.
    """

    table: str
    label: str
    keys: tuple[str, ...]
    data: str
    paper: dict[str, float | None]
    paper_std: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Gain:
    """A difference the paper reports between two rows of one table (``minuend - subtrahend``)."""

    table: str
    label: str
    minuend: str
    subtrahend: str
    paper: dict[str, float]


def _rows_1() -> list[Row]:
    values = {  # ImageNet-1K top-1 (%): softmax, FLatten, LiSA
        ('DeiT-T 224', 'deit-tiny', 'in1k'): (72.20, 74.10, 74.54),
        ('DeiT-T 384', 'deit-tiny', 'in1k-384px'): (74.90, 76.53, 77.54),
        ('DeiT-S 224', 'deit-small', 'in1k'): (79.80, 80.10, 80.78),
        ('PVT-T 224', 'pvt-tiny', 'in1k'): (75.10, 77.80, 78.53),
        ('PVT-S 224', 'pvt-small', 'in1k'): (79.80, 81.70, 81.96),
        ('Swin-T 224', 'swin-tiny', 'in1k'): (81.30, 82.10, 82.25),
    }
    return [Row('Table 1', f'{label} / {name}', (f'{model}_{row}', ), data, {'top-1': value})
            for (label, model, data), row_values in values.items()
            for row, name, value in zip(('softmax', 'flatten', 'lisa'), ('softmax', 'FLatten', 'LiSA'), row_values)]


def _rows_2() -> list[Row]:
    top1 = {'tiny': (81.4, 82.4), 'small': (83.8, 84.1), 'base': (84.3, 85.0)}
    rows = [Row('Table 2', f'BiFormer-{size[0].upper()} / {name}', keys, 'in1k', {'top-1': value})
            for size, values in top1.items()
            for name, keys, value in zip(
                ('BiFormer', 'LiSA'),
                ((f'biformer-{size}_bra', f'biformer-{size}_biformer', f'biformer-{size}_softmax'),
                 (f'biformer-{size}_lisa', )), values)]
    return rows + [Row('Table 2', f'BiFormer-S Semantic FPN ADE20K / {name}', keys, r'ade20k(-512x512)?',
                       {'mIoU': value})
                   for name, keys, value in (('BiFormer', ('fpn_biformer-s', ), 48.9),
                                             ('LiSA', ('fpn_lisa-biformer-s', ), 49.5))]


def _rows_3() -> list[Row]:
    values = {  # ADE20K (mIoU, mAcc) of the baseline, FLatten, LiSA
        ('PVT-T Semantic FPN', 'fpn', 'pvt-t', 'PVT'): ((36.57, 46.72), (37.21, 48.95), (40.85, 51.75)),
        ('Swin-T UperNet', 'upernet', 'swin-t', 'Swin'): ((44.51, 55.61), (44.82, 57.01), (45.03, 56.40)),
    }
    return [Row('Table 3', f'{label} / {name}', (f'{head}_{prefix}{backbone}', ), 'ade20k-512x512',
                {'mIoU': miou, 'mAcc': macc})
            for (label, head, backbone, base), row_values in values.items()
            for prefix, name, (miou, macc) in zip(('', 'flatten-', 'lisa-'), (base, 'FLatten', 'LiSA'), row_values)]


def _rows_4() -> list[Row | Gain]:
    paper = {  # COCO Mask R-CNN 1x: box AP, mask AP (no FLatten rows in the paper)
        'pvt-t': ((36.7, 35.1), None, (40.5, 37.6)),
        'swin-t': ((43.7, 39.8), None, (44.5, 40.3)),
    }
    rows: list[Row | Gain] = []
    for backbone, row_values in paper.items():
        base = 'PVT-T' if backbone == 'pvt-t' else 'Swin-T'
        for prefix, name, values in zip(('', 'flatten-', 'lisa-'), (base, 'FLatten', 'LiSA'), row_values):
            box, mask = values or (None, None)
            rows.append(Row('Table 4', f'{base} / {name}', (f'mask-rcnn_{prefix}{backbone}_fpn', ), 'coco',
                            {'box AP': box, 'box AP50': None, 'box AP75': None,
                             'mask AP': mask, 'mask AP50': None, 'mask AP75': None}))
    rows.append(Gain('Table 4', 'PVT-T: LiSA - PVT-T', 'PVT-T / LiSA', 'PVT-T / PVT-T',
                     {'box AP': 3.8, 'box AP50': 3.7, 'box AP75': 4.8, 'mask AP': 2.5, 'mask AP50': 3.0,
                      'mask AP75': 2.9}))
    rows.append(Gain('Table 4', 'Swin-T: LiSA - Swin-T', 'Swin-T / LiSA', 'Swin-T / Swin-T',
                     {'box AP': 0.8, 'mask AP': 0.5}))
    return rows


MINI = r'.*mini.*'
"""Data field of the ablations' configs: the paper runs them on mini-ImageNet."""


def _rows_ablations() -> list[Row]:
    fig3 = {1: (73.34, 0.64), 2: (75.43, 0.56), 3: (75.63, 0.39), 4: (75.16, 0.13), 5: (75.73, 0.47)}
    rows = [Row('Fig. 3', f'DeiT-T, T = {t}', (f'deit-tiny_lisa-t{t}', ) + (('deit-tiny_lisa', ) if t == 3 else ()),
                MINI, {'top-1': mean}, {'top-1': std}) for t, (mean, std) in fig3.items()]
    rows += [Row('Table 5', f'DeiT-S / {name}', keys, 'in1k', {'top-1': value}) for name, keys, value in (
        ('softmax', ('deit-small_softmax', ), 79.8), ('FLatten', ('deit-small_flatten', ), 80.1),
        ('linear angular', ('deit-small_angular', 'deit-small_linear-angular'), 79.21),
        ('linear', ('deit-small_linear', ), None), ('LiSA', ('deit-small_lisa', ), 80.78))]
    rows += [Row('Table 6', f'{model} / {name}', (f'{key}_lisa-t5{suffix}', ), MINI, {'top-1': value})
             for model, key, values in (('DeiT-T', 'deit-tiny', (73.7, 73.4, 76.3)),
                                        ('DeiT-S', 'deit-small', (78.3, 78.1, 80.7)))
             for name, suffix, value in zip(('global only', 'local only', 'learned alpha'),
                                            ('-global', '-local', ''), values)]
    table7 = {('LA', 'deit-tiny_la'): (65.7, 65.9, 73.3, 74.4), ('GL', 'deit-tiny_gl-t5'): (69.2, 69.3, 75.2, 76.3)}
    for (kernel, key), values in table7.items():
        for extras, suffix, value in zip(('', ' + F', ' + D', ' + F + D'), ('', '-f', '-d', '-fd'), values):
            keys = (f'{key}{suffix}', ) + (('deit-tiny_lisa-t5', ) if kernel == 'GL' and suffix == '-fd' else ())
            rows.append(Row('Table 7', f'DeiT-T {kernel}{extras}', keys, MINI, {'top-1': value}))
    rows += [Row('Table 8', f'DeiT-T / {name}', (key, ), MINI, {'top-1': value})
             for name, key, value in (('ReLU', 'deit-tiny_lisa-t5', 76.3), ('ELU+1', 'deit-tiny_lisa-t5-elu', 76.0))]
    return rows


ROWS: list[Row | Gain] = [*_rows_1(), *_rows_2(), *_rows_3(), *_rows_4(), *_rows_ablations()]
"""Every row of Tables 1-8 and Fig. 3, in the paper's values (see ``lisa-paper.md``)."""
TABLES = {
    'Table 1': 'ImageNet-1K top-1 (%), 300 epochs from scratch, T = 3',
    'Table 2': 'BiFormer with LiSA: ImageNet-1K top-1 (%), ADE20K mIoU (%)',
    'Table 3': 'ADE20K semantic segmentation (%), ImageNet-1K pretrained backbones',
    'Table 4': 'COCO Mask R-CNN 1x, box and mask AP (%)',
    'Table 5': 'DeiT-S linear-attention baselines, ImageNet-1K top-1 (%)',
    'Fig. 3': 'Truncation depth T, DeiT-T on mini-ImageNet, top-1 (%), mean +- std over seeds',
    'Table 6': 'Global / local / learned alpha, mini-ImageNet, T = 5, top-1 (%)',
    'Table 7': 'Kernel (LA plain linear, GL LiSA) +- focusing F +- depthwise conv D, DeiT-T, mini-ImageNet',
    'Table 8': 'Feature map, DeiT-T, mini-ImageNet, T = 5, top-1 (%)',
    'Table 13': ('DeiT-T, batch 1 (tools/benchmark_model.py): latency of a training step (ms), memory (MiB: '
                 'CUDA peak, on the CPU the bytes saved for backward)'),
}
