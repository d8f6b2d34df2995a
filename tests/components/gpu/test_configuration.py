"""Stage 1's one entry (`check_configuration`): the same result for the pipeline's stage 1,
config loading and `validate-gpu`; a local run's plan and input pipelines its own."""

from __future__ import annotations

from components.gpu.configuration import check_configuration
from components.vertex_options import VertexOptions
from trainer.cluster.roles import Layout
from trainer.run.training_options import TrainingOptions

T4 = {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
      "accelerator_count": 1}


def test_the_default_configuration_gives_the_primary_plan_and_its_input_pipelines():
    found = check_configuration(VertexOptions(), TrainingOptions())
    assert found.checked.ok and found.plan == found.checked.primary.plan
    assert found.plan.strategy == "multi_worker_mirrored" and found.input_pipelines == 2
    assert found.lines(TrainingOptions(), "us-central1")[1].startswith(
        "training plan on Vertex AI: multi_worker_mirrored on 1 x NVIDIA_TESLA_T4")


def test_a_local_run_gets_a_plan_for_its_cpu_processes():
    found = check_configuration(VertexOptions(), TrainingOptions(), Layout(2, 1, 0))
    assert found.plan.strategy == "parameter_server" and found.plan.all_reduce == "none"
    assert found.input_pipelines == 2  # the workers read; the chief coordinates
    assert found.lines(TrainingOptions(), "us-central1")[-1].startswith(
        "training plan of this local run: parameter_server")


def test_fallbacks_shard_for_every_alternative_and_errors_give_no_plan():
    pools = [{"machine_spec": T4, "replica_count": 1}, {"machine_spec": T4, "replica_count": 2}]
    found = check_configuration(VertexOptions(fallbacks=[{"worker_pool_specs": pools}]))
    assert found.input_pipelines == 6  # a multiple of 2 and of 3 training machines
    bad = check_configuration(VertexOptions(
        worker_pool_specs=[{"machine_spec": {**T4, "accelerator_count": 3}, "replica_count": 1}]))
    assert not bad.checked.ok and bad.plan is None and bad.input_pipelines == 0
