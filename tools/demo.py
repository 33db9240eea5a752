"""The README's main command: the paper's pipeline in miniature, on generated data, on the CPU.

    python tools/demo.py [--data data/synthetic] [--work-dir work_dirs/demo]

The steps, every one a printed command:

1. [data] ``tools/generate_data.py`` writes a small ImageNet, ADE20K and COCO in their real
   formats (procedural shapes);
2. [cls] ``mim train / test mmpretrain`` pretrain the LiSA-PVT-T classifier (Table 1,
   ``configs/classification/demo/``) and its checkpoint is copied to the ``pretrained`` file
   of the dense demo configs: the paper's ImageNet -> dense prediction hand-off
   (``init_cfg=dict(type='Pretrained', prefix='backbone.')``);
3. [seg] and [det], side by side, one CPU core each: Semantic FPN (Table 3) and Mask R-CNN
   (Table 4) with that LiSA-PVT-T backbone, trained and tested with ``mim train / test``
   (``configs/segmentation/demo/``, ``configs/detection/demo/``);
4. ``tools/collect_results.py`` prints the three runs in the rows of Tables 1, 3 and 4 beside
   the paper's values (generated data: shown, not differenced);
5. each model's test metric beside the chance baseline of its validation set
   (``projects/lisa/analysis/baselines.py``: the most frequent training class for the
   classifier and Semantic FPN, random boxes for Mask R-CNN); the demo exits non-zero, naming
   the stages, if one scores below ``max(2 x baseline, baseline + 10 points)``.

The demo configs inherit the paper's configs and change only sizes, schedule, data root,
SyncBN -> BN, for the classifier its learning rate and augmentation, and for the detector
its anchors (see their comments).
Progress lines are shown; the full logs, checkpoints and metrics are kept under ``--work-dir``.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from projects.lisa.analysis import baselines
from projects.lisa.analysis.scalars import scalars_files, values

ROOT = Path(__file__).resolve().parents[1]
CLS_CONFIG = 'configs/classification/demo/pvt-tiny_lisa_1xb8-2e_synthetic-imagenet-64px.py'
SEG_CONFIG = 'configs/segmentation/demo/fpn_lisa-pvt-t_1xb4-150iter_synthetic-ade20k-96x96.py'
DET_CONFIG = 'configs/detection/demo/mask-rcnn_lisa-pvt-t_fpn_1xb4-12e_synthetic-coco-96.py'
# tools/generate_data.py arguments; the demo configs expect these data roots and image sizes.
CLS_DATA = dict(dataset='imagenet', num_train=200, num_val=50, size=64, seed=0)
SEG_DATA = dict(dataset='ade20k', num_train=96, num_val=24, size=96, seed=0)
DET_DATA = dict(dataset='coco', num_train=64, num_val=16, size=96, seed=0)
PROGRESS = re.compile(r' - INFO - (Iter|Epoch)\((train|val|test)\)')  # MMEngine's progress and metric lines
PRETRAINED = re.compile(r"^pretrained = '([^']+)'", re.MULTILINE)  # the dense demo configs' checkpoint
# stage -> (its work dir under --work-dir, the metric it is judged by, its dataset's root under --data)
STAGES = {
    'classifier': ('pvt-tiny_lisa', 'top-1', 'imagenet'),
    'Semantic FPN': ('fpn_lisa-pvt-t', 'mIoU', 'ade/ADEChallengeData2016'),
    'Mask R-CNN': ('mask-rcnn_lisa-pvt-t', 'box AP', 'coco'),
}


def mim() -> str:
    """The ``mim`` next to this interpreter (the project's venv), else the one on PATH."""
    local = Path(sys.executable).with_name('mim')
    found = str(local) if local.exists() else shutil.which('mim')
    if not found:
        sys.exit('mim not found: install openmim (`make install` does) or activate .venv')
    return found


class StepFailed(RuntimeError):
    """A command of the demo exited with an error; the message holds its log's tail."""


def shown(cmd: list[str]) -> str:
    """``cmd`` as a user would type it."""
    return ' '.join(cmd).replace(sys.executable, 'python').replace(mim(), 'mim')


def run(tag: str, cmd: list[str], log: Path, threads: int = 1, echo: bool = False) -> None:
    """Run ``cmd`` in the repository root, show its progress lines (all lines: ``echo``), keep its log."""
    print(f'[{tag}] $ {shown(cmd)}', flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, [str(ROOT), os.environ.get('PYTHONPATH')]))}
    env.setdefault('OMP_NUM_THREADS', str(threads))
    start = time.monotonic()
    with open(log, 'w') as out, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            out.write(line)
            if echo:
                print(line, end='', flush=True)
            elif PROGRESS.search(line):
                print(f'[{tag}]     {line.split(" - INFO - ")[-1].rstrip()[:160]}', flush=True)
        _, status, usage = os.wait4(proc.pid, 0)  # the exit status and the CPU time of the command's processes
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        tail = ''.join(log.read_text().splitlines(keepends=True)[-30:])
        raise StepFailed(f'{tail}\n[{tag}] failed (exit {proc.returncode}): {shown(cmd)}\nfull log: {log}')
    if not echo:
        print(f'[{tag}]     done in {time.monotonic() - start:.0f} s, CPU time {usage.ru_utime + usage.ru_stime:.0f} s '
              f'(log: {rel(log)})', flush=True)


