"""The last-resort numba cache folder in the temporary directory is used only when it is ours."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest

from shardtrain.kernels import cache
from shardtrain.kernels import tfrecord as kernel_module


@pytest.fixture
def temp_only(tmp_path, monkeypatch):
    """The temporary directory is ``tmp_path`` and the per-user cache cannot be written."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real = cache.ShippedCacheLocator.ensure_cache_path

    def ensure(self):
        if not self._cache_path.startswith(str(tmp_path)):
            raise PermissionError(self._cache_path)  # a read-only HOME
        real(self)

    monkeypatch.setattr(cache.ShippedCacheLocator, "ensure_cache_path", ensure)
    return tmp_path / f"shardtrain-numba-{os.getuid()}"


def _locate():
    func = kernel_module._frame_kernel.py_func
    return cache.ShippedCacheLocator.from_function(func, kernel_module.__file__)


def test_a_fresh_temporary_folder_is_made_private_and_used(temp_only):
    locator = _locate()
    assert locator is not None
    assert locator.get_cache_path().startswith(str(temp_only))
    assert stat.S_IMODE(os.lstat(temp_only).st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_temporary_folder_others_can_write_is_not_used(temp_only, mode):
    temp_only.mkdir()
    temp_only.chmod(mode)
    assert _locate() is None
    assert not any(temp_only.iterdir())  # nothing created in it either


def test_a_symbolic_link_in_place_of_the_temporary_folder_is_not_used(temp_only, tmp_path):
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    temp_only.symlink_to(tmp_path / "elsewhere")
    assert _locate() is None


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder of another user needs root")
def test_a_temporary_folder_of_another_user_is_not_used(temp_only):
    temp_only.mkdir(mode=0o700)
    os.chown(temp_only, 12345, 12345)
    assert _locate() is None
