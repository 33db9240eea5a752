# The srun line of tools/slurm_train.sh and tools/slurm_test.sh (sourced by them, after PARTITION and
# JOB_NAME are set). GPUS tasks in all, GPUS_PER_NODE on each node (default: GPUS, at most 8),
# CPUS_PER_TASK cores each; SRUN_ARGS go to srun as they are (e.g. "--quotatype=auto -x node3").
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$( [[ -x "${ROOT}/.venv/bin/python" ]] && echo "${ROOT}/.venv/bin/python" || echo python)}"

positive() {  # NAME VALUE: VALUE, or exit naming it if it is no positive whole number
    if ! [[ $2 =~ ^[1-9][0-9]*$ ]]; then
        echo "$1=$2: expected a positive whole number" >&2
        exit 2
    fi
    echo "$2"
}
GPUS=$(positive GPUS "${GPUS:-8}") || exit 2
GPUS_PER_NODE=$(positive GPUS_PER_NODE "${GPUS_PER_NODE:-$(( GPUS < 8 ? GPUS : 8 ))}") || exit 2
CPUS_PER_TASK=$(positive CPUS_PER_TASK "${CPUS_PER_TASK:-5}") || exit 2
SRUN_ARGS=${SRUN_ARGS:-}

slurm_run() {
    # SRUN_ARGS unquoted on purpose: it holds several srun options.
    # shellcheck disable=SC2086
    PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}" exec srun -p "${PARTITION}" \
        --job-name="${JOB_NAME}" \
        --gres=gpu:"${GPUS_PER_NODE}" \
        --ntasks="${GPUS}" \
        --ntasks-per-node="${GPUS_PER_NODE}" \
        --cpus-per-task="${CPUS_PER_TASK}" \
        --kill-on-bad-exit=1 \
        ${SRUN_ARGS} \
        "${PY}" -u "$@"
}
