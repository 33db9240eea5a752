"""Write small synthetic datasets in the real formats of ADE20K, COCO and ImageNet.

    python tools/generate_data.py {ade20k,coco,imagenet,all} [--out data] [--num-train N]
        [--num-val M] [--size S] [--seed K]

The datasets land where the OpenMMLab base configs look: ``<out>/ade/ADEChallengeData2016``,
``<out>/coco`` and ``<out>/imagenet``. Rerunning with the same arguments skips a dataset; other
arguments replace it (see ``projects/lisa/synthetic/synthetic.py``). Invalid values are reported
by the library's argument names (``num_train`` for ``--num-train``).
"""
from __future__ import annotations

import argparse

from projects.lisa.synthetic import DATASETS, check_params, generate


def parse_args(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('dataset', choices=[*DATASETS, 'all'], help='dataset to write')
    parser.add_argument('--out', default='data', help='data folder (default: data)')
    parser.add_argument('--num-train', type=int, default=64, help='training images (default: 64)')
    parser.add_argument('--num-val', type=int, default=16, help='validation images (default: 16)')
    parser.add_argument('--size', type=int, default=96, help='image height in pixels (default: 96)')
    parser.add_argument('--seed', type=int, default=0, help='random seed (default: 0)')
    return parser, parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    parser, args = parse_args(argv)
    datasets = DATASETS if args.dataset == 'all' else (args.dataset, )
    params = dict(num_train=args.num_train, num_val=args.num_val, size=args.size, seed=args.seed)
    try:
        for dataset in datasets:  # every check before any writing
            check_params(dataset, **params)
        for dataset in datasets:
            print(generate(dataset, args.out, **params), flush=True)
    except (ValueError, FileExistsError) as error:
        parser.error(f'{dataset}: {error}')


if __name__ == '__main__':
    main()
