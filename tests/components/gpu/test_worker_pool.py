"""Worker pools parsed once: the API's mappings (snake_case from configs and KFP, camelCase
from REST job resources) read into `WorkerPool` and written back unchanged."""

from __future__ import annotations

import dataclasses

from google.cloud import aiplatform_v1
from google.protobuf import json_format

from components.gpu.validation import validate_worker_pool_specs
from components.gpu.worker_pool import REDUCTION_SERVER, WorkerPool, api_specs, parse_pools

T4 = {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
      "accelerator_count": 2}


def test_a_checked_pool_is_read_once_and_written_back_as_it_was():
    given = [{"machine_spec": T4, "replica_count": 1,
              "disk_spec": {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": 200}},
             {}, {"machine_spec": {"machine_type": "n1-highcpu-16"}, "replica_count": 4,
                  "container_spec": {"image_uri": f"{REDUCTION_SERVER}:latest",
                                     "env": [{"name": "A", "value": "1"}]}}]
    specs = validate_worker_pool_specs(given).specs
    chief, unused, reducers = parse_pools(specs)
    assert (chief.role, chief.machine, chief.accelerator, chief.gpus_per_machine,
            chief.replicas, chief.image) == (0, "n1-standard-8", "NVIDIA_TESLA_T4", 2, 1, "")
    assert unused is None and not chief.reduction_server
    assert (reducers.role, reducers.replicas, reducers.reduction_server) == (2, 4, True)
    assert chief.describe() == "1 x n1-standard-8 + 2 x NVIDIA_TESLA_T4"
    assert reducers.describe() == "4 x n1-highcpu-16"
    assert api_specs(parse_pools(specs)) == specs
    # What the API takes: the client's own type accepts every pool.
    for spec in api_specs(parse_pools(specs)):
        aiplatform_v1.WorkerPoolSpec(spec)


def test_the_trainer_image_joins_what_the_container_already_had():
    pool = WorkerPool.from_api({"machine_spec": {"machine_type": "n1-standard-4"},
                                "container_spec": {"env": [{"name": "A", "value": "1"}]}}, 0)
    running = dataclasses.replace(pool, image="r/trainer@sha256:" + "0" * 64)
    assert running.to_api()["container_spec"] == {
        "image_uri": "r/trainer@sha256:" + "0" * 64, "env": [{"name": "A", "value": "1"}]}
    assert pool.to_api() == {"machine_spec": {"machine_type": "n1-standard-4"},
                             "replica_count": 1,
                             "container_spec": {"env": [{"name": "A", "value": "1"}]}}
    assert api_specs([pool, None, None]) == [pool.to_api()]


def test_a_rest_job_resource_reads_the_same():
    """ListCustomJobs' REST resources spell fields in camelCase and int64 as strings."""
    job = aiplatform_v1.WorkerPoolSpec(
        machine_spec=aiplatform_v1.MachineSpec(
            machine_type="a2-highgpu-1g",
            accelerator_type=aiplatform_v1.AcceleratorType.NVIDIA_TESLA_A100,
            accelerator_count=1),
        replica_count=3, container_spec=aiplatform_v1.ContainerSpec(image_uri="r/i:1"))
    rest = json_format.MessageToDict(aiplatform_v1.WorkerPoolSpec.pb(job))
    assert rest["replicaCount"] == "3"  # int64 in JSON
    (pool,) = parse_pools([rest])
    assert (pool.machine, pool.accelerator, pool.gpus_per_machine, pool.replicas,
            pool.image) == ("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, 3, "r/i:1")
    cpu = WorkerPool.from_api({"machineSpec": {"machineType": "n1-standard-4",
                                               "acceleratorType":
                                               "ACCELERATOR_TYPE_UNSPECIFIED"},
                               "replicaCount": "2"}, 1)
    assert (cpu.accelerator, cpu.gpus_per_machine, cpu.replicas) == ("", 0, 2)


def test_a_pool_not_yet_checked_reads_as_unusable_rather_than_failing():
    (pool,) = parse_pools([{"machine_spec": "n1", "replica_count": "many"}])
    assert (pool.machine, pool.replicas, pool.gpus_per_machine) == ("", 0, 0)
