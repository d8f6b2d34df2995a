"""How far a long piece of work is: done of total, its rate, and the time left.

A stage that works through many items (the dataset stage's images) says so at most every
`every` seconds, so that a long run is not silent and its end can be foreseen; short work
says nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from components.stage_messages import say


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """Counts items done and reports `done of total (percent), rate/s, about T left`.

    Args:
        what: What is counted, as the line starts (`dataset: images encoded`).
        total: How many items there are.
        every: Seconds between two reports (none before the first `every` seconds).
        log: Where the lines go.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(self, what: str, total: int, *, every: float = 15.0,
                 log: Callable[[str], None] = say,
                 clock: Callable[[], float] = time.monotonic):
        self.what, self.total, self.every, self.log, self.clock = what, total, every, log, clock
        self.done = 0
        self.started = self.last = clock()

    def advance(self, count: int = 1) -> None:
        """Counts `count` more items; reports when `every` seconds have passed."""
        self.done += count
        now = self.clock()
        if now - self.last < self.every or self.done >= self.total:
            return
        self.last = now
        rate = self.done / max(now - self.started, 1e-9)
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        self.log(f"{self.what}: {self.done} of {self.total} "
                 f"({100 * self.done / self.total:.0f}%), {rate:.0f}/s, "
                 f"about {_duration(left)} left")
