"""The Mask R-CNN agreement's near-tie rule (:func:`agreement.reference`) on hand-made detections."""
import pytest
import torch
from mmdet.structures import DetDataSample
from mmengine.structures import InstanceData

from projects.lisa.deploy import agreement

SIZE = 40


def square(x: int, y: int, side: int = 8) -> torch.Tensor:
    mask = torch.zeros(SIZE, SIZE, dtype=torch.bool)
    mask[y:y + side, x:x + side] = True
    return mask


def detections(masks: list[torch.Tensor], perturbed: bool = False) -> DetDataSample:
    """Five detections, one per label, at fixed boxes and scores, with ``masks``."""
    boxes = torch.tensor([[4.0 * i, 4.0 * i, 4.0 * i + 8, 4.0 * i + 8] for i in range(len(masks))])
    found = InstanceData(bboxes=boxes, scores=torch.linspace(0.9, 0.5, len(masks)),
                         labels=torch.arange(len(masks)), masks=torch.stack(masks))
    sample = DetDataSample(metainfo=dict(img_id=0), pred_instances=found)
    if perturbed:  # as agreement.perturbed_tests marks its tests
        sample.set_metainfo(dict(near_ties=len(masks)))
    return sample


def as_graph(sample: DetDataSample) -> dict:
    found = sample.pred_instances
    return dict(bboxes=found.bboxes, scores=found.scores, labels=found.labels, masks=found.masks)


@pytest.fixture
def flips(monkeypatch) -> tuple[DetDataSample, dict]:
    """Eager's test, and a graph whose detections 1 and 3 have other masks (as when a box sits on an
    FPN level boundary and rounding pools it from the next level). Eager's perturbed tests flip one
    of the two each, never both (the flips are independent), so no perturbed test is the graph's."""
    eager_masks = [square(4 * i, 4 * i) for i in range(5)]
    other = {1: square(30, 0), 3: square(0, 30)}
    graph = as_graph(detections([other.get(i, m) for i, m in enumerate(eager_masks)]))
    draws = [detections([other[i] if i == flipped else m for i, m in enumerate(eager_masks)], perturbed=True)
             for flipped in (1, 3)]
    monkeypatch.setattr(agreement, 'perturbed_tests', lambda model, batch: iter(draws))
    return detections(eager_masks), graph


def test_each_detection_decided_by_a_near_tie_is_held_to_one_of_eagers_outcomes(flips):
    eager, graph = flips
    assert agreement.failures(agreement.summary([agreement.agreement(eager, graph)]))  # mask IoU 0
    held = agreement.agreement(agreement.reference(None, None, eager, graph), graph)
    assert held['min_mask_iou'] == 1.0 and held['count'] == (5, 5)
    total = agreement.summary([held])
    assert not agreement.failures(total) and total['near_ties'] == 2, total  # detections 1 and 3


def test_a_detection_that_no_perturbed_test_gives_still_breaks_the_bounds(flips):
    eager, graph = flips
    graph['masks'][3] = square(16, 0)  # neither eager's detection 3 nor a draw's
    total = agreement.summary([agreement.agreement(agreement.reference(None, None, eager, graph), graph)])
    assert agreement.failures(total) == ['mask IoU 0.0000 < 0.98'] and total['near_ties'] == 1, total


def test_a_graph_that_is_one_perturbed_test_counts_all_its_detections(flips, monkeypatch):
    eager, graph = flips
    draw = detections(list(graph['masks']), perturbed=True)
    monkeypatch.setattr(agreement, 'perturbed_tests', lambda model, batch: iter([draw]))
    total = agreement.summary([agreement.agreement(agreement.reference(None, None, eager, graph), graph)])
    assert total['near_ties'] == 5 and agreement.failures(total) == [
        "5 of 5 detections held to eager's perturbed tests (near-ties): more than half"]
