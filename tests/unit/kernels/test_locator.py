"""Every kernel module makes numba look in the shipped cache before it defines a kernel,
whichever is imported first (:mod:`shardtrain.kernels`, :mod:`shardtrain.kernels.cache`)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import shardtrain.kernels

MODULES = sorted(m.name for m in pkgutil.iter_modules(shardtrain.kernels.__path__))

#: Imports a kernel module in a fresh process, recording for each kernel it defines whether
#: the shipped cache's locator was installed by then; prints (kernels, defined too early).
_CHECK = """
import importlib, sys
from numba.core.dispatcher import Dispatcher
from shardtrain.kernels.cache import ShippedCacheLocator, _CacheImpl
defined, early = [], []
enable = Dispatcher.enable_caching
def recording(self):
    defined.append(self.py_func.__qualname__)
    if ShippedCacheLocator not in _CacheImpl._locator_classes:
        early.append(self.py_func.__qualname__)
    return enable(self)
Dispatcher.enable_caching = recording
importlib.import_module(sys.argv[1])
print(len(defined), len(early))
"""


@pytest.mark.parametrize("name", [m for m in MODULES if m not in ("arrow", "cache")])
def test_the_shipped_cache_is_looked_in_whichever_kernel_module_comes_first(name):
    out = subprocess.run(
        [sys.executable, "-c", _CHECK, f"shardtrain.kernels.{name}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[1] == "0", f"{name}: kernels defined before the shipped cache's locator"
    if name in ("histogram", "value_counts", "xxh64", "block_encode"):
        assert int(out[0]) > 0  # the check sees the kernels


def test_reading_arrow_buffers_does_not_import_numba():
    code = "import sys, shardtrain.kernels.arrow; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
