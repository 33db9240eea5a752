"""Fixtures shared by the test modules (requested by name, none autouse)."""
import pytest
import torch


@pytest.fixture
def seed_and_one_thread():
    """Seed 0 and one intra-op thread: for tiny tensors a second thread costs more in
    synchronisation than it saves."""
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def mmpretrain_scope():
    """mmpretrain as MMEngine's default scope for the test: the scope is global, and a test that
    builds an mmpretrain model must not resolve it in whatever scope an earlier test left current."""
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        yield
