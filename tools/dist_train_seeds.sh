#!/usr/bin/env bash
# Usage: tools/dist_train_seeds.sh CONFIG NPROC [SEED ...] [-- train.py args...]
# One training run per seed (default: 0 1 2, the three runs per setting of the paper's Fig. 3),
# one after the other, each with tools/dist_train.sh on NPROC processes, into
# ${WORK_DIR:-work_dirs/<config name>}/seed<S>. Then: tools/report_seeds.py <that folder> ...
# Arguments after "--" go to tools/train.py, except --cfg-options (it would replace the seed's).
set -euo pipefail
CONFIG=$1
NPROC=$2
shift 2
SEEDS=()
while [[ $# -gt 0 && "$1" != "--" ]]; do SEEDS+=("$1"); shift; done
[[ $# -gt 0 ]] && shift  # the "--"
[[ ${#SEEDS[@]} -eq 0 ]] && SEEDS=(0 1 2)
for SEED in "${SEEDS[@]}"; do
    [[ "${SEED}" =~ ^[0-9]+$ ]] || { echo "dist_train_seeds.sh: seed '${SEED}' is not a non-negative integer" >&2; exit 2; }
done
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
NAME="$(basename "${CONFIG}" .py)"
OUT="${WORK_DIR:-work_dirs/${NAME}}"
for SEED in "${SEEDS[@]}"; do
    "${ROOT}/tools/dist_train.sh" "${CONFIG}" "${NPROC}" --work-dir "${OUT}/seed${SEED}" \
        --cfg-options randomness.seed="${SEED}" "$@"
done
