"""Measurements behind the paper's tables: FLOPs (:mod:`.flops`), latency and
memory (:mod:`.benchmark`), the attention maps of Fig. 4 (:mod:`.walk_maps`) and
the trained runs' results beside the paper's tables (:mod:`.results`).

Submodules are imported on use: :mod:`.benchmark` and :mod:`.walk_maps` need
torch alone, :mod:`.flops` needs MMEngine, :mod:`.results` the standard library.
"""
