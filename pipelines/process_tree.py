"""The processes a run started, found and stopped together.

A local run starts stage processes (KFP's local runner), which start trainer processes;
interrupting the command must stop all of them, not only itself. A snapshot of the process
tree is not enough: a signal sent to the whole process group (a terminal's Ctrl-C,
`timeout`) kills the stage processes at once, and the trainers they started are
re-parented before the command looks; a replica forming its cluster ignores SIGTERM
(TensorFlow's coordination service installs its own handler). So every process of a run
carries a marker in its environment (`marked_run`), inherited from the command, and the
run is stopped by sweeps: each finds the command's descendants and every marked process
(through /proc: Linux, where the project runs), sends SIGTERM, waits a short grace, sends
SIGKILL, until a sweep finds none.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

#: The environment variable every process of a run inherits, naming the run.
RUN_MARKER = "GPU_PIPELINE_RUN"


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


@contextlib.contextmanager
def marked_run() -> Iterator[str]:
    """Marks every process started inside the block as this run's (an outer run's mark
    is kept); yields the mark."""
    outer = os.environ.get(RUN_MARKER)
    mark = outer or f"{os.getpid()}-{secrets.token_hex(6)}"
    os.environ[RUN_MARKER] = mark
    try:
        yield mark
    finally:
        if outer is None:
            os.environ.pop(RUN_MARKER, None)


def marked(mark: str) -> list[int]:
    """The processes (other than this one) started with `mark` in their environment."""
    needle = f"\0{RUN_MARKER}={mark}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in b"\0" + (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # gone, or another user's
                continue
    return found


def run_processes() -> list[int]:
    """This command's descendants (deepest first) and the other processes of its run."""
    found = descendants()
    mark = os.environ.get(RUN_MARKER)
    if mark:
        found += [p for p in marked(mark) if p not in found]
    return [p for p in found if _alive(p)]


def _signal(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _wait_gone(pids: list[int], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


def stop_descendants(grace_seconds: float = 5.0, sweeps: int = 5) -> list[int]:
    """Stops every process of the run: SIGTERM, then SIGKILL after the grace, sweep after
    sweep (processes started or re-parented meanwhile are found by the next), until one
    finds none.

    Returns:
        The processes still alive after the last sweep (none, unless one cannot be
        killed, as a process stuck in the kernel cannot).
    """
    for _ in range(sweeps):
        victims = run_processes()
        if not victims:
            return []
        _signal(victims, signal.SIGTERM)
        _wait_gone(victims, grace_seconds)
        _signal([p for p in victims if _alive(p)], signal.SIGKILL)
        _wait_gone(victims, 2.0)
    return run_processes()
