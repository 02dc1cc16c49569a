"""Progress reporting for long work: a live bar on a terminal, periodic log lines elsewhere.

In a terminal the user sees a rich progress bar with rows/s and MB/s; in a pod, a CI log or a
pipeline step (no TTY) the same figures are logged every ``log_every`` seconds instead, so logs
stay readable.
"""

from __future__ import annotations

import logging
import sys
import time
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

log = logging.getLogger(__name__)

#: Libraries whose INFO chatter (every S3 request, every compile) is noise in our logs.
NOISY_LOGGERS = ("botocore", "aiobotocore", "s3fs", "fsspec", "urllib3", "google", "numba")

#: The log line's shape: ``HH:MM:SS LEVEL logger: message``.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_DATE_FORMAT = "%H:%M:%S"


def setup_logging(verbose: bool = False) -> None:
    """Log lines on stderr (``HH:MM:SS LEVEL logger: message``), the storage stack quieted.

    Used by the CLI and by pipeline component processes, which start with no handler; a
    process that already has handlers keeps them.
    """
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format=LOG_FORMAT,
        datefmt=LOG_DATE_FORMAT,
        stream=sys.stderr,
    )
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


class _RatesColumn(ProgressColumn):
    """rows, rows/s and MB/s of a task whose `completed` counts bytes and fields hold rows."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        rows = task.fields.get("rows", 0)
        mb = task.completed / 1e6
        if elapsed > 0:
            text = (
                f"{rows:,} rows  {rows / elapsed:,.0f} rows/s  "
                f"{mb:,.0f} MB  {mb / elapsed:,.1f} MB/s"
            )
        else:
            text = f"{rows:,} rows"
        return Text(text, style="progress.data.speed")


class RateProgress:
    """Context manager counting rows and bytes; ``advance(rows, nbytes)`` from any thread."""

    def __init__(self, description: str, total_bytes: int | None, log_every: float = 10.0):
        self.description = description
        self.total_bytes = total_bytes or None
        self.rows = 0
        self.bytes = 0
        self._log_every = log_every
        self._started = time.monotonic()
        self._last_log = self._started
        self._console = Console(stderr=True)
        self._progress: Progress | None = None
        self._task_id: TaskID | None = None

    def __enter__(self) -> RateProgress:
        self._started = self._last_log = time.monotonic()
        if self._console.is_terminal and sys.stderr.isatty():
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                _RatesColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self._console,
            )
            self._progress.start()
            self._task_id = self._progress.add_task(
                self.description, total=self.total_bytes, rows=0
            )
        return self

    def advance(self, rows: int, nbytes: int) -> None:
        self.rows += rows
        self.bytes += nbytes
        if self._progress is not None and self._task_id is not None:
            self._progress.update(self._task_id, advance=nbytes, rows=self.rows)
            return
        now = time.monotonic()
        if now - self._last_log >= self._log_every:
            self._last_log = now
            log.info("%s: %s", self.description, self.summary())

    def advance_to(self, rows_done: int, bytes_done: int) -> None:
        """Like :meth:`advance`, from running totals (what the data generators report)."""
        self.advance(rows_done - self.rows, bytes_done - self.bytes)

    def summary(self) -> str:
        """'N rows, R rows/s, M MB, S MB/s' so far."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        return (
            f"{self.rows:,} rows ({self.rows / elapsed:,.0f} rows/s), "
            f"{self.bytes / 1e6:,.1f} MB ({self.bytes / 1e6 / elapsed:,.1f} MB/s)"
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
        if exc_type is None and self.rows:
            log.info("%s: done, %s", self.description, self.summary())
