"""Fixtures shared by the Python interop tests."""

import pytest

from test_gufo_harness import Server


@pytest.fixture(params=["ours", "go"])
def which(request):
    """Which server a test body runs against: our binary, or Go
    nats-server 2.15.1 (see `natsproc.ours_or_go`)."""
    return request.param


@pytest.fixture
def server(tmp_path):
    """The liftbridge binary serving on free ports with a temporary data dir."""
    s = Server(str(tmp_path)).start()
    yield s
    s.stop()
