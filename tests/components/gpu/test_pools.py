"""Validation matched to the strategy: which pool layouts the trainer runs, today's Vertex AI
GPUs, and the scheduling strategies' rules."""

from __future__ import annotations

import pytest
from google.cloud import aiplatform_v1

from components.gpu import catalog as cat
from components.gpu.pools import (
    REDUCERS,
    check_layout,
    check_pools,
    check_scheduling,
    layout_of,
)
from components.gpu.validation import validate_worker_pool_specs
from components.gpu.worker_pool import REDUCTION_SERVER, parse_pools
from pipelines.config import ConfigError
from pipelines.config_loading import load_config
from trainer.cluster.roles import Layout
from trainer.run.training_options import TrainingOptions

T4 = {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
      "accelerator_count": 1}
CPU = {"machine_type": "n1-highmem-8"}


def pools(*counts, machine=T4):
    """Pools 0.. with these replica counts (0: an unused pool); pools 2 and 3 on CPUs."""
    return [({"machine_spec": dict(machine if i < 2 else CPU), "replica_count": n} if n else {})
            for i, n in enumerate(counts)]


def test_every_accelerator_name_is_a_vertex_ai_accelerator_type():
    names = set(aiplatform_v1.AcceleratorType.__members__)
    assert set(cat.ACCELERATOR_TYPES) <= names
    fixed = {m.fixed_gpu[0] for m in {**cat.A2_MACHINES, **cat.MODERN_MACHINES}.values()}
    assert fixed <= names and set(cat.FLEX_START_ACCELERATORS) <= names


@pytest.mark.parametrize("machine,gpu,count", [
    ("a2-ultragpu-8g", "NVIDIA_A100_80GB", 8), ("g2-standard-24", "NVIDIA_L4", 2),
    ("a3-highgpu-8g", "NVIDIA_H100_80GB", 8), ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8),
    ("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8),
])
def test_todays_gpu_machines_with_their_fixed_counts(machine, gpu, count):
    spec = {"machine_type": machine, "accelerator_type": gpu, "accelerator_count": count}
    assert validate_worker_pool_specs([{"machine_spec": spec, "replica_count": 1}]).ok
    wrong = validate_worker_pool_specs([{"machine_spec": {**spec, "accelerator_count": 1},
                                         "replica_count": 1}])
    assert not wrong.ok and f"{machine} takes {count} x {gpu}" in wrong.errors[0]


def test_arm_machines_are_refused_for_the_x86_trainer_image():
    spec = {"machine_type": "a4x-highgpu-4g", "accelerator_type": "NVIDIA_GB200",
            "accelerator_count": 4}
    result = validate_worker_pool_specs([{"machine_spec": spec, "replica_count": 1}])
    assert not result.ok
    assert "has Arm (aarch64) CPUs, and the trainer image (linux/amd64) cannot run" in \
        result.errors[0]


def roles(specs, strategy="auto"):
    """(errors, warnings) of stage 1's checks on `specs` with `training.strategy`."""
    result = check_pools(specs, training=TrainingOptions(strategy=strategy))
    return result.errors, result.warnings


def test_layouts_and_the_strategy_they_run():
    assert layout_of(parse_pools(pools(1, 9, 3))) == Layout(workers=9, parameter_servers=3)
    assert layout_of(parse_pools(pools(1, 2, 0, 1))) == Layout(workers=2, evaluators=1)
    assert roles(pools(1, 2)) == ([], [])
    assert roles(pools(1, 9, 3)) == ([], [])  # the documents' example: PS training
    assert roles(pools(1, 2, 1, 1), "parameter_server") == ([], [])
    assert check_pools(pools(1, 9, 3)).plan.strategy == "parameter_server"
    assert Layout(workers=2, parameter_servers=1).input_pipelines("parameter_server") == 2
    assert Layout(workers=2).input_pipelines("multi_worker_mirrored") == 3


