"""What long jobs meet on Vertex AI, against the fake APIs through Vertex AI's own REST
client: passing errors while a job is followed, a step started again, a queue that does
not move, and a FLEX_START wait that expires (in either form). The whole pipeline's
version is in tests/pipelines/vertex/test_emulated_run.py."""

from __future__ import annotations

import json
import re

import pytest
from google.cloud import aiplatform_v1

from components.capacity import job_records
from components.capacity.following import LostJobError, console_link
from components.capacity.launcher import launch, summary
from tests.support.google_fakes import rest_client
from tests.support.launches import (
    A100,
    L4,
    FakeTime,
    config,
    launch_settings,
    pools,
    pushed_images,
)

RUN = {"vertex-ai-pipelines-run-billing-id": "8123456789", "vertex-ai-pipelines-run-id": "x"}


def created(apis):
    return [aiplatform_v1.CustomJob.from_json(json.dumps(r.body))
            for r in apis.recorded(r"/customJobs$")]


def test_a_job_followed_through_503s_a_timeout_and_a_dropped_connection_trains_once(apis):
    apis.get_faults = ["503", "503", "503", "drop", "timeout", "500", "504"]
    apis.fault_delay = 1.0
    alternatives, how, lines, _ = launch_settings(
        apis, config(), pulled=pushed_images(apis), command=["true"],
        watch={"request_timeout": 0.3})
    done = launch(alternatives, how)
    assert done.job.state.name == "JOB_STATE_SUCCEEDED"
    assert len(created(apis)) == 1 and apis.get_faults == []
    retried = [line for line in lines if line.startswith("training: looking at ")]
    assert [line.split("failed (")[1].split(":")[0] for line in retried] == [
        "ServiceUnavailable", "ServiceUnavailable", "ServiceUnavailable", "ConnectionError",
        "ReadTimeout", "InternalServerError", "GatewayTimeout"]
    assert retried[1].endswith("again in 2 s (giving up after 600 s)")  # doubled


def test_a_job_lost_for_longer_than_the_bound_is_cancelled_and_named(apis):
    apis.get_faults = ["503"] * 40
    queued = ("n1-standard-8", "us-central1")
    apis.queued = {queued}  # it would wait for ever
    alternatives, how, lines, fake_time = launch_settings(apis, config(),
                                                          pulled=pushed_images(apis))
    with pytest.raises(LostJobError) as raised:
        launch(alternatives, how)
    (job,) = apis.jobs.values()
    assert job.settled() == "JOB_STATE_CANCELLED"
    message = str(raised.value)
    assert message.startswith(f"the training CustomJob {job.name} could not be looked at for "
                              "6") and "ServiceUnavailable: 503" in message
    assert "it was cancelled so that nothing trains or bills unseen" in message
    assert console_link(job.name) in message
    assert console_link(job.name) == ("https://console.cloud.google.com/agent-platform/"
                                      "locations/us-central1/training/1?project=my-proj")
    assert len(apis.recorded(r":cancel$")) == 1


def test_every_job_carries_the_runs_labels_and_is_named_at_once(apis, tmp_path, monkeypatch):
    monkeypatch.setenv(job_records.RUN_LABELS_ENV, json.dumps(RUN))
    path = tmp_path / "outputs" / "gcp_resources"
    cfg = config(labels={"team": "vision", "vertex-ai-pipelines-run-id": "mine"})
    apis.queued = {("n1-standard-8", "us-central1")}

    class CutOff(Exception):
        pass

    def cut_off(seconds):
        raise CutOff  # the step's pod is evicted while it follows the job

    alternatives, how, _, _ = launch_settings(apis, cfg, pulled=pushed_images(apis),
                                              gcp_resources_path=str(path),
                                              watch={"sleep": cut_off})
    with pytest.raises(CutOff):
        launch(alternatives, how)
    (sent,) = created(apis)
    # The run's labels (the user's win a clash, as in gcpc), the step's and the alternative's.
    assert dict(sent.labels) == {"vertex-ai-pipelines-run-billing-id": "8123456789",
                                 "vertex-ai-pipelines-run-id": "mine", "team": "vision",
                                 "gpu-pipeline-step": "training",
                                 "gpu-pipeline-alternative": "0"}
    # gcp_resources names the job already (gcpc's form).
    assert json.loads(path.read_text()) == {"resources": [{
        "resourceType": "CustomJob",
        "resourceUri": "https://us-central1-aiplatform.googleapis.com/v1/"
                       "projects/my-proj/locations/us-central1/customJobs/1"}]}


