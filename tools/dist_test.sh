#!/usr/bin/env bash
# Usage: tools/dist_test.sh CONFIG CHECKPOINT NPROC [test.py args...]
set -euo pipefail
CONFIG=$1
CHECKPOINT=$2
NPROC=$3
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$( [[ -x "${ROOT}/.venv/bin/python" ]] && echo "${ROOT}/.venv/bin/python" || echo python)}"
PYTHONPATH="${ROOT}:${PYTHONPATH:-}" exec "${PY}" -m torch.distributed.run \
    --nnodes="${NNODES:-1}" --node_rank="${NODE_RANK:-0}" \
    --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="${PORT:-29500}" \
    --nproc_per_node="${NPROC}" "${ROOT}/tools/test.py" "${CONFIG}" "${CHECKPOINT}" --launcher pytorch "${@:4}"
