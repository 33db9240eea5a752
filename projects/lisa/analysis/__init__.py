"""Measurements behind the paper's tables: FLOPs (:mod:`.flops`), latency and
memory (:mod:`.benchmark`) and the attention maps of Fig. 4 (:mod:`.walk_maps`).

Submodules are imported on use: :mod:`.benchmark` and :mod:`.walk_maps` need
torch alone, :mod:`.flops` needs MMEngine.
"""
