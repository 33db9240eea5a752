"""The libraries' own output during a block of code, kept in a file instead of the terminal.

Building an MMEngine ``Runner`` logs the whole environment and config (hundreds of lines), and torch,
mmcv and the mm libraries warn through Python's ``warnings``, their loggers, ``print`` and C++ (straight
to the file descriptors). :func:`library_output_to` sends all of it to one file for the duration of a
block, so that a tool can say what it found in a few lines of its own, and tell where the rest is.
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def library_output_to(path: str | Path) -> Iterator[Path]:
    """Within the block, file descriptors 1 and 2 and ``sys.stdout`` / ``sys.stderr`` write to ``path``
    (created anew, with its folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'')
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = (os.dup(1), os.dup(2))
    log = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        with open(path, 'a', buffering=1) as text, contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
            try:
                yield path
            finally:
                for stream in (sys.__stdout__, sys.__stderr__):  # loggers that kept the original streams
                    if stream is not None:
                        stream.flush()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log):
            os.close(fd)
