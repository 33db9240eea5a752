#!/usr/bin/env bash
# The GPU check with torch alone (no OpenMMLab package needed): the attention tests on the
# device, the layer benchmark and the Table 13 DeiT-T benchmark; JSON + markdown in --out.
#
#   bash tools/gpu_check.sh [--device cuda|cpu|auto] [--small] [--out DIR]
#
# Under 8 minutes on one GPU. CI runs `--device cpu --small`. $PYTHON picks the interpreter
# (default: python3). See tools/gpu_check.py.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
export PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}"
exec "${PYTHON:-python3}" tools/gpu_check.py "$@"
