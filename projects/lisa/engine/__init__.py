"""Engine-side helpers for MMEngine runs: safe checkpoint loading (:mod:`.checkpoint`),
CPU multi-process set-up (:mod:`.dist`), data checks that name the bad file
(:mod:`.data_check`; the rules of valid data in :mod:`.image_check`, :mod:`.label_map_check` and
:mod:`.coco_annotation_check`, found as :mod:`.data_problems`, applied by :mod:`.dataset_loading` and
:mod:`.split_check`), and the run
safety of ``configs/_base_/safe_runtime.py``: stop on non-finite values (:mod:`.nonfinite`),
crash-safe checkpoints (:mod:`.checkpoint_hook`) with an exact resume (:mod:`.resume`),
CPU bf16 ``--amp`` (:mod:`.amp`) and the ``--dry-run`` preflight (:mod:`.preflight`).
The models do not depend on this package.
"""
