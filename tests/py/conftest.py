"""Fixtures shared by the Python interop tests."""

import pytest

from test_gufo_harness import Server


@pytest.fixture
def server(tmp_path):
    """The liftbridge binary serving on free ports with a temporary data dir."""
    s = Server(str(tmp_path)).start()
    yield s
    s.stop()
