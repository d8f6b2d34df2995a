"""The training job's accelerator use read from Cloud Monitoring after the job: the real
monitoring client against the emulated Cloud Monitoring, which serves Vertex AI's series
per replica and refuses what Cloud Monitoring refuses."""

from __future__ import annotations

import json

import pytest
from google.cloud import aiplatform_v1

from components import cloud_monitoring
from components.training import efficiency, job_utilization
from tests.support.google_fakes import monitoring_client
from tests.support.vertex_emulator.apis import CustomJob, FakeGoogleApis
from trainer.common.cloud_calls import CloudCallError

NAME = "projects/my-proj/locations/us-central1/customJobs/4411643896526798848"
START = "2026-11-26T10:00:00Z"


def _job(end: str, accelerator: str = "NVIDIA_TESLA_T4", workers: int = 1) -> dict:
    machine = {"machineType": "n1-standard-8",
               **({"acceleratorType": accelerator, "acceleratorCount": 1} if accelerator
                  else {})}
    pools = [{"machineSpec": machine, "replicaCount": "1"}]
    if workers:
        pools.append({"machineSpec": machine, "replicaCount": str(workers)})
    return {"name": NAME, "startTime": START, "endTime": end,
            "jobSpec": {"workerPoolSpecs": pools}, "state": "JOB_STATE_SUCCEEDED"}


@pytest.fixture
def apis(tmp_path):
    with FakeGoogleApis(tmp_path, {}) as fake:
        yield fake


def test_every_replica_s_accelerator_use_is_read_for_the_job_s_time(apis):
    # 150 s of job: samples at 0, 60 and 120 s, every other one 0.1 lower.
    job = _job("2026-11-26T10:02:30Z")
    apis.jobs[NAME] = CustomJob(NAME, job, [], state="JOB_STATE_SUCCEEDED")
    apis.endpoints.accelerator_use = {"workerpool1-0": (0.5, 0.2)}
    found = job_utilization.read_job(monitoring_client(apis), job)
    assert found["replicas"] == {
        "chief-0": {"utilization": {"mean_percent": 83.7, "max_percent": 87.0, "samples": 3},
                    "memory": {"mean_percent": 41.7, "max_percent": 45.0, "samples": 3}},
        "worker-0": {"utilization": {"mean_percent": 46.7, "max_percent": 50.0, "samples": 3},
                     "memory": {"mean_percent": 16.7, "max_percent": 20.0, "samples": 3}}}
    (accelerator, memory) = [r.query for r in apis.recorded("timeSeries$", method="GET")]
    assert accelerator["filter"] == [
        'metric.type="ml.googleapis.com/training/accelerator/utilization" AND '
        'resource.type="cloudml_job" AND resource.labels.job_id="4411643896526798848"']
    assert accelerator["interval.startTime"] == ["2026-11-26T10:00:00.000000Z"]
    assert accelerator["interval.endTime"] == ["2026-11-26T10:02:31.000000Z"]
    assert "memory/utilization" in memory["filter"][0]
    assert job_utilization.lines(found)[1] == (
        "Cloud Monitoring: worker-0: GPU busy 47% (highest 50%, 3 sample(s)), GPU memory 17% "
        "(highest 20%, 3 sample(s))")


def test_a_job_of_one_replica_is_the_single_replica_of_the_efficiency_series(apis):
    job = _job("2026-11-26T10:00:20Z", workers=0)
    apis.jobs[NAME] = CustomJob(NAME, job, [], state="JOB_STATE_SUCCEEDED")
    found = job_utilization.read_job(monitoring_client(apis), job)
    assert set(found["replicas"]) == {"single-0"}
    assert found["replicas"]["single-0"]["utilization"]["samples"] == 1


def test_machines_without_accelerators_are_not_read(apis):
    found = job_utilization.read_job(monitoring_client(apis),
                                     _job("2026-11-26T10:05:00Z", accelerator=""))
    assert found["unavailable"] == "the job's machines have no accelerator"
    assert apis.recorded("timeSeries$", method="GET") == []


