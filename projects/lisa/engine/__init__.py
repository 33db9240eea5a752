"""Run safety for MMEngine runs: checkpoint files loaded safely and written atomically (:mod:`.checkpoint`),
the crash-safe checkpoint hook (:mod:`.checkpoint_hook`) with an exact resume (:mod:`.resume`), the
runtime-safety hook of ``configs/_base_/safe_runtime.py`` (:mod:`.runtime_hook`; added by the tools to other
configs, :mod:`.runtime_config`) with one run per work dir
(:mod:`.work_dir_lock`), a stop on non-finite values (:mod:`.nonfinite`), CPU bf16 ``--amp`` (:mod:`.amp`),
CPU multi-process set-up (:mod:`.dist`), the ``--dry-run`` preflight (:mod:`.preflight`) and a missing
pretrained checkpoint (:mod:`.pretrained`). The models do not depend on this package.
"""
