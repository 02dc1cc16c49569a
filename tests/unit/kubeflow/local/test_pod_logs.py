"""The node agent's log endpoint: reading a container's log (tail, follow)."""

from __future__ import annotations

from shardtrain.kubeflow.local import pod_logs


def test_log_reading_tails_and_follows_until_the_process_ended(tmp_path):
    path = tmp_path / "c.log"
    path.write_bytes(b"one\ntwo\nthree\n")
    assert b"".join(pod_logs.read_log(path, tail=2, follow=False, ended=lambda: True)) == (
        b"two\nthree\n"
    )
    assert b"".join(pod_logs.read_log(path, tail=0, follow=False, ended=lambda: True)) == b""
    calls = []

    def ended() -> bool:  # the process writes one more line, then ends
        calls.append(1)
        if len(calls) == 1:
            with open(path, "ab") as f:
                f.write(b"four\n")
        return len(calls) > 2

    out = b"".join(pod_logs.read_log(path, tail=None, follow=True, ended=ended))
    assert out == b"one\ntwo\nthree\nfour\n"
