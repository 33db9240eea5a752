# The runtime layer every trainable config of this project inherits, on top of its mm library's
# default runtime (each recipe root lists it in `_base_`; the other configs inherit it from there).
# It is the one place for project-wide runtime settings. Its keys must not repeat a key of the mm
# runtimes (default_scope, default_hooks, env_cfg, vis_backends, visualizer, log_processor,
# log_level, load_from, resume, randomness): mmengine refuses a key defined by two sibling bases.
# Hooks go into `custom_hooks`, which no mm runtime defines.
_base_ = ['./safe_runtime.py']  # crash-safe checkpoints, exact resume, stop on non-finite values
