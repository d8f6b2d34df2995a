"""Vertex training stage: the CustomJob worker pools, as the client library's own types."""

from __future__ import annotations

import json

import pytest
from google.cloud import aiplatform_v1

from components import images as project_images
from components.gpu.pools import check_pools
from components.gpu.validation import validate_worker_pool_specs
from components.gpu.worker_pool import WorkerPool, parse_pools
from components.training.vertex_job import (
    TrainingSpecError,
    custom_job,
    custom_job_spec,
    trainer_flags,
)
from pipelines.config import Config
from trainer.common.schema import to_flags
from trainer.run.training_options import TrainingOptions

REPO = "us-docker.pkg.dev/p/r"
GPU = project_images.reference(REPO, project_images.GPU, "sha256:" + "1" * 64)
CPU = project_images.reference(REPO, project_images.CPU, "sha256:" + "2" * 64)
N1 = WorkerPool(0, "n1-standard-8")
#: The build stage's output.
IMAGES = {"gpu": {"reference": GPU, "tag": "src-0123456789abcdef", "built": True},
          "cpu": {"reference": CPU, "tag": "src-0123456789abcdef", "built": False}}


def _spec():
    pools = validate_worker_pool_specs(list(Config().vertex.worker_pool_specs)).specs
    return custom_job_spec(parse_pools(pools), IMAGES,
                           dataset_path="/gcs/b/root/run/prepare-dataset/dataset",
                           output_uri="gs://b/root/run/vertex-training-spec/training_job",
                           output_path="/gcs/b/root/run/vertex-training-spec/training_job",
                           trainer_args=to_flags(TrainingOptions(
                               epochs=3, batch_size=64, learning_rate=0.01, model="cnn")))


def test_pools_parse_as_aiplatform_types():
    spec = _spec()
    parsed = [aiplatform_v1.WorkerPoolSpec(pool) for pool in spec["worker_pool_specs"]]
    chief, worker = parsed
    assert chief.replica_count == 1
    assert chief.machine_spec.machine_type == "n1-standard-8"
    assert chief.machine_spec.accelerator_type == aiplatform_v1.AcceleratorType.NVIDIA_TESLA_T4
    assert chief.machine_spec.accelerator_count == 1
    # GPU pools run the GPU image, by digest alone, and are told their GPUs per machine.
    assert chief.container_spec.image_uri == worker.container_spec.image_uri == GPU
    args = list(chief.container_spec.args)
    assert args[args.index("--expected-gpus") + 1] == "1"
    assert args[:4] == ["--job-dir", "/gcs/b/root/run/vertex-training-spec/training_job",
                        "--data-dir", "/gcs/b/root/run/prepare-dataset/dataset"]
    assert args[args.index("--batch-size") + 1] == "64"
    assert args[args.index("--model") + 1] == "cnn"
    job = aiplatform_v1.CustomJobSpec(
        worker_pool_specs=spec["worker_pool_specs"],
        base_output_directory=aiplatform_v1.GcsDestination(
            output_uri_prefix=spec["base_output_directory"]))
    assert len(job.worker_pool_specs) == 2
    assert spec["model_uri"] == spec["base_output_directory"] + "/model"


def test_unused_pool_stays_empty():
    pools = [{"machine_spec": {"machine_type": "n1-standard-8"}, "replica_count": 1}, {},
             {"machine_spec": {"machine_type": "n1-highmem-8"}, "replica_count": 2}]
    spec = custom_job_spec(parse_pools(pools), IMAGES, dataset_path="/d", output_uri="gs://b/o",
                           output_path="/gcs/b/o")
    assert spec["worker_pool_specs"][1] == {}
    assert aiplatform_v1.WorkerPoolSpec(spec["worker_pool_specs"][2]).replica_count == 2


def test_refuses_without_images_or_chief():
    with pytest.raises(TrainingSpecError, match="images has no reference for gpu, cpu"):
        custom_job_spec([N1], {}, dataset_path="/d", output_uri="gs://b",
                        output_path="/gcs/b")
    with pytest.raises(TrainingSpecError, match="no chief pool"):
        custom_job_spec([None], IMAGES, dataset_path="/d", output_uri="gs://b",
                        output_path="/gcs/b")


def test_display_name_is_the_job_name_made_unique():
    import re

    spec = custom_job_spec([N1], IMAGES,
                           dataset_path="/d", output_uri="gs://b/o", output_path="/gcs/b/o",
                           job_name="nightly")
    assert re.fullmatch(r"nightly_\d{8}_\d{6}", spec["display_name"])
    job = aiplatform_v1.CustomJob(display_name=spec["display_name"], job_spec=aiplatform_v1.
                                  CustomJobSpec(worker_pool_specs=spec["worker_pool_specs"]))
    assert job.display_name == spec["display_name"]
    with pytest.raises(TrainingSpecError, match="contains '-'"):
        custom_job_spec([N1], IMAGES,
                        dataset_path="/d", output_uri="gs://b/o", output_path="/gcs/b/o",
                        job_name="night-ly")