def test_task_names_in_both_forms_name_the_efficiency_series_replicas():
    assert job_utilization.replica_of("workerpool0-0", 3) == "chief-0"
    assert job_utilization.replica_of("workerpool1-1", 3) == "worker-1"
    assert job_utilization.replica_of("workerpool2-0", 4) == "ps-0"
    assert job_utilization.replica_of("master-replica-0", 2) == "chief-0"
    assert job_utilization.replica_of("worker-replica-0", 2) == "worker-0"


def test_cloud_monitoring_refuses_a_filter_without_one_metric_type(apis):
    with pytest.raises(CloudCallError, match="exactly one metric type"):
        cloud_monitoring.list_series(monitoring_client(apis), "my-proj",
                                     'resource.type="cloudml_job"', 0, 60, "everything")


def test_the_step_tells_the_figures_and_the_report_puts_them_beside_the_sampler_s(apis, tmp_path):
    job = _job("2026-11-26T10:01:10Z")
    apis.jobs[NAME] = CustomJob(NAME, job, [], state="JOB_STATE_SUCCEEDED")
    said = []
    proto = aiplatform_v1.CustomJob.from_json(json.dumps(job))
    job_utilization.tell(proto, str(tmp_path), said.append, client=monitoring_client(apis))
    assert said[0].startswith("Cloud Monitoring: chief-0: GPU busy 82% (highest 87%, 2 ")
    stored = json.loads((tmp_path / job_utilization.FILE).read_text())
    assert job_utilization.load(str(tmp_path)) == stored
    figures = {"cluster": {"images_per_second": 10.0, "gpu_hours": 0.0},
               "replicas": {}, "cloud_monitoring": stored}
    assert efficiency.metrics(figures)["cloud_monitoring_gpu_percent"] == 82.0


def test_a_reading_that_fails_is_told_and_never_fails_the_step(tmp_path):
    class Unreachable:
        def list_time_series(self, request):
            from google.api_core import exceptions
            raise exceptions.ServiceUnavailable("no route to monitoring.googleapis.com")

    said = []
    proto = aiplatform_v1.CustomJob.from_json(json.dumps({**_job(""), "endTime": None}))
    assert job_utilization.tell(proto, str(tmp_path), said.append, client=Unreachable()) is None
    assert said[0].startswith("Cloud Monitoring: the job's accelerator use not read (")
    assert not (tmp_path / job_utilization.FILE).exists()


def test_records_after_the_job_are_written_where_no_directory_was_or_named_in_a_line(
        apis, tmp_path):
    """After a job SUCCEEDED: its directory absent (it wrote nothing) is created for the
    records; a directory that cannot exist costs one line per record, never the step."""
    from google.auth.credentials import AnonymousCredentials

    from components.training.after_job import record_all

    job = _job("2026-11-26T10:02:30Z")
    apis.jobs[NAME] = CustomJob(NAME, job, [], state="JOB_STATE_SUCCEEDED")
    jobs = aiplatform_v1.JobServiceClient(
        transport="rest", client_options={"api_endpoint": apis.url},
        credentials=AnonymousCredentials())
    finished = aiplatform_v1.CustomJob.from_json(json.dumps(job))
    record = {"attempts": [{"job": NAME, "region": "us-central1", "outcome": "trained"}]}
    lines: list[str] = []

    def records(job_dir):
        return record_all(record, finished, {}, str(job_dir), lines.append,
                          cost_client=lambda region: jobs,
                          monitoring_client=monitoring_client(apis))

    made = records(tmp_path / "nothing-written" / "training_job")
    assert set(made) == {"cost", "accelerator use"} and None not in made.values()
    written = sorted(p.name for p in (tmp_path / "nothing-written" / "training_job").iterdir())
    assert written == ["cloud_monitoring.json", "cost.json"]
    lines.clear()
    (tmp_path / "a-file").write_text("")
    made = records(tmp_path / "a-file" / "training_job")
    assert made == {"cost": None, "accelerator use": None}
    assert [line.split(" (")[0] for line in lines if line.startswith("training:")] == [
        f"training: the cost record of {NAME} was not written",
        f"training: the accelerator use record of {NAME} was not written"]
    assert all(line.endswith("the job's outcome stands") for line in lines
               if line.startswith("training:"))
