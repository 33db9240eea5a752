"""Run ``tools/train.py`` (same arguments) but stall at one point of a checkpoint save, for a SIGKILL there.

``STALL_POINT`` picks the point, ``STALL_TARGET`` the file it concerns; on
reaching it the process prints ``STALLED`` and sleeps, so a test can kill it
exactly there. The points patch the file operations any implementation of a
save must go through, so they apply to MMEngine's ``CheckpointHook`` as well:

* ``write``: half of the bytes of a checkpoint whose name contains the target are written;
* ``rename``: the target is complete under another name and about to be renamed to its own;
* ``published``: ``last_checkpoint`` has just been made to name the target;
* ``remove``: the target (an old checkpoint) is about to be deleted;
* ``iteration``: iteration ``target`` is done (and saved, if due), the next one not begun (every process).

With ``STALL_RELEASE`` set, the process goes on once that file exists.
"""
from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

from mmengine.fileio import LocalBackend

POINT, TARGET = os.environ['STALL_POINT'], os.environ['STALL_TARGET']
TRAIN = str(Path(__file__).resolve().parents[1] / 'tools' / 'train.py')


def stall() -> None:
    """Print ``STALLED`` and wait: for a kill, or until the file ``STALL_RELEASE`` names exists (then go on)."""
    print('STALLED', flush=True)
    release, deadline = os.environ.get('STALL_RELEASE'), time.monotonic() + 600
    while time.monotonic() < deadline and not (release and os.path.exists(release)):
        time.sleep(0.05)


put, replace, remove = LocalBackend.put, os.replace, os.remove


def partial_put(self, obj, filepath) -> None:
    if TARGET in os.path.basename(str(filepath)):
        with open(filepath, 'wb') as f:
            f.write(obj[:len(obj) // 2])
        stall()
    put(self, obj, filepath)


def stalled_replace(src, dst) -> None:
    if POINT == 'rename' and str(dst).endswith(TARGET):
        stall()
    replace(src, dst)
    if POINT == 'published' and str(dst).endswith('last_checkpoint') and Path(dst).read_text().endswith(TARGET):
        stall()


def stalled_remove(path) -> None:
    if str(path).endswith(TARGET):
        stall()
    remove(path)


def stalled_run_iter(self, data_batch) -> None:
    if self._iter == int(TARGET):
        stall()
    run_iter(self, data_batch)


if POINT == 'iteration':
    from mmengine.runner import IterBasedTrainLoop
    run_iter, IterBasedTrainLoop.run_iter = IterBasedTrainLoop.run_iter, stalled_run_iter
elif os.environ.get('RANK', '0') == '0':  # only the saving process stalls in a save
    if POINT == 'write':
        LocalBackend.put = partial_put
    os.replace, os.remove = stalled_replace, stalled_remove
sys.argv = [TRAIN, *sys.argv[1:]]
runpy.run_path(TRAIN, run_name='__main__')
