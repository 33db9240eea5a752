"""One training run per work dir: a lock file that names its run, which a dead run's lock does not outlive.

Two runs in one work dir would write one log folder and the same checkpoint names, each
silently replacing the other's. :func:`lock_work_dir` creates ``<work_dir>/run.lock`` in one
step (``O_CREAT | O_EXCL``) holding the process id, host, start time and command of the run;
a second run finds it and stops with :class:`WorkDirLockedError`, which names that run and
what to do. Only the main process of a multi-process run takes the lock.

A lock is stale, and replaced, when its host is this one and its process no longer runs: the
pid is gone, or belongs to a process that started at another time (a reused pid: on Linux
the process start time and boot id of ``/proc`` are recorded and compared). A lock written on
another host cannot be checked from here: it holds until its run removes it, or until the
user deletes the file (the error says so). The lock is removed when its process exits.
"""
from __future__ import annotations

import atexit
import json
import os
import os.path as osp
import shlex
import socket
import sys
import time
from dataclasses import asdict, dataclass

LOCK_NAME = 'run.lock'
#: A lock being broken by another process (``<lock>.break``) counts as abandoned after this many seconds.
BREAK_TIMEOUT_S = 10.0


class WorkDirLockedError(RuntimeError):
    """The work dir is held by another run that is (or may be) alive."""


def _boot_id() -> str:
    try:
        with open('/proc/sys/kernel/random/boot_id') as f:
            return f.read().strip()
    except OSError:
        return ''


def process_start(pid: int) -> str | None:
    """An identity of the process ``pid`` that a reused pid does not share (boot id and start time in clock
    ticks on Linux; ``''`` where the system gives none), or ``None`` if no process ``pid`` runs (a zombie,
    killed but not reaped, runs no more)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()  # after the command name: state is field 3, start 22
        return None if fields[0] in 'ZX' else f'{_boot_id()}:{fields[19]}'
    except FileNotFoundError:
        return None
    except OSError:  # no /proc (macOS): only whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:  # another user's process
            pass
        return ''


@dataclass
class LockHolder:
    """The run recorded in a lock file."""
    pid: int
    host: str
    process_start: str
    started: str
    command: str

    @classmethod
    def this_process(cls) -> LockHolder:
        return cls(os.getpid(), socket.gethostname(), process_start(os.getpid()) or '',
                   time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()), shlex.join(sys.argv))

    def is_this_process(self) -> bool:
        return (self.pid, self.host, self.process_start) == (
            os.getpid(), socket.gethostname(), process_start(os.getpid()) or '')

    def alive(self) -> bool | None:
        """Whether the process runs; ``None`` where this host cannot tell (another host)."""
        if self.host != socket.gethostname():
            return None
        now = process_start(self.pid)
        return now is not None and (now == self.process_start or '' in (now, self.process_start))

    def describe(self) -> str:
        return f'process {self.pid} on host {self.host}, started {self.started} ({self.command})'


def _read(path: str) -> LockHolder | None:
    """The holder recorded in ``path``; ``None`` if the file is gone or not (yet) a complete record."""
    try:
        with open(path) as f:
            return LockHolder(**json.load(f))
    except (OSError, ValueError, TypeError):
        return None


_held: set[str] = set()


def release_work_dir(work_dir: str) -> None:
    """Remove the lock of ``work_dir`` if this process holds it."""
    path = osp.join(osp.abspath(work_dir), LOCK_NAME)
    if path in _held:
        _held.discard(path)
        holder = _read(path)
        if holder is not None and holder.is_this_process():
            os.remove(path)


def _release_all() -> None:
    for path in list(_held):
        release_work_dir(osp.dirname(path))


atexit.register(_release_all)


def _break_stale(path: str, stale: LockHolder, log) -> None:
    """Remove the lock ``path`` of the dead run ``stale``, unless another process replaced it meanwhile
    (``<path>.break`` makes the check and the removal one step among the processes that found it stale)."""
    guard = path + '.break'
    try:
        os.close(os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        try:
            if time.time() - os.path.getmtime(guard) > BREAK_TIMEOUT_S:
                os.remove(guard)  # its breaker died in these few lines
        except FileNotFoundError:
            pass
        time.sleep(0.1)
        return
    try:
        if _read(path) == stale:
            log(f'{path}: replacing the lock of {stale.describe()}, which no longer runs')
            os.remove(path)
    finally:
        os.remove(guard)


def lock_work_dir(work_dir: str, log=print, timeout_s: float = 5.0) -> str:
    """Take ``work_dir`` for this process's run (again: a no-op) and return the lock's path, or raise
    :class:`WorkDirLockedError` naming the run that holds it. ``log`` tells about a stale lock replaced;
    ``timeout_s`` bounds the wait for a lock file that another process is writing right now."""
    work_dir = osp.abspath(work_dir)
    os.makedirs(work_dir, exist_ok=True)
    path = osp.join(work_dir, LOCK_NAME)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read(path)
            if holder is not None and holder.is_this_process():
                _held.add(path)
                return path
            if holder is None:  # being written right now, or not a lock of this code
                if time.monotonic() > deadline:
                    raise WorkDirLockedError(_locked_message(work_dir, path, holder)) from None
                time.sleep(0.1)
            elif holder.alive() is False:
                _break_stale(path, holder, log)
            else:
                raise WorkDirLockedError(_locked_message(work_dir, path, holder)) from None
            continue
        with os.fdopen(fd, 'w') as f:
            json.dump(asdict(LockHolder.this_process()), f)
            f.flush()
            os.fsync(f.fileno())
        _held.add(path)
        return path


def _locked_message(work_dir: str, path: str, holder: LockHolder | None) -> str:
    if holder is None:
        return (f'work dir {work_dir} is locked by {path}, which names no run this code can read. If no other '
                f'run trains in {work_dir}, delete {path} and start again; or train in another work dir (--work-dir).')
    other_host = holder.alive() is None
    check = (f'this host ({socket.gethostname()}) cannot check whether a process of {holder.host} still runs'
             if other_host else 'it is running')
    return (f'work dir {work_dir} is in use by another training run: {holder.describe()}; {check}. Two runs in '
            'one work dir would overwrite each other\'s logs and checkpoints. Wait for that run to end (or stop it), '
            f'or train in another work dir (--work-dir DIR); if that run is no longer running, delete {path} and '
            'start again.')