def rel(path: str | Path) -> str:
    """``path`` as the commands see it: relative to the repository root when inside it."""
    path = Path(ROOT, path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def generate(data: dict, data_dir: str, log: Path) -> None:
    args = [f'--{k.replace("_", "-")}={v}' for k, v in data.items() if k != 'dataset']
    run('data', [sys.executable, 'tools/generate_data.py', data['dataset'], f'--out={rel(data_dir)}', *args], log)


def train_and_test(tag: str, library: str, config: str, work_dir: Path, threads: int = 1) -> dict:
    """``mim train`` the config, ``mim test`` its last checkpoint; the checkpoint, loss and time."""
    start = time.monotonic()
    run(tag, [mim(), 'train', library, config, '--work-dir', rel(work_dir)], work_dir / 'train.log', threads)
    checkpoint = (work_dir / 'last_checkpoint').read_text().strip()  # what MMEngine's CheckpointHook saved last
    run(tag, [mim(), 'test', library, config, '--checkpoint', rel(checkpoint), '--work-dir', rel(work_dir / 'test')],
        work_dir / 'test.log', threads)
    logs = scalars_files(work_dir)  # the training's; the test's lie under work_dir/test/
    if not logs:
        raise StepFailed(f'no training log found under {work_dir}')
    losses = values(logs[-1], 'loss')
    return dict(checkpoint=checkpoint, loss=f'{losses[0]:.2f} -> {losses[-1]:.2f}', seconds=time.monotonic() - start)


def dense_pretrained() -> str:
    """The ``pretrained`` checkpoint both dense demo configs initialise their backbone from."""
    (path, ) = {PRETRAINED.search((ROOT / config).read_text()).group(1) for config in (SEG_CONFIG, DET_CONFIG)}
    return path


def judged(work: Path, data: Path) -> list[baselines.Judged]:
    """Each stage's test metric (its ``mim test`` under ``<work dir>/test``) beside its chance baseline."""
    return [baselines.judge_test(stage, work / work_dir / 'test', metric, data / root)
            for stage, (work_dir, metric, root) in STAGES.items()]


def judge(results: list[baselines.Judged]) -> None:
    """Print every stage beside its baseline; exit non-zero naming the stages that do not clear it."""
    for result in results:
        print(result, flush=True)
    shortfall = baselines.shortfall(results)
    if shortfall:
        sys.exit(f'demo failed: {shortfall}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--data', default='data/synthetic',
                        help='where the datasets are written (the demo configs read data/synthetic)')
    parser.add_argument('--work-dir', default='work_dirs/demo', help='logs, checkpoints and metrics')
    args = parser.parse_args()
    work = ROOT / args.work_dir
    start = time.monotonic()
    print('LiSA-PVT-T pretrained as a classifier, then Semantic FPN and Mask R-CNN initialised from it: '
          "the paper's Table 1 -> Tables 3-4 pipeline, in miniature on generated data, on the CPU.\n", flush=True)
    try:
        print('1. Data: small ImageNet, ADE20K and COCO in their real formats', flush=True)
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda data: generate(data, args.data, work / f'generate_{data["dataset"]}.log'),
                          (CLS_DATA, SEG_DATA, DET_DATA)))

        print('\n2. ImageNet pretraining of the LiSA-PVT-T classifier (Table 1)', flush=True)
        cls = train_and_test('cls', 'mmpretrain', CLS_CONFIG, work / 'pvt-tiny_lisa', threads=2)
        pretrained = dense_pretrained()
        print(f'[cls] $ cp {rel(cls["checkpoint"])} {pretrained}   # the dense configs\' backbone init_cfg',
              flush=True)
        (ROOT / pretrained).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / cls['checkpoint'], ROOT / pretrained)

        print('\n3. Semantic FPN (Table 3) and Mask R-CNN (Table 4) from that backbone, side by side', flush=True)
        with ThreadPoolExecutor(2) as pool:
            seg_job = pool.submit(train_and_test, 'seg', 'mmseg', SEG_CONFIG, work / 'fpn_lisa-pvt-t')
            det_job = pool.submit(train_and_test, 'det', 'mmdet', DET_CONFIG, work / 'mask-rcnn_lisa-pvt-t')
            seg, det = seg_job.result(), det_job.result()

        print('\n4. The results beside the paper', flush=True)
        run('results', [sys.executable, 'tools/collect_results.py', rel(work), '--found-only',
                        '--markdown', rel(work / 'results.md'), '--json', rel(work / 'results.json')],
            work / 'collect_results.log', echo=True)
        judgements = judged(work, ROOT / args.data)
    except (StepFailed, baselines.MissingResult) as error:
        sys.exit(str(error))
    print(f'Training loss (first -> last logged): classifier {cls["loss"]}, Semantic FPN {seg["loss"]}, '
          f'Mask R-CNN {det["loss"]}. Mask R-CNN trains {DET_DATA["num_train"] * 12 // 4} iterations here '
          '(12 epochs of 4 images; the paper ~88k of 16).')
    print(f'\nTime: classifier {cls["seconds"]:.0f} s, then segmentation {seg["seconds"]:.0f} s and detection '
          f'{det["seconds"]:.0f} s in parallel; total {(time.monotonic() - start) / 60:.1f} min. '
          f'Logs, checkpoints, metrics: {args.work_dir}/ (results.md, results.json).')
    print('\n5. Each model beside the chance baseline of its validation set (projects/lisa/analysis/baselines.py)',
          flush=True)
    judge(judgements)

if __name__ == '__main__':
    main()