@pytest.mark.parametrize("found_by", ["gcp_resources", "labels"])
@pytest.mark.slow
def test_a_step_started_again_follows_its_job_and_never_trains_twice(apis, tmp_path,
                                                                     monkeypatch, found_by):
    monkeypatch.setenv(job_records.RUN_LABELS_ENV, json.dumps(RUN))
    path = tmp_path / "gcp_resources"
    apis.queued = {("n1-standard-8", "us-central1")}
    client = rest_client(aiplatform_v1.JobServiceClient, apis)
    cfg = config(fallbacks=[{"worker_pool_specs": pools(L4)}])

    def step(sleep=None):
        """One run of the training step (`sleep` cuts it off)."""
        kept = str(path) if found_by == "gcp_resources" else ""
        alternatives, how, lines, _ = launch_settings(
            apis, cfg, pulled=pushed_images(apis), command=["true"], gcp_resources_path=kept,
            watch={"sleep": sleep} if sleep else None)
        how.find_earlier = lambda: job_records.find_earlier(
            "my-proj", ["us-central1"], lambda region: client, kept, how.log)
        return launch(alternatives, how), lines

    def cut_off(seconds):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        step(cut_off)
    (job,) = apis.jobs.values()
    assert job.state == "JOB_STATE_QUEUED"
    done, lines = step(lambda seconds: apis.queued.clear())  # then the machines come
    assert len(created(apis)) == 1  # followed, not created again
    assert done.job.name == job.name and done.attempts[0].resumed
    assert any("created by an earlier run of this step, is JOB_STATE_QUEUED: following it"
               in line for line in lines)
    if found_by == "labels":
        listed = apis.recorded(r"/customJobs$", method="GET")[-1]
        assert listed.query["filter"] == [
            'labels.vertex-ai-pipelines-run-billing-id="8123456789" AND '
            'labels.gpu-pipeline-step="training"']
    # A third run finds the job finished: it trained, nothing more is created.
    again, _ = step()
    assert len(created(apis)) == 1 and again.job.name == job.name
    assert summary(again.record()).endswith("the job an earlier run of this step created")


@pytest.mark.slow
def test_a_job_queued_past_the_limit_is_cancelled_and_the_next_alternative_trains(apis):
    apis.queued = {("n1-standard-8", "us-central1")}
    cfg = config(fallbacks=[{"worker_pool_specs": pools(L4)}], queue_limit="3600s")
    alternatives, how, lines, fake_time = launch_settings(
        apis, cfg, pulled=pushed_images(apis), command=["true"])
    done = launch(alternatives, how)
    first, second = apis.jobs.values()
    assert first.settled() == "JOB_STATE_CANCELLED" and second.state == "JOB_STATE_SUCCEEDED"
    record = done.record()
    assert [(a["label"], a["outcome"]) for a in record["attempts"]] == [
        ("primary", "queued"), ("fallbacks[0]", "trained")]
    assert record["attempts"][0]["reason"] == (
        "no machines 3600 s after it was created (vertex.queue_limit); cancelled")
    assert any(re.search(r"is still JOB_STATE_QUEUED 36\d\d s after it was created \(vertex"
                         r"\.queue_limit 3600s\); it was cancelled", line) for line in lines)


@pytest.mark.slow
def test_the_last_alternative_waits_in_the_queue(apis):
    apis.queued = {("n1-standard-8", "us-central1")}
    looks = []

    def patient(seconds):
        looks.append(seconds)
        if len(looks) > 400:  # 8000 s of looks every 20 s, past the 3600 s limit
            raise TimeoutError("still waiting")

    alternatives, how, _, _ = launch_settings(apis, config(capacity_rounds=1),
                                              pulled=pushed_images(apis),
                                              watch={"sleep": patient})
    with pytest.raises(TimeoutError):
        launch(alternatives, how)
    assert apis.recorded(r":cancel$") == []  # nothing else to try: it may as well wait


