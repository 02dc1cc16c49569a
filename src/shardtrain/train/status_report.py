"""Training progress in the TrainJob's own status (Kubeflow Trainer 2.2+, ``TrainJobStatus``).

With the ``TrainJobStatus`` feature gate on, Trainer (v2.3: ``plugins/trainjobstatus``,
``pkg/statusserver``) gives every trainer node three variables and a projected volume:

* ``KUBEFLOW_TRAINER_SERVER_URL``: its status server,
  ``https://<webhook service>.<trainer namespace>.svc:<port>/apis/trainer.kubeflow.org/
  v1alpha1/namespaces/<ns>/trainjobs/<name>/status``;
* ``KUBEFLOW_TRAINER_SERVER_CA_CERT``: the file of the CA that signed the server's certificate;
* ``KUBEFLOW_TRAINER_SERVER_TOKEN``: the file of a service account token projected for the
  audience ``trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<name>/status``.

A ``POST`` of ``{"trainerStatus": {"progressPercentage", "estimatedRemainingSeconds",
"metrics": [{"name", "value"}], "lastUpdatedTime"}}`` with ``Authorization: Bearer <token>``
lands in ``status.trainerStatus`` of the TrainJob (``kubectl get trainjob -o yaml``, the
Kubeflow SDK's ``get_job``); the server answers 403 to a token not issued for that job.
The Kubeflow SDK's ``update_trainjob_status`` sends the same request; this module is the
same client in the standard library, so the image needs no SDK.

:class:`StatusReport` is what the chief (the replica that checkpoints and evaluates) calls
from the training controller: progress after every loop, the eval metrics after each
evaluation, a last report at the end. Reports go out at most every ``interval`` seconds
(the last one always), each with a short timeout. Outside a TrainJob it does nothing; in a
TrainJob without the gate (no URL), or when the server refuses (401, 403, 404) or is
unreachable three times in a row, it says so once in the log and stops reporting: training
never fails or waits long because of it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from shardtrain.train import cluster
from shardtrain.train.evaluation import headline_keys

log = logging.getLogger("shardtrain.train.trainer")

URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_CERT_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
#: Least seconds between two reports (the last one goes out regardless).
DEFAULT_INTERVAL = 15.0
#: Seconds one report may take before it is given up.
TIMEOUT = 5.0
#: Failed reports in a row (server unreachable, 5xx) after which reporting stops.
MAX_FAILURES = 3
#: Trainer's limits on ``status.trainerStatus.metrics``: entries, name and value lengths.
MAX_METRICS = 256
MAX_TEXT = 64

#: ``post(url, body, headers, ca_file, timeout)`` returns the HTTP status; raises OSError
#: when the server cannot be reached.
Post = Callable[[str, bytes, Mapping[str, str], str | None, float], int]


def _post(
    url: str, body: bytes, headers: Mapping[str, str], ca_file: str | None, timeout: float
) -> int:
    context = ssl.create_default_context(cafile=ca_file) if url.startswith("https:") else None
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _text(value: Any) -> str:
    if isinstance(value, float):
        value = f"{value:.6g}"
    return str(value)[:MAX_TEXT]


class StatusReport:
    """Reports a chief's progress, ETA and metrics into its TrainJob's status.

    Args:
        url: the status server's URL (``KUBEFLOW_TRAINER_SERVER_URL``); None: report nothing.
        token_file: the projected token's file, read at each report (it is rotated).
        ca_file: the CA certificate's file; None: the system's CAs.
        interval: least seconds between two reports.
        clock: a monotonic clock in seconds.
        post: sends one report (see :data:`Post`); the standard library's HTTPS by default.
    """

    def __init__(
        self,
        url: str | None,
        *,
        token_file: str | None = None,
        ca_file: str | None = None,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        post: Post = _post,
    ):
        self.url = url
        self.token_file = token_file
        self.ca_file = ca_file
        self.interval = interval
        self._clock = clock
        self._post = post
        self._sent_at: float | None = None
        self._failures = 0
        self._start: tuple[float, int] | None = None
        self._progress: tuple[int, int | None] | None = None
        self._metrics: dict[str, str] = {}
        self.reports = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> StatusReport:
        """The reporter a process in a TrainJob gets from its environment (``os.environ``
        when None); outside a TrainJob one that does nothing, silently. In a TrainJob
        without the status server's variables the log says once why nothing is reported."""
        env = os.environ if environ is None else environ
        url = (env.get(URL_ENV) or "").strip() or None
        if url is None and (env.get(cluster.TRAINJOB_NAME_ENV) or "").strip():
            log.info(
                "TrainJob status: progress is not reported (no %s: Trainer's TrainJobStatus "
                "feature gate is off); training is unaffected",
                URL_ENV,
            )
        return cls(
            url,
            token_file=(env.get(TOKEN_ENV) or "").strip() or None,
            ca_file=(env.get(CA_CERT_ENV) or "").strip() or None,
            **kwargs,
        )

    @property
    def enabled(self) -> bool:
        """Whether reports are (still) sent."""
        return self.url is not None

    def progress(
        self, step: int, train_steps: int, train: Mapping[str, float] | None = None
    ) -> None:
        """Training reached ``step`` of ``train_steps`` (``train``: the last loop's scalars,
        e.g. ``loss``); reported unless the last report is less than ``interval`` old. The
        ETA is the steps left at the rate since the first call (a resumed job's restored
        step is not counted as done in no time)."""
        if not self.enabled:
            return
        now = self._clock()
        if self._start is None:
            self._start = (now, step)
        started_at, start_step = self._start
        eta = None
        if step > start_step and now > started_at:
            rate = (step - start_step) / (now - started_at)
            eta = math.ceil(max(train_steps - step, 0) / rate)
        percent = min(100, max(0, step * 100 // max(train_steps, 1)))
        self._progress = (percent, eta)
        self._metrics["step"] = f"{step}/{train_steps}"
        self._metrics.update({f"train_{k}": _text(v) for k, v in (train or {}).items()})
        self._send(final=False)

    def evaluated(self, metrics: Mapping[str, Any]) -> None:
        """The latest evaluation (a ``metrics.json``): its headline metrics (``auc``,
        ``accuracy``, ``log_loss``; ``rmse`` … for a regression) and step, reported as
        ``eval_<name>``."""
        if not self.enabled:
            return
        keys = [*headline_keys(metrics), "step"]
        self._metrics.update({f"eval_{k}": _text(metrics[k]) for k in keys if k in metrics})
        self._send(final=False)

    def finish(self, step: int, train_steps: int) -> None:
        """Training ended at ``step``: the last report (100% and an ETA of 0 at
        ``train_steps``), whatever the interval."""
        if not self.enabled:
            return
        self._metrics["step"] = f"{step}/{train_steps}"
        done = step >= train_steps
        percent = 100 if done else min(99, step * 100 // max(train_steps, 1))
        self._progress = (percent, 0 if done else (self._progress or (0, None))[1])
        self._send(final=True)

    def payload(self) -> dict[str, Any]:
        """The request body of the next report."""
        status: dict[str, Any] = {
            "lastUpdatedTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        }
        if self._progress is not None:
            percent, eta = self._progress
            status["progressPercentage"] = percent
            if eta is not None:
                status["estimatedRemainingSeconds"] = min(eta, 2**31 - 1)
        if self._metrics:
            status["metrics"] = [
                {"name": name[:MAX_TEXT], "value": value}
                for name, value in list(self._metrics.items())[:MAX_METRICS]
                if value
            ]
        return {"trainerStatus": status}

    def _send(self, *, final: bool) -> None:
        now = self._clock()
        if not final and self._sent_at is not None and now - self._sent_at < self.interval:
            return
        self._sent_at = now
        url = self.url
        assert url is not None
        try:
            token = self._token()
            code = self._post(
                url,
                json.dumps(self.payload()).encode(),
                {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                self.ca_file,
                TIMEOUT,
            )
        except OSError as exc:  # unreachable, timed out, TLS refused, token unreadable
            self._failed(f"{type(exc).__name__}: {exc}")
            return
        except Exception as exc:  # never let a report stop training
            self._stop(f"{type(exc).__name__}: {exc}")
            return
        if code == 200:
            self._failures = 0
            self.reports += 1
            return
        if code in (401, 403, 404):
            what = "not found" if code == 404 else "refused"
            self._stop(f"HTTP {code} ({what}: no permission for this TrainJob's status)")
        else:
            self._failed(f"HTTP {code}")

    def _token(self) -> str:
        if not self.token_file:
            raise FileNotFoundError(f"no {TOKEN_ENV}")
        with open(self.token_file) as f:
            return f.read().strip()

    def _failed(self, why: str) -> None:
        self._failures += 1
        if self._failures >= MAX_FAILURES:
            self._stop(f"{why}, {self._failures} times in a row")
        elif self._failures == 1:
            log.warning("TrainJob status: a report to %s failed (%s); retrying", self.url, why)

    def _stop(self, why: str) -> None:
        log.warning(
            "TrainJob status: progress is no longer reported to %s (%s); training is unaffected",
            self.url,
            why,
        )
        self.url = None
