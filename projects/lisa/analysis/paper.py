"""The paper's models and the figures it gives for them: one table for every tool that walks them.

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

from dataclasses import dataclass


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
