"""Workers and parameter servers of parameter-server training: a TensorFlow server that the
chief (the coordinator) drives, until training is done.

Under ParameterServerStrategy only the chief runs the training program; workers execute
the steps it schedules and parameter servers hold the variables. Their process serves
until the chief's final report exists (training is done, the model exported), then exits
with 0, so that a job whose every replica must end (Vertex AI, the local runner) ends.
"""

from __future__ import annotations

import logging
import os
import time

from trainer.cluster.tf_config import ClusterInfo

log = logging.getLogger("trainer")

#: Seconds a server stays up after training is done, so the chief's shutdown finds it.
GRACE_SECONDS = 5.0


def serve_until_done(info: ClusterInfo, done_marker: str, poll_seconds: float = 1.0) -> None:
    """Starts this task's server and returns once `done_marker` exists (plus a grace)."""
    # A worker should report its own failures to the caller rather than retry forever.
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    log.info("%s serving at %s for parameter-server training; waiting for the chief",
             info.name, server.target)
    while not os.path.exists(done_marker):
        time.sleep(poll_seconds)
    time.sleep(GRACE_SECONDS)
    log.info("training is done: %s stops", info.name)
