"""mini-ImageNet: the class list of Ravi & Larochelle's split and tools/prepare_mini_imagenet.py.

References: the split's published sizes (64 + 16 + 20 classes, 600 images each), a few classes
whose names are known by heart (house finch, goose, dalmatian), the documented 500 / 100 rule
applied here by hand to a generated ImageNet-format tree, and the file system (symlink targets).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from projects.lisa.datasets.mini_imagenet import (
    MINI_IMAGENET_CLASSES,
    RAVI_TEST_CLASSES,
    RAVI_TRAIN_CLASSES,
    RAVI_VAL_CLASSES,
    split_class,
)

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / 'tools' / 'prepare_mini_imagenet.py'


def test_class_list_is_100_distinct_wordnet_ids_in_the_64_16_20_split():
    splits = (RAVI_TRAIN_CLASSES, RAVI_VAL_CLASSES, RAVI_TEST_CLASSES)
    assert [len(s) for s in splits] == [64, 16, 20]
    assert len(set().union(*splits)) == 100  # disjoint
    assert all(re.fullmatch(r'n\d{8}', w) for w in MINI_IMAGENET_CLASSES)
    assert MINI_IMAGENET_CLASSES == tuple(sorted(set().union(*splits)))
    # house finch (train), goose (val), dalmatian (test)
    assert 'n01532829' in RAVI_TRAIN_CLASSES and 'n01855672' in RAVI_VAL_CLASSES and 'n02110341' in RAVI_TEST_CLASSES


def test_split_class_takes_the_first_600_by_name_500_for_training():
    files = [f'n0_{i:04d}.JPEG' for i in range(700)][::-1]
    train, val = split_class(files)
    assert train == [f'n0_{i:04d}.JPEG' for i in range(500)] and val == [f'n0_{i:04d}.JPEG' for i in range(500, 600)]
    with pytest.raises(ValueError, match='599 images, need 600'):
        split_class(files[:599])


def fake_imagenet(root: Path, per_class: dict[str, int]) -> Path:
    """``root/train/<wnid>/<wnid>_<k>.JPEG`` (empty files), ``per_class[wnid]`` of them."""
    for wnid, n in per_class.items():
        folder = root / 'train' / wnid
        folder.mkdir(parents=True)
        for k in range(n):
            (folder / f'{wnid}_{k + 1}.JPEG').touch()
    return root


def run_tool(capsys, *args: str) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``tools/prepare_mini_imagenet.py ARGS``."""
    from tools import prepare_mini_imagenet as tool
    try:
        tool.main(list(args))
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_tool_links_500_train_and_100_val_images_of_each_class(tmp_path, capsys):
    # 601 images per class (one too many) plus a class that is not in mini-ImageNet
    imagenet = fake_imagenet(tmp_path / 'imagenet', {**{w: 601 for w in MINI_IMAGENET_CLASSES}, 'n99999999': 600})
    out = tmp_path / 'mini'
    code, out_text, err = run_tool(capsys, str(imagenet), '--out', str(out))
    assert code == 0, err
    assert 'train 50000 and val 10000 images' in out_text
    assert sorted(p.name for p in (out / 'train').iterdir()) == list(MINI_IMAGENET_CLASSES)
    assert sorted(p.name for p in (out / 'val').iterdir()) == list(MINI_IMAGENET_CLASSES)
    for wnid in MINI_IMAGENET_CLASSES:
        # by name: _1, _10, _100, _101, ... : the first 600 in string order, the first 500 of those for training
        by_name = sorted(f'{wnid}_{k + 1}.JPEG' for k in range(601))[:600]
        train, val = sorted((out / 'train' / wnid).iterdir()), sorted((out / 'val' / wnid).iterdir())
        assert [p.name for p in train] == by_name[:500] and [p.name for p in val] == by_name[500:]
        for link in (train[0], val[-1]):
            assert link.is_symlink() and link.readlink() == (imagenet / 'train' / wnid / link.name).resolve()


def test_tool_lists_missing_and_short_classes_and_writes_nothing(tmp_path, capsys):
    absent, short = MINI_IMAGENET_CLASSES[:2], MINI_IMAGENET_CLASSES[2]
    per_class = {w: 0 for w in MINI_IMAGENET_CLASSES if w not in absent}
    per_class[short] = 599  # all other present classes are empty
    imagenet = fake_imagenet(tmp_path / 'imagenet', per_class)
    code, _, err = run_tool(capsys, str(imagenet), '--out', str(tmp_path / 'mini'))
    assert code == 1
    assert f'2 of the 100 mini-ImageNet classes are missing in {imagenet / "train"}: {" ".join(absent)}' in err
    empty = ' '.join(f'{w} (0)' for w in MINI_IMAGENET_CLASSES[3:])
    assert f'98 classes have fewer than 600 images (count in brackets): {short} (599) {empty}' in err
    assert not (tmp_path / 'mini').exists()


def test_tool_refuses_a_folder_that_is_not_an_imagenet_root_or_a_non_empty_output(tmp_path, capsys):
    code, _, err = run_tool(capsys, str(tmp_path / 'nowhere'), '--out', str(tmp_path / 'mini'))
    assert code == 1 and 'must be the ImageNet-1K root that holds train/<wnid>/' in err
    (tmp_path / 'mini').mkdir()
    (tmp_path / 'mini' / 'old').touch()
    code, _, err = run_tool(capsys, str(tmp_path), '--out', str(tmp_path / 'mini'))
    assert code == 2 and 'exists and is not empty' in err


def test_tool_help_states_which_images_and_resolution_it_chose(capsys):
    code, out, _ = run_tool(capsys, '--help')
    text = ' '.join(out.split())  # argparse re-wraps the text
    assert code == 0
    assert 'the first 600 of each class by file name, split 500 train / 100 val' in text
    assert "linked at ImageNet's full resolution (the configs crop 224 px" in text
    assert 'usually stored at 84 x 84 px, and the LiSA paper defines neither' in text
