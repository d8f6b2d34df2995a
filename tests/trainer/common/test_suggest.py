"""The closest known name to a mistyped one, and none when nothing is close."""

from __future__ import annotations

from components.gpu.validation import did_you_mean as gpu_type
from trainer.common.suggest import closest, did_you_mean


def test_a_typo_gets_the_closest_name_and_a_stranger_none():
    assert closest("bach_size", ["batch_size", "epochs"]) == "batch_size"
    assert closest("us-centrl1", ["us-central1", "us-east1"]) == "us-central1"
    assert closest("Batch-Size", ["batch_size"]) == "batch_size"  # case and -/_ aside
    assert closest("colour", ["batch_size", "epochs"]) is None
    assert did_you_mean("regoin", ["region", "project"]) == " (did you mean region?)"
    assert did_you_mean("colour", ["region"]) == ""
    # A GPU type by its model: T4 is NVIDIA_TESLA_T4.
    assert gpu_type("t4", ["NVIDIA_TESLA_T4", "NVIDIA_L4"]) == " (did you mean NVIDIA_TESLA_T4?)"
