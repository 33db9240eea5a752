"""The exported models against eager PyTorch: agreement, export time, file size, latency (docs/deploy.md).

Two parts (``projects.lisa.benchmarks.deploy`` measures, this tool parses the options,
prints and writes the results):

* **trained**: the demo's trained Mask R-CNN (``--config``, ``--checkpoint``; ``make demo``
  writes them) is exported once, then mmdet's own test (``model.test_step``) and onnxruntime run
  on the generated COCO val images (``--data-root``) at the test pipeline's scale and at
  ``--scales`` times it. On every scale the two must give the same number of detections, matched
  one to one with box IoU >= 0.99, scores within 1e-3 and pasted-mask IoU >= 0.98, and box and
  mask AP within 0.1 (``projects.lisa.deploy.agreement``);
* **models**: the paper's dense models (``--models``: Semantic FPN PVT-T and UperNet Swin-T at
  ``--seg-size``, Mask R-CNN PVT-T and Swin-T at ``--det-size``, each with softmax, FLatten and
  LiSA attention) at full widths with random weights, each detector's box classifier made
  confident in the generated classes (so that the timed graph runs NMS and the mask head on
  real detection counts, ``K``): export time, file size, eager and onnxruntime latency (same
  ``--threads``, taking turns run by run, median of ``--repeats`` after ``--warmup``), and the
  agreement: segmentors' relative errors at ``--seg-size`` and 32 x 64 pixels more, detectors'
  detections on ``--images`` generated COCO images.

It exits with status 1 when any agreement breaks its bounds (the tables are written first and
name the failure).

Example (``make docs``)::

    python tools/benchmark_deploy.py --threads 1 --markdown docs/deploy.md
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from projects.lisa.benchmarks.deploy import (
    MODELS,
    document,
    key,
    machine,
    measure_model,
    measure_trained,
    trained_table,
)
from projects.lisa.benchmarks.timing import keep_freed_memory

ROOT = Path(__file__).resolve().parents[1]
DEMO = 'mask-rcnn_lisa-pvt-t_fpn_1xb4-12e_synthetic-coco-96'
DEMO_CONFIG = ROOT / f'configs/detection/demo/{DEMO}.py'
KEYS = {key(name): name for name in MODELS}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--parts', nargs='+', default=['trained', 'models'], choices=['trained', 'models'])
    trained = parser.add_argument_group("the demo's trained Mask R-CNN")
    trained.add_argument('--config', type=Path, default=DEMO_CONFIG)
    trained.add_argument('--checkpoint', type=Path, default=Path('work_dirs/demo/mask-rcnn_lisa-pvt-t/epoch_12.pth'))
    trained.add_argument('--data-root', type=Path, default=Path('data/synthetic/coco'),
                         help='generated COCO (tools/generate_data.py coco): its val images are compared')
    trained.add_argument('--scales', type=float, nargs='+', default=[1.0, 1.5],
                         help="test scales, times the config's Resize scale")
    models = parser.add_argument_group("the paper's models")
    models.add_argument('--models', nargs='+', default=list(KEYS), metavar='MODEL',
                        help=f'of {", ".join(KEYS)}')
    models.add_argument('--seg-size', type=int, nargs=2, default=[512, 512], metavar=('H', 'W'))
    models.add_argument('--det-size', type=int, nargs=2, default=[800, 1333], metavar=('H', 'W'),
                        help='the image inside the padding (to multiples of 32)')
    models.add_argument('--images', type=int, default=2, help="generated COCO val images of a detector's check")
    models.add_argument('--warmup', type=int, default=1)
    models.add_argument('--repeats', type=int, default=5)
    models.add_argument('--budget', type=float, default=30.0,
                        help="stop repeating a side's runs once they took this many seconds (after one)")
    models.add_argument('--keep', action='store_true', help='keep the ONNX files under --out')
    models.add_argument('--profile', nargs='*', default=['fpn-pvt-t', 'fpn-lisa-pvt-t'], metavar='MODEL',
                        help="of --models: onnxruntime's time by op type (per-node profile)")
    parser.add_argument('--threads', type=int, default=1, help='torch and onnxruntime intra-op threads')
    parser.add_argument('--opset', type=int, default=18)
    parser.add_argument('--seed', type=int, default=0, help='random weights and inputs')
    parser.add_argument('--out', type=Path, default=Path('work_dirs/benchmark_deploy'))
    parser.add_argument('--markdown', type=Path, help='also write the document to this file (docs/deploy.md)')
    args = parser.parse_args(argv)
    unknown = [m for m in args.models + args.profile if m not in KEYS]
    if unknown:
        parser.error(f'--models: {", ".join(map(repr, unknown))} not among {", ".join(KEYS)}')
    for name in ('threads', 'repeats', 'images'):
        if getattr(args, name) < 1:
            parser.error(f'--{name}={getattr(args, name)} must be >= 1')
    if args.warmup < 0:
        parser.error(f'--warmup={args.warmup} must be >= 0')
    if args.opset < 17:
        parser.error(f'--opset={args.opset} must be >= 17')
    for scale in args.scales:
        if not scale > 0:
            parser.error(f'--scales: {scale:g} must be > 0')
    for name in ('seg_size', 'det_size'):
        if min(getattr(args, name)) < 32:
            parser.error(f'--{name.replace("_", "-")}={getattr(args, name)}: both sides must be >= 32')
    if 'trained' in args.parts and not args.checkpoint.is_file():
        parser.error(f"--checkpoint {str(args.checkpoint)!r} is not a file (make demo writes it), "
                     "or leave the trained model out: --parts models")
    for name in ('config', 'data_root'):
        if not getattr(args, name).exists():
            parser.error(f'--{name.replace("_", "-")} {str(getattr(args, name))!r} does not exist')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command = 'python tools/benchmark_deploy.py ' + shlex.join(sys.argv[1:] if argv is None else argv)
    start = time.perf_counter()
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    import onnxruntime

    setting = (f'{machine()}; {args.threads} thread{"s" * (args.threads > 1)} for torch and for onnxruntime '
               f'(intra-op); torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, opset {args.opset}; '
               f'{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; load {os.getloadavg()[0]:.2f} at the start')
    print(setting, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    trained, models = [], []
    if 'trained' in args.parts:
        trained = measure_trained(args.config, args.checkpoint, args.data_root, args.scales, args.out, args.threads,
                                  args.opset)
        print(trained_table(trained), flush=True)
    for name in (KEYS[m] for m in args.models) if 'models' in args.parts else ():
        row = measure_model(name, ROOT / 'configs', args.out, args.threads, args.seg_size, args.det_size,
                            args.data_root, args.images, args.warmup, args.repeats, args.budget, args.opset,
                            args.seed, args.keep, key(name) in args.profile)
        models.append(row)
        print(json.dumps(row), flush=True)
    wall_s = time.perf_counter() - start
    scales = ', '.join(f"{r['scale']:g}× ({r['resize'][0]}×{r['resize'][1]})" for r in trained)
    first = trained[0] if trained else dict(export_s=0, file_mb=0, images=0)
    config = args.config.relative_to(ROOT) if args.config.is_relative_to(ROOT) else args.config
    trained_note = (
        f"`{args.checkpoint}` (`{config}`), exported once ({first['export_s']:.0f} s, {first['file_mb']:.1f} MB); "
        f"the {first['images']} generated COCO val images of `{args.data_root}` at the test scales {scales} of the "
        "config's test pipeline (`Resize`, keeping the ratio). Per scale: mmdet's own test (`model.test_step`) "
        "against onnxruntime's detections "
        'pasted by `projects.lisa.deploy.paste_detections`, matched one to one (same label, greedily by box IoU '
        "in eager's score order); the bounds: same counts, box IoU ≥ 0.99, scores within 1e-3, mask IoU ≥ 0.98, "
        "box and mask AP (mmdet's CocoMetric, in points) within 0.1. *Near-ties*: detections that eager itself "
        "changes when its backbone outputs move by 1e-5 of their RMS (the size of the eager-onnxruntime "
        "difference), held to eager's test under such a move, as a whole image or detection by detection "
        "(`agreement.reference`); more than half of the detections fails.")
    (sh, sw), (dh, dw) = args.seg_size, args.det_size
    models_note = (
        f'Full widths, **random weights** (seed {args.seed}). Latency: eager is the exported module itself '
        '(`SegmentorLogits`, `MaskRCNNDetections`) under `torch.no_grad` as it runs by default (LiSA and FLatten on '
        "the compiled CPU kernels where built), *eager, reference ops* the same module on the `'reference'` backend "
        '(the plain tensor operations that the export traces, so the graph computes them: onnxruntime over '
        'these is its own cost, the rest of its gap to eager is the kernels the graph lacks), onnxruntime the '
        'exported file on the same input; the three take turns run by run; '
        f'median of up to {args.repeats} runs after {args.warmup} warm-up, a side '
        f'stopping once its runs took {args.budget:g} s; CPU is the process CPU time, wall the elapsed time. '
        f"Segmentors: a random normalised {sh}×{sw} batch of 1 to the decode head's logits; relative error "
        '`max |onnx - eager| / max |eager|` at two sizes (above 1e-4 fails, as in tools/export_onnx.py). '
        f'Detectors: a random normalised {dh}×{dw} image padded to multiples of 32, with `img_shape`; random '
        'weights detect nothing above the score threshold, so the box classifier is made confident in the '
        "generated classes (`agreement.make_confident`: classifier weights ×10, those classes' biases +3, box, "
        'RPN and mask regressions ×30), and the timed graph runs NMS and the mask head on K detections; the '
        f"agreement is checked as the trained model's, on {args.images} generated COCO val images at the "
        "config's test scale (1333×800), without AP (random weights).")
    profile_note = ("onnxruntime's per-node profile (`SessionOptions.enable_profiling`) of the timed input, "
                    f'{args.threads} thread{"s" * (args.threads > 1)}, mean of 3 runs after one warm-up: kernel time '
                    'summed by op type (ms per run, share of all nodes) and the nodes of that type in the file; '
                    'fused op types (`FusedMatMul`, `Gemm`, NCHWc `Reorder*`) are made by onnxruntime at load time. '
                    '*Reference ops traced*: the same model exported with its operators\' plain references as they '
                    'are (`export(..., shaped=False)`), the graph before `projects/lisa/deploy/shaped.py`; the file '
                    'the tool ships is the other column.')
    text = document(command, setting, trained, trained_note, models, models_note, wall_s, profile_note)
    failures = [f'trained {r["scale"]:g}×: {f}' for r in trained for f in r['failures']]
    failures += [f'{r["model"]}: {f}' for r in models for f in r.get('agreement', {}).get('failures', [])]
    failures += [f'{r["model"]}: relative error {e:.1e} at {s[0]}×{s[1]} above 1e-4' for r in models
                 for s, e in r.get('errors', []) if not e <= 1e-4]
    text += ''.join(f'\n**Failed**: {f}\n' for f in failures)
    print(text)
    (args.out / 'deploy.json').write_text(json.dumps(dict(setting=setting, trained=trained, models=models), indent=1))
    (args.out / 'deploy.md').write_text(text)
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
    print(f'saved {args.out}/deploy.{{json,md}}' + (f' and {args.markdown}' if args.markdown else ''))
    for f in failures:
        print(f'FAILED: {f}', file=sys.stderr)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
