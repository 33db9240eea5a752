#!/usr/bin/env bash
# Usage: tools/dist_train.sh CONFIG NPROC [train.py args...]
# One process per GPU (nccl) or, without CUDA, per CPU worker (gloo).
set -euo pipefail
CONFIG=$1
NPROC=$2
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$( [[ -x "${ROOT}/.venv/bin/python" ]] && echo "${ROOT}/.venv/bin/python" || echo python)}"
PYTHONPATH="${ROOT}:${PYTHONPATH:-}" exec "${PY}" -m torch.distributed.run \
    --nnodes="${NNODES:-1}" --node_rank="${NODE_RANK:-0}" \
    --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="${PORT:-29500}" \
    --nproc_per_node="${NPROC}" "${ROOT}/tools/train.py" "${CONFIG}" --launcher pytorch "${@:3}"
