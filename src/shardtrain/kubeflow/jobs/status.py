"""A job's status as the wait for it reads and reports it, for any job API: its conditions
(Created, Running, Restarting, Succeeded, Failed …), and the lines written about them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass(frozen=True)
class Condition:
    """One job status condition (Created, Running, Restarting, Succeeded, Failed …)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""

    @property
    def true(self) -> bool:
        return self.status == "True"


def conditions_of(job: Any) -> tuple[Condition, ...]:
    """The conditions of a job, an SDK model or a manifest dict (``status.conditions``; none
    without a status)."""
    if isinstance(job, Mapping):
        found = (job.get("status") or {}).get("conditions") or ()
        return tuple(
            Condition(*(str(c.get(k) or "") for k in ("type", "status", "reason", "message")))
            for c in found
        )
    status = getattr(job, "status", None)
    return tuple(
        Condition(c.type or "", c.status or "", c.reason or "", c.message or "")
        for c in (getattr(status, "conditions", None) or ())
    )


def has(conditions: tuple[Condition, ...], kind: str) -> Condition | None:
    """The condition of type ``kind`` that is true, if any."""
    return next((c for c in conditions if c.type == kind and c.true), None)


def print_conditions(out: TextIO, what: str, conditions: tuple[Condition, ...]) -> None:
    """The final conditions of ``what`` (e.g. ``TFJob team/quest``), one a line."""
    say(out, f"conditions of {what}:")
    if not conditions:
        say(out, "  (none reported)")
    for c in conditions:
        say(out, f"  {c.type:<11} {c.status:<6} {c.reason}: {c.message}".rstrip(": "))


def say(out: TextIO, text: str) -> None:
    out.write(text + "\n")
    out.flush()
