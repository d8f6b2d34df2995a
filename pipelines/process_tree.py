"""The processes a run started, found and stopped together.

A local run starts stage processes (KFP's local runner), which start trainer processes;
interrupting the command must stop all of them, not only itself. Descendants are found
through /proc (Linux, where the project runs), deepest first.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def descendants(pid: int | None = None) -> list[int]:
    """Every process below `pid` (default: this one), children after their descendants."""
    root = os.getpid() if pid is None else pid
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: list[int] = []

    def below(parent: int) -> None:
        for child, its_parent in parents.items():
            if its_parent == parent:
                below(child)
                found.append(child)

    below(root)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; its parent has not reaped it yet


def stop_descendants(grace_seconds: float = 5.0) -> list[int]:
    """Terminates every descendant (SIGTERM, then SIGKILL after the grace); returns them."""
    victims = descendants()
    for pid in victims:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_seconds
    while any(_alive(p) for p in victims) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in (p for p in victims if _alive(p)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return victims
