"""The paper's figures (:mod:`.paper`, one table), the trained runs' results beside them (:mod:`.results`),
read from MMEngine's logs (:mod:`.scalars`), summarised over runs (:mod:`.statistics`) and plotted
(:mod:`.curves`); the demo's chance baselines (:mod:`.baselines`) and the attention maps of Fig. 4
(:mod:`.walk_maps`).

Submodules are imported on use: :mod:`.walk_maps` needs torch alone, :mod:`.paper`, :mod:`.scalars` and
:mod:`.results` the standard library (:func:`.statistics.mean_interval` scipy).
"""
