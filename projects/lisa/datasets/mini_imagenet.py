"""mini-ImageNet for classification, as the LiSA paper's ablations use it (Fig. 3, Tables 6-8).

The 100 classes are those of Vinyals et al. 2016 in the class split of Ravi & Larochelle 2017
(the train / val / test csv files of twitter/meta-learning-lstm: 64 + 16 + 20 classes). Few-shot
learning keeps the three class sets apart; classification uses all 100 classes and splits each
class's images instead (the LiSA paper does not define its split; 500 / 100 is the usual one):

    images of a class = its ImageNet-1K training images sorted by file name, the first 600
    train = images[:500],  val = images[500:600]

Which images, and at what size, is this project's choice; the LiSA paper defines neither. The
first 600 by file name are taken at ImageNet's full resolution, and the configs crop 224 px from
them as on ImageNet-1K. The common mini-ImageNet differs on both counts: Ravi & Larochelle's csv
files list specific images per class (by an index into a resized copy of ImageNet, not by
ImageNet file name), and that copy is usually stored at 84 x 84 px. So the classes are the
common ones, the images may not be, and the resolution is ImageNet's, not 84 px.
"""
from __future__ import annotations

from collections.abc import Sequence

RAVI_TRAIN_CLASSES = (
    'n01532829', 'n01558993', 'n01704323', 'n01749939', 'n01770081', 'n01843383', 'n01910747', 'n02074367',
    'n02089867', 'n02091831', 'n02101006', 'n02105505', 'n02108089', 'n02108551', 'n02108915', 'n02111277',
    'n02113712', 'n02120079', 'n02165456', 'n02457408', 'n02606052', 'n02687172', 'n02747177', 'n02795169',
    'n02823428', 'n02966193', 'n03017168', 'n03047690', 'n03062245', 'n03207743', 'n03220513', 'n03337140',
    'n03347037', 'n03400231', 'n03476684', 'n03527444', 'n03676483', 'n03838899', 'n03854065', 'n03888605',
    'n03908618', 'n03924679', 'n03998194', 'n04067472', 'n04243546', 'n04251144', 'n04258138', 'n04275548',
    'n04296562', 'n04389033', 'n04435653', 'n04443257', 'n04509417', 'n04515003', 'n04596742', 'n04604644',
    'n04612504', 'n06794110', 'n07584110', 'n07697537', 'n07747607', 'n09246464', 'n13054560', 'n13133613',
)
RAVI_VAL_CLASSES = (
    'n01855672', 'n02091244', 'n02114548', 'n02138441', 'n02174001', 'n02950826', 'n02971356', 'n02981792',
    'n03075370', 'n03417042', 'n03535780', 'n03584254', 'n03770439', 'n03773504', 'n03980874', 'n09256479',
)
RAVI_TEST_CLASSES = (
    'n01930112', 'n01981276', 'n02099601', 'n02110063', 'n02110341', 'n02116738', 'n02129165', 'n02219486',
    'n02443484', 'n02871525', 'n03127925', 'n03146219', 'n03272010', 'n03544143', 'n03775546', 'n04146614',
    'n04149813', 'n04418357', 'n04522168', 'n07613480',
)
MINI_IMAGENET_CLASSES = tuple(sorted(RAVI_TRAIN_CLASSES + RAVI_VAL_CLASSES + RAVI_TEST_CLASSES))
"""The 100 WordNet ids in label order (mmpretrain sorts class folders by name)."""

IMAGES_PER_CLASS = 600
TRAIN_PER_CLASS = 500


def split_class(files: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(train, val)``: the first 500 and the next 100 of ``files`` sorted by name.

    Raises ValueError if the class has fewer than 600 images.
    """
    if len(files) < IMAGES_PER_CLASS:
        raise ValueError(f'{len(files)} images, need {IMAGES_PER_CLASS}')
    chosen = sorted(files)[:IMAGES_PER_CLASS]
    return chosen[:TRAIN_PER_CLASS], chosen[TRAIN_PER_CLASS:]
