"""Stand-ins for the training controller's callbacks, shared by the controller's tests."""

from __future__ import annotations


class Recorder:
    """The controller's callbacks and summaries, recording every call in order."""

    def __init__(self, others_stop_at: int | None = None):
        self.events: list[tuple] = []
        self.scalars_at: list[tuple[int, dict]] = []
        self.others_stop_at = others_stop_at

    def save(self, step: int) -> None:
        self.events.append(("save", step))

    def evaluate(self, step: int, final: bool) -> None:
        self.events.append(("eval", step, final))

    def vote(self, stopping: bool) -> bool:
        """This replica's wish, or another replica's from ``others_stop_at`` on."""
        self.events.append(("vote", stopping))
        step = self.scalars_at[-1][0] if self.scalars_at else 0
        return stopping or (self.others_stop_at is not None and step >= self.others_stop_at)

    def scalars(self, step: int, values: dict) -> None:
        self.scalars_at.append((step, values))

    def sync(self) -> None:
        self.events.append(("sync",))

    @property
    def saves(self) -> list[int]:
        return [e[1] for e in self.events if e[0] == "save"]

    @property
    def evals(self) -> list[tuple[int, bool]]:
        return [(e[1], e[2]) for e in self.events if e[0] == "eval"]
