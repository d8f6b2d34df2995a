"""Per-step logs that stay on each worker under MultiWorkerMirroredStrategy.

By default Keras makes every training and validation step return the metrics of the
whole cluster: reading each metric's `total` and `count` all-reduces them, and the step's
outputs are all-reduced again, six one-element collectives per step besides the one
that matters, the gradients'. Between two processes on one machine they took 15 ms a
step, as long as the step's own work (benchmarks/multiworker.py); across machines each
is a network round trip that no step can overlap. Nothing reads per-step logs here (no
progress bar, TensorBoard and callbacks by epoch): Keras itself replaces the last step's
logs with the cluster's metrics (`Model.get_metrics_result`, once) at the end of every
epoch and every evaluation, as long as the keys match. So each step returns this
worker's own running values under the same keys, and the epoch logs stay the cluster's.
"""

from __future__ import annotations

from typing import Any


def _local_result(tf: Any, metric: Any) -> Any:
    """A metric's running value on this worker alone, without a collective."""
    if hasattr(metric, "total") and hasattr(metric, "count"):  # every mean-like metric
        # In a replica context, reading a SyncOnRead variable reads the local copy.
        return tf.math.divide_no_nan(tf.convert_to_tensor(metric.total),
                                     tf.convert_to_tensor(metric.count))
    return metric.result()  # any other kind: the cluster's value, as Keras computes it


def keep_step_logs_local(tf: Any, model: Any) -> None:
    """Makes a compiled tf_keras model's per-step logs local to each worker.

    Args:
        tf: The tensorflow module.
        model: The compiled model, under MultiWorkerMirroredStrategy.
    """
    def compute_metrics(x: Any, y: Any, y_pred: Any, sample_weight: Any) -> dict[str, Any]:
        del x
        model.compiled_metrics.update_state(y, y_pred, sample_weight)
        results = {}
        for metric in model.metrics:
            value = _local_result(tf, metric)
            results.update(value if isinstance(value, dict) else {metric.name: value})
        return results

    model.compute_metrics = compute_metrics  # Keras's hook, called by train and test steps
    # This worker's outputs as they are: "auto" would all-reduce each of them every step.
    model.distribute_reduction_method = "first"
