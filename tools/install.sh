#!/usr/bin/env bash
# Install the pinned OpenMMLab stack into .venv/ (idempotent).
#
# A second run is a no-op unless this script or requirements.txt changed.
# mmcv has only an sdist on PyPI; it is compiled once (CPU ops, ~10 min on
# 2 cores) and the wheel kept in $LISA_WHEEL_CACHE for later installs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ROOT}/.venv"
PY="${VENV}/bin/python"
WHEELS="${LISA_WHEEL_CACHE:-${HOME}/.cache/lisa-mm/wheels}"
MMCV_VERSION=2.1.0
STAMP="${VENV}/.lisa-install-stamp"
digest="$(cat "$0" "${ROOT}/requirements.txt" "${ROOT}/setup.cfg" "${ROOT}/setup.py" "${ROOT}"/projects/lisa/models/attention/ops/*_cpu.cpp "${ROOT}"/projects/lisa/models/attention/ops/*.h | sha256sum | cut -d' ' -f1)"

if [[ -x "${PY}" && -f "${STAMP}" && "$(cat "${STAMP}")" == "${digest}" ]]; then
    exit 0
fi

log() { printf '[install] %s\n' "$*"; }

[[ -x "${PY}" ]] || { log "creating ${VENV}"; python3 -m venv "${VENV}"; }
# The machine's pip config adds local indexes that lack most packages; pip
# warns once per package. Keep real errors, drop that noise.
pip_install() {
    "${PY}" -m pip install --disable-pip-version-check -q "$@" \
        2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
}

log "torch, OpenMMLab packages, build tools"
# mmcv's setup.py imports pkg_resources (removed in setuptools 82), and openmim and mmengine import
# it on every mim command; from setuptools 80.9 on that import prints a UserWarning each time (before,
# a DeprecationWarning, shown where asked for: python -W default). torch needs setuptools >= 77.0.3.
pip_install 'setuptools<80.9' wheel -r "${ROOT}/requirements.txt"

if ! "${PY}" -c "import mmcv, mmcv.ops; assert mmcv.__version__ == '${MMCV_VERSION}'" 2>/dev/null; then
    mkdir -p "${WHEELS}"
    wheel="$(ls "${WHEELS}"/mmcv-${MMCV_VERSION}-*.whl 2>/dev/null | head -n1 || true)"
    if [[ -z "${wheel}" ]]; then
        log "building mmcv ${MMCV_VERSION} with CPU ops (about 10 minutes)"
        tmp="$(mktemp -d)"
        trap 'rm -rf "${tmp}"' EXIT
        "${PY}" -m pip download -q --disable-pip-version-check --no-deps --no-binary=:all: "mmcv==${MMCV_VERSION}" -d "${tmp}"
        tar -xzf "${tmp}"/mmcv-${MMCV_VERSION}.tar.gz -C "${tmp}"
        # torch >= 2.6 headers require C++20; mmcv 2.1.0 hard-codes c++17.
        sed -i 's/-std=c++17/-std=c++20/g' "${tmp}/mmcv-${MMCV_VERSION}/setup.py"
        # Without --no-build-isolation torch is invisible and ops are skipped.
        (cd "${tmp}/mmcv-${MMCV_VERSION}" && MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-2}" \
            "${PY}" -m pip wheel -q --no-build-isolation --no-deps . -w "${WHEELS}")
        wheel="$(ls "${WHEELS}"/mmcv-${MMCV_VERSION}-*.whl | head -n1)"
    fi
    log "installing ${wheel##*/}"
    pip_install --no-deps --force-reinstall "${wheel}"
fi

# openmim pulls opendatalab -> openxlab, which downgrades setuptools and
# requests; mim only shells out to them for dataset downloads.
pip_install --no-deps "openmim==0.3.9"

log "projects.lisa (editable, with its CPU kernels: a minute or two to compile)"
pip_install --no-deps --no-build-isolation -e "${ROOT}"

"${PY}" -W ignore -c "import mmcv.ops, mmseg, mmdet, mmpretrain, mim, projects.lisa.models.attention.ops._neighbourhood_cpu, \
projects.lisa.models.attention.ops._features_cpu, projects.lisa.models.attention.ops._depthwise_cpu, \
projects.lisa.models.attention.ops._walk_cpu" \
    || { log "import check failed"; exit 1; }
echo "${digest}" > "${STAMP}"
log "done: ${VENV}"
