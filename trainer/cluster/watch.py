"""A bound on the wait for the training cluster to form, kept by a process of its own.

TensorFlow's strategies wait for every replica of TF_CONFIG without a limit that reaches
the user, and while MultiWorkerMirroredStrategy is created the main thread holds Python's
lock inside TensorFlow, so no thread of the trainer can act (and the replica ignores
SIGTERM: TensorFlow's coordination service handles it). So a small watcher process (no
TensorFlow) is started beside the replica: when the cluster forms, the trainer closes the
watcher's input and it leaves; after `seconds` without that, it names the replicas it
cannot reach and the likely causes on the trainer's own stderr, and kills the trainer,
whose launcher (the local one, or Vertex AI) then sees it fail.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping

from trainer.cluster.network import not_formed_message
from trainer.cluster.tf_config import ClusterInfo, cluster_from_env


@contextlib.contextmanager
def formation_watch(info: ClusterInfo, seconds: int,
                    environ: Mapping[str, str]) -> Iterator[None]:
    """Bounds the wait for the cluster inside the block (see the module doc)."""
    if not info.cluster:
        yield
        return
    watcher = subprocess.Popen(
        [sys.executable, "-m", "trainer.cluster.watch", str(os.getpid()), str(seconds)],
        stdin=subprocess.PIPE, env=dict(environ))
    try:
        yield
    finally:
        watcher.stdin.close()  # formed (or failed otherwise): the watcher leaves
        try:
            watcher.wait(timeout=10)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()


def main(argv: list[str] | None = None) -> int:
    """`python -m trainer.cluster.watch TRAINER_PID SECONDS`, TF_CONFIG in the environment."""
    trainer, seconds = (int(a) for a in (argv or sys.argv[1:]))
    ready, _, _ = select.select([sys.stdin], [], [], seconds)
    if ready:  # end of input: the trainer is past the wait, or gone
        return 0
    info = cluster_from_env(os.environ)
    message = not_formed_message(info, seconds, os.environ)
    print(f"trainer: {message}", file=sys.stderr, flush=True)
    try:
        os.kill(trainer, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return 1


if __name__ == "__main__":
    sys.exit(main())
