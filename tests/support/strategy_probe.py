"""One replica of a two-process cluster that creates the trainer's strategy for a training
plan and prints the communication hint of the all-reduce TensorFlow traces in a step
(`python -m tests.support.strategy_probe PLAN_JSON`; TF_CONFIG set by the test). The hint is what
TensorFlow's collective resolver picks NCCL by (`AssignCollectiveType`)."""

from __future__ import annotations

import json
import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"


def main() -> None:
    import tensorflow as tf

    from trainer.cluster.training_plan import TrainingPlan
    from trainer.run.distribution import create_strategy

    plan = TrainingPlan.from_json(sys.argv[1])
    strategy = create_strategy(tf, plan)  # the first TensorFlow op, as in the trainer

    @tf.function
    def step():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(
            "sum", tf.constant(1.0)))

    graph = step.get_concrete_function().graph  # traced, not run: no GPU is needed
    hints = sorted({(op.type, op.get_attr("communication_hint").decode())
                    for op in graph.get_operations() if op.type.startswith("CollectiveReduce")})
    print(json.dumps({"strategy": type(strategy).__name__, "hints": hints}), flush=True)
    os._exit(0)  # no shutdown barrier: the other replica may already be gone


if __name__ == "__main__":
    main()
