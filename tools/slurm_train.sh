#!/usr/bin/env bash
# Train on a Slurm cluster: one task per GPU, started by srun; tools/train.py sets up the process
# group from Slurm's variables (--launcher slurm).
#
# Usage: [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS="..."] \
#        tools/slurm_train.sh PARTITION JOB_NAME CONFIG [WORK_DIR] [train.py args...]
# e.g.   GPUS=16 tools/slurm_train.sh gpu lisa configs/segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py
set -euo pipefail
if (( $# < 3 )); then
    echo "usage: $0 PARTITION JOB_NAME CONFIG [WORK_DIR] [train.py args...]" >&2
    exit 2
fi
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
shift 3
WORK_DIR=()
if (( $# > 0 )) && [[ $1 != -* ]]; then  # a fourth argument that is no option is the work dir
    WORK_DIR=(--work-dir "$1")
    shift
fi
source "$(dirname "$0")/slurm_common.sh"
slurm_run "${ROOT}/tools/train.py" "${CONFIG}" "${WORK_DIR[@]}" --launcher slurm "$@"
