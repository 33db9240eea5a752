# Run safety (SafeRuntimeHook, NonFiniteGuardHook): the fragment ships inside the package, so an installed
# lisa-mm reads it without this repo (projects/lisa/configs/safe_runtime.py says what each hook does).
_base_ = ['../../projects/lisa/configs/safe_runtime.py']
