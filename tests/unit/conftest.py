"""The fast tier: pure Python and compiled kernels on tiny data — no TensorFlow, no servers.

``make test-fast`` runs this folder alone, in seconds to a minute, for the edit-test loop.
When it runs alone, TensorFlow (and Keras) cannot be imported: a test or fixture that needs
them fails with a pointer to ``tests/integration``, where such tests belong. (In the whole
suite the block is off: integration tests load TensorFlow.) It covers this process only, so
unit tests must not start CLI commands that load TensorFlow either.
"""

from __future__ import annotations

import importlib.abc
import sys

import pytest

_BLOCKED = ("tensorflow", "keras", "tf_keras")


class _NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in _BLOCKED:
            raise ImportError(
                f"{fullname} imported by a unit test: tests that need TensorFlow belong in "
                "tests/integration (tests/unit is the fast tier)"
            )
        return None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Running the fast tier alone: block TensorFlow from here on; and no test module may
    have imported it while being collected."""
    unit = session.config.rootpath / "tests" / "unit"
    if not session.items or not all(unit in item.path.parents for item in session.items):
        return
    loaded = [m for m in _BLOCKED if m in sys.modules]
    if loaded:
        raise pytest.UsageError(
            f"{', '.join(loaded)} was imported while collecting tests/unit: unit test modules "
            "must not import TensorFlow (move the test to tests/integration)"
        )
    sys.meta_path.insert(0, _NoTensorFlow())
