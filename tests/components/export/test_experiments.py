"""What a run's Vertex AI Experiments run holds, and how it is named (the calls themselves
are proven against the emulated Vertex AI: tests/pipelines/vertex/test_emulated_run.py)."""

from __future__ import annotations

import time

import pytest

from components.export.experiments import (
    RUN_ID_LENGTH,
    experiment_name,
    metrics,
    params,
    run_name,
    series,
)
from components.export.gate import Decision
from components.vertex_options import VertexOptions
from trainer.common.schema import OptionsError, validate


def test_the_experiment_is_named_by_the_option_or_the_model_s_display_name():
    assert experiment_name(VertexOptions()) == "gpu-pipeline-model"
    assert experiment_name(VertexOptions(model_display_name="Flowers v2 (ResNet)")) == \
        "flowers-v2-resnet"
    assert experiment_name(VertexOptions(experiment="weekly-flowers")) == "weekly-flowers"
    with pytest.raises(OptionsError, match=r"vertex\.experiment.*'Weekly Flowers'.*1 to 63 "
                                           r"lowercase letters, digits and hyphens"):
        validate(VertexOptions, {"experiment": "Weekly Flowers"}, prefix="vertex")


def test_a_run_s_name_is_its_pipeline_job_s_id_cut_to_fit_beside_the_experiment():
    assert run_name("projects/p/locations/l/pipelineJobs/gpu-training-pipeline-20261128",
                    "exp") == "gpu-training-pipeline-20261128"
    long = "a" * 100 + "-20261128134602"
    name = run_name(long, "e" * 63)
    assert len("e" * 63) + 1 + len(name) == RUN_ID_LENGTH and name.endswith("-20261128134602")


def test_parameters_and_metrics_are_what_the_experiments_client_takes():
    record = {"training": {"model": "resnet50", "epochs": 20, "batch_size": 64,
                           "learning_rate": 0.001, "augment": True},
              "dataset": {"source": "gs://b/flowers", "source_fingerprint": "sha256:ab",
                          "examples": 3670},
              "cluster": {"strategy": "multi_worker_mirrored", "training_plan": {
                  "all_reduce": "nccl", "mixed_precision": "mixed_bfloat16", "xla": True,
                  "accelerator": "NVIDIA_H100_80GB"}, "worker_pool_specs": [
                  {"replica_count": 1, "machine_spec": {"machine_type": "a3-highgpu-8g"}},
                  {"replica_count": 3, "machine_spec": {"machine_type": "a3-highgpu-8g"}}, {}]},
              "trainer_image": "r/gpu@sha256:1"}
    assert params(record) == {
        "model": "resnet50", "epochs": 20, "batch_size": 64, "learning_rate": 0.001,
        "data_source": "gs://b/flowers", "data_fingerprint": "sha256:ab",
        "data_examples": 3670, "strategy": "multi_worker_mirrored", "all_reduce": "nccl",
        "mixed_precision": "mixed_bfloat16", "xla": "on", "machines": 4,
        "machine_type": "a3-highgpu-8g", "accelerator": "NVIDIA_H100_80GB",
        "trainer_image": "r/gpu@sha256:1"}
    kept = Decision(True, False, False, "why", "test_accuracy", 0.91, 0.92,
                    paired={"p_value": 0.69, "challenger_only": 3, "champion_only": 5},
                    champion_kept={"runs": 2, "since": "2026-11-21"})
    found = metrics({"test_accuracy": 0.91, "accuracy": 0.9, "note": "x", "ok": True}, kept)
    assert abs(time.time() - found.pop("decided_at")) < 60  # when, to order the runs by
    assert found == {"test_accuracy": 0.91, "accuracy": 0.9,
                     "champion_test_accuracy": 0.92, "decision": "registered",
                     "gate_p_value": 0.69, "gate_challenger_only": 3,
                     "gate_champion_only": 5, "champion_kept_runs": 2,
                     "champion_kept_since": "2026-11-21"}
    first = Decision(True, True, True, "why", "test_accuracy", 0.91, None)
    found = metrics({"test_accuracy": 0.91}, first)
    assert {k: found[k] for k in ("decision", "champion_kept_runs")} == {
        "decision": "promoted", "champion_kept_runs": 0}
    assert series([{"epoch": 0, "loss": 1.5, "val_accuracy": 0.5},
                   {"epoch": 1, "loss": 1, "val_accuracy": 0.75}]) == [
        (1, {"loss": 1.5, "val_accuracy": 0.5}), (2, {"loss": 1.0, "val_accuracy": 0.75})]