@pytest.mark.parametrize("layout,strategy,message", [
    (pools(1, 2, 0, 1), "auto", "worker_pool_specs[2] (parameter servers) is empty while pool 3 "
                                "is used; google-cloud-pipeline-components' CustomJob launcher "
                                "drops empty pools"),
    (pools(1, 2, 1, 2), "auto", "worker_pool_specs[3] (evaluator): replica_count is 2; a "
                                "sidecar evaluator is exactly 1 replica"),
    (pools(1, 0, 2), "auto", "worker_pool_specs[2] (parameter servers): parameter-server "
                             "training needs at least one worker and one parameter server"),
    (pools(1, 2), "parameter_server", "worker_pool_specs[1] (workers): parameter-server "
                                      "training needs at least one worker"),
    (pools(1, 2, 1), "multi_worker_mirrored", "worker_pool_specs[2] (parameter servers): "
                                              "replica_count is 1, but training.strategy "
                                              "multi_worker_mirrored trains with "
                                              "MultiWorkerMirroredStrategy"),
])
def test_layouts_the_strategy_cannot_run_are_refused_naming_the_pool(layout, strategy,
                                                                      message):
    errors, _ = roles(layout, strategy)
    assert any(message in e for e in errors), errors
    assert len(errors) == len(set(errors)) and not any("2 evaluators" in e for e in errors)
    assert check_pools(layout, training=TrainingOptions(strategy=strategy)).plan is None


def test_the_layout_rules_no_strategy_changes():
    assert check_layout(parse_pools(pools(1, 2, 0, 1)))[0].startswith(
        "worker_pool_specs[2] (parameter servers) is empty while pool 3 is used")
    assert check_layout(parse_pools(pools(1, 2, 1, 1))) == []


def test_a_reduction_server_pool_goes_with_multi_worker_training():
    layout = pools(1, 2) + [{"machine_spec": {"machine_type": "n1-highcpu-16"},
                             "replica_count": 4,
                             "container_spec": {"image_uri": f"{REDUCTION_SERVER}:latest"}}]
    assert layout_of(parse_pools(layout)) == Layout(workers=2)
    errors, warnings = roles(layout, "multi_worker_mirrored")
    assert not errors and all(w.startswith(REDUCERS) for w in warnings)
    assert check_pools(layout).plan.reduction_server


def test_parameter_servers_with_gpus_are_a_warning():
    layout = pools(1, 2) + [{"machine_spec": dict(T4), "replica_count": 1}]
    errors, warnings = roles(layout)
    assert not errors and "parameter servers hold variables and need no GPU" in warnings[0]


def test_flex_start_rules():
    a100 = {"machine_type": "a2-highgpu-1g", "accelerator_type": "NVIDIA_TESLA_A100",
            "accelerator_count": 1}
    same = [{"machine_spec": dict(a100), "replica_count": 1},
            {"machine_spec": dict(a100), "replica_count": 2}]
    assert check_scheduling(parse_pools(same), "FLEX_START", "86400s") == []
    assert check_scheduling(parse_pools(pools(1, 1)), "STANDARD", "9999999s") == []
    errors = check_scheduling(parse_pools(pools(1, 1, 1)), "FLEX_START", "1209600s")
    assert any("accelerator_type is 'NVIDIA_TESLA_T4'; scheduling_strategy FLEX_START serves "
               "only NVIDIA_L4" in e for e in errors)
    assert any("needs the same machine configuration in every pool" in e for e in errors)
    assert any("timeout is '1209600s'; scheduling_strategy FLEX_START runs a job for at most "
               "604800s" in e for e in errors)


def test_the_config_checks_layout_and_scheduling_before_any_work():
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"vertex": {"worker_pool_specs": pools(1, 2, 0, 1),
                                          "scheduling_strategy": "FLEX_START",
                                          "max_wait_duration": "soon"}})
    message = str(info.value)
    assert "vertex.worker_pool_specs[2] (parameter servers) is empty while pool 3" in message
    assert "vertex.max_wait_duration is 'soon'; expected whole seconds with an s, e.g. " \
        "3600s, or empty" in message
    config = load_config(overrides={"vertex": {"worker_pool_specs": pools(1, 2, 1)},
                                    "local": {"training_machines": 2}})
    assert config.local_layout() == Layout(workers=1, parameter_servers=1)
