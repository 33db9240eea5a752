"""Train any LiSA config (segmentation, detection, classification) with MMEngine.

Same interface as the train.py of mmseg / mmdet / mmpretrain (``mim train``
runs those; this one adds CPU multi-process support, a preflight and a safe
runtime):

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT] [--override-optim] [--accept-changes]]
                          [--allow-new GLOB ...] [--allow-unused GLOB ...] [--allow-mismatch GLOB ...]
                          [--amp] [--check-data] [--dry-run [--show-config]]
    torchrun --nproc_per_node N tools/train.py CONFIG --launcher pytorch

``--dry-run`` builds the model, loads its weights, reads one batch of each data
loader, trains one step, checks that everything is finite, prints its verdict and
the recipe (the whole config with ``--show-config``) and exits (non-zero on any
problem). Every run gets the hooks of ``configs/_base_/safe_runtime.py``
(crash-safe checkpoints, exact resume, stop on non-finite values) if its config
does not list them already.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import sys

from mmengine.config import Config, DictAction

from projects.lisa.data_checks.data_check import Runner, check_data_roots
from projects.lisa.data_checks.data_problems import report
from projects.lisa.data_checks.split_check import check_config_data
from projects.lisa.engine.amp import enable_amp
from projects.lisa.engine.checkpoint import remove_partial_saves
from projects.lisa.engine.dist import setup_cpu_distributed
from projects.lisa.engine.pretrained import missing_pretrained
from projects.lisa.engine.resume import checkpoint_problem, find_resumable_checkpoint
from projects.lisa.engine.runtime_config import add_allow_args, add_safe_runtime
from projects.lisa.engine.runtime_hook import ResumeConfigError
from projects.lisa.engine.work_dir_lock import WorkDirLockedError, lock_work_dir
from projects.lisa.models.backbones.loading import IncompleteCheckpointError
from projects.lisa.registry import legacy_imports, register_all_modules


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='config file')
    parser.add_argument('--work-dir', help='where logs and checkpoints go (default: work_dirs/<config>)')
    parser.add_argument('--resume', nargs='?', const='auto', default=None,
                        help='resume from CKPT, or from the newest intact checkpoint in the work dir if no CKPT')
    parser.add_argument('--override-optim', action='store_true',
                        help='on --resume, apply the config\'s changed optimizer settings and schedule to the '
                             'restored state (a changed config otherwise stops the resume)')
    parser.add_argument('--accept-changes', action='store_true',
                        help='on --resume, continue with the changed settings the resume lists (model / data as '
                             'configured, optimizer and schedule as restored unless --override-optim)')
    add_allow_args(parser)
    parser.add_argument('--amp', action='store_true',
                        help='automatic mixed precision (fp16 on CUDA, bf16 autocast on a CPU)')
    parser.add_argument('--check-data', action='store_true',
                        help='first check every training and validation sample (tools/check_data.py); stop on errors')
    parser.add_argument('--dry-run', action='store_true',
                        help='preflight: build, load weights, read one batch per loader, train one step, print the '
                             'recipe, exit non-zero on any problem')
    parser.add_argument('--show-config', action='store_true', help='with --dry-run, also print the whole config')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override config entries, key=value')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    if args.show_config and not args.dry_run:
        parser.error('--show-config goes with --dry-run')
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def choose_resume(cfg: Config, resume: str | None) -> None:
    """Set ``cfg.resume`` / ``cfg.load_from`` for ``--resume [CKPT]``; without CKPT, the newest intact checkpoint."""
    if resume is None:
        return
    cfg.resume = True
    if resume != 'auto':
        if problem := checkpoint_problem(resume):
            sys.exit(f'--resume: cannot resume from {resume}: {problem}')
        cfg.load_from = resume
        return
    path, skipped = find_resumable_checkpoint(cfg.work_dir)
    talk = os.environ.get('RANK', '0') == '0'
    for bad, why in skipped:
        if talk:
            print(f'--resume: skipping {bad}: {why}', file=sys.stderr)
    found = sum(osp.dirname(bad) == cfg.work_dir for bad, _ in skipped)  # the checkpoints in the work dir
    if path is None and found:
        sys.exit(f'--resume: no checkpoint in {cfg.work_dir} can be resumed from ({found} found, see above); '
                 'pass one with --resume CKPT, or move them away to start afresh')
    if path is None and skipped:
        sys.exit(f'--resume: no checkpoint in {cfg.work_dir} to resume from, and its last_checkpoint names one '
                 'elsewhere (see above); pass that one with --resume CKPT, or delete last_checkpoint to start afresh')
    if talk:
        print(f'--resume: resuming from {path}' if path else
              f'--resume: no checkpoint in {cfg.work_dir}; starting from the beginning', file=sys.stderr)
    if path is None:
        cfg.resume = False  # a fresh run: from the config's load_from, if any
    else:
        cfg.load_from = path


def main() -> None:
    args = parse_args()
    register_all_modules()  # as mmdet's train.py does: also for configs that do not import projects.lisa.registry
    cfg = Config.fromfile(args.config)
    if (change := legacy_imports(cfg)) and os.environ.get('RANK', '0') == '0':
        print(f'warning: {change}', file=sys.stderr)
    cfg.launcher = args.launcher
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    cfg.work_dir = args.work_dir or cfg.get('work_dir') or osp.join(
        'work_dirs', osp.splitext(osp.basename(args.config))[0])
    add_safe_runtime(cfg, allow_new=args.allow_new, allow_unused=args.allow_unused,
                     allow_mismatch=args.allow_mismatch, override_optim=args.override_optim,
                     accept_changes=args.accept_changes)
    if args.amp:
        try:
            print(enable_amp(cfg), file=sys.stderr)
        except ValueError as error:
            sys.exit(str(error))
    choose_resume(cfg, args.resume)
    try:
        check_data_roots(cfg, ('train_dataloader', 'val_dataloader'))
    except FileNotFoundError as error:
        sys.exit(str(error))
    if args.check_data:
        problems = [p for found in check_config_data(cfg, ('train_dataloader', 'val_dataloader')).values()
                    for p in found]
        if any(p.error for p in problems):
            sys.exit(f'--check-data: invalid data, nothing trained:\n{report(problems)}')
        print(f'--check-data: {report(problems) if problems else "all samples valid"}')
    if not cfg.get('resume') and (missing := missing_pretrained(cfg)):
        sys.exit(missing)
    if args.dry_run:
        from projects.lisa.engine.preflight import preflight
        sys.exit(1 if preflight(cfg, show_config=args.show_config) else 0)
    if os.environ.get('RANK', '0') == '0':  # one run per work dir, before anything is written there
        try:
            lock_work_dir(cfg.work_dir, lambda line: print(line, file=sys.stderr))
        except WorkDirLockedError as error:
            sys.exit(str(error))
        remove_partial_saves(cfg.work_dir, lambda line: print(line, file=sys.stderr))  # room for the new log
    setup_cpu_distributed(cfg)
    try:
        Runner.from_cfg(cfg).train()
    except (ResumeConfigError, IncompleteCheckpointError) as error:  # a refusal with its reason, not a crash
        if os.environ.get('RANK', '0') == '0':
            print(error, file=sys.stderr)
        sys.exit(1)


if __name__ == '__main__':
    main()