def test_every_role_runs_the_trainer_gpu_pools_in_the_gpu_image_and_a_reduction_server_its_own():
    cpu = {"machine_spec": {"machine_type": "n1-highmem-8"}}
    gpu = {"machine_spec": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
                            "accelerator_count": 1}}
    pools = [{**gpu, "replica_count": 1}, {**gpu, "replica_count": 2},
             {**cpu, "replica_count": 1}, {**cpu, "replica_count": 1}]
    args = to_flags(TrainingOptions(epochs=2))
    spec = custom_job_spec(parse_pools(pools), IMAGES, dataset_path="/d", output_uri="gs://b/o",
                           output_path="/gcs/b/o", trainer_args=args)
    parsed = [aiplatform_v1.WorkerPoolSpec(p) for p in spec["worker_pool_specs"]]
    assert [p.container_spec.image_uri for p in parsed] == [GPU, GPU, CPU, CPU]
    gpu_args = list(parsed[0].container_spec.args)
    assert gpu_args[-2:] == ["--expected-gpus", "1"]
    assert all(list(p.container_spec.args) == gpu_args for p in parsed[:2])
    assert all(list(p.container_spec.args) == gpu_args[:-2] for p in parsed[2:])
    assert parsed[0].container_spec.args[parsed[0].container_spec.args.index("--strategy") + 1] \
        == "auto"

    from components.gpu.pools import REDUCTION_SERVER

    reduction = {"machine_spec": {"machine_type": "n1-highcpu-16"}, "replica_count": 2,
                 "container_spec": {"image_uri": f"{REDUCTION_SERVER}:latest"}}
    # The replicas' --strategy is the plan's (pool 2 is a Reduction Server, not parameter
    # servers): one decision, stage 1's, which the flags only carry.
    checked = check_pools(pools[:2] + [reduction], training=TrainingOptions(epochs=2))
    assert checked.ok and checked.plan.reduction_server
    spec = custom_job_spec(checked.pools, IMAGES, dataset_path="/d", output_uri="gs://b/o",
                           output_path="/gcs/b/o",
                           trainer_args=trainer_flags(TrainingOptions(epochs=2),
                                                      checked.plan.to_dict()))
    chief, _, server = (aiplatform_v1.WorkerPoolSpec(p) for p in spec["worker_pool_specs"])
    assert server.container_spec.image_uri == f"{REDUCTION_SERVER}:latest"
    assert not server.container_spec.args
    trainer_args = list(chief.container_spec.args)
    assert trainer_args.count("--strategy") == 1
    assert trainer_args[trainer_args.index("--strategy") + 1] == "multi_worker_mirrored"
    assert json.loads(trainer_args[trainer_args.index("--training-plan") + 1])[
        "strategy"] == "multi_worker_mirrored"


def test_a_tensorboard_outside_the_jobs_region_is_refused_at_load_as_vertex_ai_refuses_it(
        apis):
    """Vertex AI uses a resource in its own location only ("Vertex AI locations";
    GoogleCloudPlatform/vertex-ai-samples#925): the emulated Vertex AI refuses the job, and
    the configuration is refused before any run."""
    from google.api_core import exceptions

    from pipelines.config import ConfigError
    from tests.support.google_fakes import rest_client
    from tests.support.launches import config, missing_images

    board = "projects/my-proj/locations/us-central1/tensorboards/7"
    cfg = config(tensorboard=board, service_account="trainer@my-proj.iam.gserviceaccount.com")
    spec = custom_job_spec(cfg.vertex.pools, missing_images(), dataset_path="/gcs/d",
                           output_uri="gs://b/job", output_path="/gcs/b/job")
    job = custom_job(spec, cfg.vertex, "STANDARD")
    jobs = rest_client(aiplatform_v1.JobServiceClient, apis)
    assert jobs.create_custom_job(parent="projects/my-proj/locations/us-central1",
                                  custom_job=job).job_spec.tensorboard == board
    with pytest.raises(exceptions.BadRequest, match="is not in the job's location us-east1"):
        jobs.create_custom_job(parent="projects/my-proj/locations/us-east1", custom_job=job)
    with pytest.raises(ConfigError) as refused:
        config(tensorboard=board.replace("us-central1", "europe-west4"),
               service_account="trainer@my-proj.iam.gserviceaccount.com",
               fallbacks=[{"region": "us-east1", "scheduling_strategy": "SPOT"}])
    assert ("vertex.tensorboard is in europe-west4 but region is us-central1; a job streams "
            "its logs to a TensorBoard in its region: use one in us-central1") \
        in str(refused.value)
    assert ("vertex.fallbacks[0] is in us-east1 but tensorboard is in europe-west4; a "
            "configuration in another region needs a TensorBoard there, which a fallback "
            "cannot give: keep fallbacks in europe-west4 with tensorboard set") \
        in str(refused.value)
