"""``library_output_to``: whatever a library prints during a block lands in the file, not on the terminal.

Run in a fresh interpreter, whose file descriptors 1 and 2 and ``sys.stdout`` are the real ones (under
pytest's capture a logger created before the block would write to pytest's buffer, not to a descriptor).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = '''
import logging, os, sys, warnings
from projects.lisa.engine.library_output import library_output_to

logger = logging.getLogger('library')
logger.addHandler(logging.StreamHandler(sys.stdout))  # holds the stream it was given, as MMEngine's do
print('before', flush=True)
with library_output_to(sys.argv[1]):
    print('a print')
    print('to stderr', file=sys.stderr)
    warnings.warn('a library warning', UserWarning, stacklevel=1)
    logger.warning('a logger line')
    os.write(1, b'written by C\\n')
    os.write(2, b'C to stderr\\n')
print('after')
'''


def test_prints_warnings_loggers_and_raw_writes_go_to_the_file_and_the_terminal_comes_back(tmp_path):
    log = tmp_path / 'out.log'
    log.write_text('an older run\n')
    proc = subprocess.run([sys.executable, '-c', SCRIPT, str(log)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, 'PYTHONPATH': str(ROOT)})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, 'before\nafter\n', '')
    text = log.read_text()
    for line in ('a print', 'to stderr', 'UserWarning: a library warning', 'a logger line', 'written by C',
                 'C to stderr'):
        assert line in text
    assert 'an older run' not in text  # the log of this block alone
