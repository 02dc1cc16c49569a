"""The exit-code contract's mappings: which errors of a collective mean a lost peer (exit 200,
retryable), and other libraries' errors as one line."""

from __future__ import annotations

import json

import pytest

from shardtrain.errors import PEER_LOST_EXIT_CODE, one_line, peer_lost


def _error(class_name: str, message: str) -> Exception:
    """An exception whose class is named like TensorFlow's (no TensorFlow import needed)."""
    return type(class_name, (Exception,), {})(message)


#: How the trainer describes a worker of a chief + 2 workers job (Role.describe()).
_WORKER = "worker 1 of 3 (chief: no)"


@pytest.mark.parametrize(
    "exc",
    [
        _error(
            "UnavailableError",
            "Graph execution error:\n\nCollective ops is aborted by: ... Connection reset by peer",
        ),
        _error("AbortedError", "The following tasks are unhealthy (stopped sending heartbeats)"),
        _error("DeadlineExceededError", "collective timed out"),
        _error("CancelledError", "RecvBuf cancelled"),
        _error("UnknownError", "Socket closed"),
    ],
    ids=["unavailable", "aborted", "deadline", "cancelled", "unknown-socket-closed"],
)
def test_a_lost_peer_is_a_retryable_error_for_a_collective_member(exc):
    lost = peer_lost(exc, _WORKER)
    assert lost is not None and lost.exit_code == PEER_LOST_EXIT_CODE >= 128
    assert "\n" not in str(lost) and "worker 1 of 3" in str(lost)
    assert "Graph execution error" not in str(lost)  # the telling line, not TF's first


@pytest.mark.parametrize(
    "exc",
    [
        _error("DataLossError", "corrupted record at 612008"),
        _error("InvalidArgumentError", "Key: label. Can't parse serialized Example."),
        _error("NotFoundError", "shard-00001.tfrecord; No such file or directory"),
        ValueError("bad value"),
    ],
)
def test_data_errors_are_not_peer_losses(exc):
    assert peer_lost(exc, _WORKER) is None


def test_an_api_error_anywhere_in_the_chain_is_its_status_and_message():
    from kubernetes.client.rest import ApiException

    api = ApiException(status=409, reason="Conflict")
    api.body = json.dumps({"message": 'tfjobs.kubeflow.org "probe"\n  already exists'})
    try:
        try:
            raise api
        except ApiException as exc:
            raise RuntimeError("Failed to create TFJob") from exc
    except RuntimeError as wrapped:
        assert one_line(wrapped) == 'HTTP 409: tfjobs.kubeflow.org "probe" already exists'
    api.body = "not json"
    assert one_line(api) == "HTTP 409: Conflict"


def test_other_errors_lose_colour_codes_and_line_breaks_and_are_bounded():
    assert one_line(ValueError("\x1b[31mbad\x1b[0m\n  value")) == "bad value"
    assert one_line(ValueError()) == "ValueError"
    assert len(one_line(ValueError("x" * 1000))) == 400
