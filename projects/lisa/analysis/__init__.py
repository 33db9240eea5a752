"""Measurements behind the paper's tables: FLOPs (:mod:`.flops`), latency and
memory (:mod:`.benchmark`), the attention maps of Fig. 4 (:mod:`.walk_maps`) and
the trained runs' results beside the paper's tables (:mod:`.results`), read from
MMEngine's logs (:mod:`.scalars`) and summarised over runs (:mod:`.statistics`).
The paper's models and its figures for them are one table (:mod:`.paper`).

Submodules are imported on use: :mod:`.benchmark` and :mod:`.walk_maps` need
torch alone, :mod:`.flops` needs MMEngine, :mod:`.paper`, :mod:`.scalars` and
:mod:`.results` the standard library (:func:`.statistics.mean_interval` scipy).
"""
