"""Pytest root: make the repository's ``projects`` and ``tests`` win on sys.path.

mmsegmentation's wheel installs a top-level ``tests`` package into
site-packages; the project's test modules are collected from ``tests/``
(rootdir-relative, no package) so it can never shadow them.
"""
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent)
if sys.path[0] != ROOT:
    sys.path.insert(0, ROOT)
