#!/usr/bin/env bash
# Evaluate a checkpoint on a Slurm cluster: one task per GPU, started by srun (tools/test.py --launcher slurm).
#
# Usage: [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS="..."] \
#        tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [test.py args...]
set -euo pipefail
if (( $# < 4 )); then
    echo "usage: $0 PARTITION JOB_NAME CONFIG CHECKPOINT [test.py args...]" >&2
    exit 2
fi
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
CHECKPOINT=$4
shift 4
source "$(dirname "$0")/slurm_common.sh"
slurm_run "${ROOT}/tools/test.py" "${CONFIG}" "${CHECKPOINT}" --launcher slurm "$@"
