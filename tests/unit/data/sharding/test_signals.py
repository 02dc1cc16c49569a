"""SIGTERM during sharding: an exception in the main thread that no `except Exception`
takes, and the previous handler back after."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from shardtrain.data.sharding.signals import stop_on_sigterm
from shardtrain.errors import ShardingStopped


def test_sigterm_inside_raises_past_except_exception_then_the_old_handler_is_back():
    before = signal.getsignal(signal.SIGTERM)
    swallowed = False
    with (
        pytest.raises(ShardingStopped, match=r"stopped by SIGTERM.*run the same command"),
        stop_on_sigterm(),
    ):
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs between bytecodes
            for _ in range(1000):
                pass
        except Exception:  # what a storage retry or a warm-up catches
            swallowed = True
    assert not swallowed
    assert ShardingStopped.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) == before


def test_off_the_main_thread_it_changes_nothing():
    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def run() -> None:
        with stop_on_sigterm():
            seen.append(signal.getsignal(signal.SIGTERM))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [before]