@pytest.mark.parametrize("expiry", ["EXPIRED", "FAILED"])
@pytest.mark.slow
def test_a_flex_start_wait_that_expires_moves_on_in_either_form(apis, expiry):
    """Which state a FLEX_START job ends in when its max_wait_duration passes is not
    documented; both are handled. The queue limit never cuts its wait short."""
    apis.queued, apis.flex_expiry = {("a2-highgpu-1g", "us-central1")}, expiry
    cfg = config(worker_pool_specs=pools(A100), scheduling_strategy="FLEX_START",
                 max_wait_duration="1s", queue_limit="1s",
                 fallbacks=[{"worker_pool_specs": pools(L4), "scheduling_strategy": "STANDARD"}])
    alternatives, how, _, _ = launch_settings(
        apis, cfg, pulled=pushed_images(apis), command=["true"],
        fake_time=FakeTime(real_sleep=0.05))
    done = launch(alternatives, how)
    assert [(a.label, a.outcome) for a in done.attempts] == [
        ("primary", "expired"), ("fallbacks[0]", "trained")]
    assert apis.recorded(r":cancel$") == []
    assert created(apis)[0].job_spec.scheduling.max_wait_duration.total_seconds() == 1


def test_vertex_ai_refusing_the_cpu_quota_of_gpu_machines_is_a_quota_refusal(apis):
    # 2 x n1-standard-8 hold 16 vCPUs of custom_model_training_cpus besides their T4s.
    apis.quotas = {"custom_model_training_cpus": {"us-central1": 8}}
    cfg = config(fallbacks=[{"region": "us-west1"}], capacity_rounds=1)
    alternatives, how, lines, _ = launch_settings(apis, cfg, pulled=pushed_images(apis),
                                                  command=["true"],
                                                  quota_check=lambda alternative: "")
    done = launch(alternatives, how)
    refused = done.attempts[0]
    assert (refused.outcome, refused.reason) == (
        "quota", "The following quota metrics exceed quota limits: "
                 "aiplatform.googleapis.com/custom_model_training_cpus")
    # With the quotas read first, the launcher skips it without asking Vertex AI.
    apis.requests.clear()
    alternatives, how, lines, _ = launch_settings(apis, cfg, pulled=pushed_images(apis),
                                                  command=["true"])
    done = launch(alternatives, how)
    assert done.attempts[0].outcome == "skipped"
    assert "custom_model_training_cpus in us-central1: needs 16 (1 x 8 vCPUs of " \
           "n1-standard-8 + 1 x 8 vCPUs of n1-standard-8) but the quota allows 8" \
        in done.attempts[0].reason
    assert len(apis.recorded(r"/customJobs$")) == 1


def test_a_region_without_the_gpu_is_refused_by_stage_1_before_vertex_ai_would(apis):
    """Vertex AI refuses a job whose GPU type the region does not offer, but only once the
    images are built; stage 1 refuses the configuration before anything is spent."""
    from google.api_core import exceptions

    from pipelines.config import ConfigError

    with pytest.raises(ConfigError, match="NVIDIA_TESLA_A100 is not offered in region "
                                          "us-west2; regions offering it: asia-northeast1, "):
        config(region="us-west2", worker_pool_specs=pools(A100))
    # What Vertex AI (the emulated one) says when stage 1 is bypassed.
    alternatives, how, _, _ = launch_settings(apis, config(worker_pool_specs=pools(A100)))
    job = how.make_job(alternatives[0])
    client = rest_client(aiplatform_v1.JobServiceClient, apis)
    with pytest.raises(exceptions.BadRequest, match="NVIDIA_TESLA_A100 is not supported in "
                                                    "region us-west2"):
        client.create_custom_job(parent="projects/my-proj/locations/us-west2", custom_job=job)


def test_the_jobs_gcp_resources_names_are_read_with_their_region(tmp_path):
    """gcpc's form: the CustomJob's REST URI; an entry of another form is not a job to
    follow, and an empty or unreadable file names none."""
    from components.cloud_names import resource_region

    job = "projects/123/locations/us-east1/customJobs/456"
    path = tmp_path / "gcp_resources"
    path.write_text(json.dumps({"resources": [
        {"resourceType": "CustomJob",
         "resourceUri": f"https://us-east1-aiplatform.googleapis.com/v1/{job}"},
        {"resourceType": "CustomJob", "resourceUri": "https://x/v2/customJobs/789"},
        {"resourceType": "BatchPredictionJob",
         "resourceUri": "https://x/v1/projects/1/locations/us-east1/batchPredictionJobs/2"}]}))
    assert job_records.jobs_in_gcp_resources(str(path)) == [job]
    assert resource_region(job) == "us-east1"
    assert resource_region("https://x/v2/customJobs/789") == ""
    path.write_text("not json")
    assert job_records.jobs_in_gcp_resources(str(path)) == []
