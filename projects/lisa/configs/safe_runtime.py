# Run safety for every trainable config (projects/lisa/engine; registered by the custom_imports projects.lisa.registry).
# Part of the package (package data), so an installed lisa-mm has it; the repo's configs inherit it through
# configs/_base_/safe_runtime.py, and tools/train.py adds it to configs that do not (engine/runtime_config.py):
# - SafeRuntimeHook: the base configs' CheckpointHook becomes a SafeCheckpointHook (same settings): atomic saves
#   (temporary name, fsync, rename; old checkpoints removed only afterwards), no checkpoint of non-finite weights,
#   and the random state of every process saved and restored, so `--resume` continues the same run bit for bit;
#   a save the disk has no room for stops with the bytes needed; every checkpoint load (load_from, --resume,
#   tools/test.py) is strict (allow_new=[...], allow_unused=[...] name the exceptions; allow_mismatch=[...] or
#   tools/train.py --allow-mismatch seg_head keeps the model's own head when fine-tuning to other classes);
#   a resume whose config changed since the checkpoint stops with the list (override_optim=True /
#   accept_changes=True say how to go on; tools/train.py --override-optim / --accept-changes); a training run
#   holds its work dir (work_dir/run.lock): a second run there stops naming the first, a dead run's lock is replaced;
# - NonFiniteGuardHook: a non-finite input, gradient or loss stops the run at its iteration with what to check
#   (on_nonfinite='skip' drops such steps and counts them instead; fp16 loss-scaling skips are counted), and a
#   metric is never computed from non-finite predictions.
# A config that sets its own `custom_hooks` keeps these with `custom_hooks = _base_.custom_hooks + [...]`.
custom_hooks = [
    dict(type='SafeRuntimeHook'),
    dict(type='NonFiniteGuardHook', on_nonfinite='stop', max_consecutive_skips=20),
]
