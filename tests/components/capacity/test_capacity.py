"""GPU capacity: fallback configurations, the quota pre-flight, and the training launcher
that moves on after a stock-out or a quota refusal (and only then).

The quota and launcher tests run Google's own clients (Cloud Quotas, Vertex AI's
JobServiceClient, REST) against the fake APIs on loopback, which answer stock-outs and
quota refusals as Vertex AI does; the whole pipeline's fallback is in
tests/pipelines/vertex/test_emulated_run.py.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1, cloudquotas_v1

from components.capacity import quotas
from components.capacity.launcher import (
    Launch,
    NoCapacityError,
    TrainingJobError,
    capacity_reason,
    launch,
)
from components.gpu.alternatives import (
    batch_lines,
    check_alternatives,
    input_pipelines_of,
    replicas_in_sync,
)
from components.gpu.worker_pool import parse_pools
from pipelines.cli import main
from pipelines.config import ConfigError
from pipelines.config_loading import load_config
from pipelines.vertex import capacity as preflight
from pipelines.vertex.clients import Clients
from tests.support.facts import figures, missing
from tests.support.google_fakes import iam_clients, rest_client
from tests.support.launches import A100, L4, T4, config, launch_settings, pools
from tests.support.vertex_emulator.apis import CustomJob

# --- Alternatives --------------------------------------------------------------------------


def test_a_fallback_keeps_what_it_leaves_out_and_gets_its_own_plan():
    cfg = config(fallbacks=[{"region": "us-east4", "worker_pool_specs": pools(L4, 2)},
                            {"scheduling_strategy": "SPOT"}])
    checked = check_alternatives(cfg.vertex, cfg.training)
    assert checked.ok
    primary, l4, spot = checked.alternatives
    assert [(a.label, a.region, a.scheduling_strategy) for a in checked.alternatives] == [
        ("primary", "us-central1", "STANDARD"), ("fallbacks[0]", "us-east4", "STANDARD"),
        ("fallbacks[1]", "us-central1", "SPOT")]
    assert spot.worker_pool_specs == primary.worker_pool_specs  # the primary's pools
    assert (primary.plan.accelerator, primary.plan.mixed_precision) == \
        ("NVIDIA_TESLA_T4", "float16")
    assert (l4.plan.accelerator, l4.plan.mixed_precision) == ("NVIDIA_L4", "bfloat16")
    # 2 training machines, then 3: shards in multiples of 6 serve both.
    assert input_pipelines_of(checked.alternatives) == 6
    assert [replicas_in_sync(a) for a in checked.alternatives] == [2, 3, 2]
    # 32 per replica: 64 and 96 a step; the learning rate unscaled.
    assert [figures(line)[-2:] for line in batch_lines(checked.alternatives,
                                                       cfg.training)[:2]] == [
        [64, 0.003], [96, 0.003]]
    scaled = load_config(overrides={"training": {"scale_learning_rate": True},
                                    "vertex": {"fallbacks": [{"worker_pool_specs":
                                                              pools(L4, 2)}]}})
    # The linear scaling rule: 0.003 x 3 replicas.
    line = batch_lines(check_alternatives(scaled.vertex, scaled.training).alternatives,
                       scaled.training)[1]
    assert figures(line.split(" (")[0])[-2:] == [96, 0.009] and "scale_learning_rate" in line


def test_an_invalid_alternative_is_refused_naming_its_index(tmp_path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"vertex": {"fallbacks": [
        {"worker_pool_specs": pools(A100)},
        {"region": "us-east4", "worker_pool_specs": pools({**L4, "accelerator_count": 3})}]}}))
    assert main(["validate-gpu", "--config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "alternative 0 (primary): valid" in out and "alternative 1 (fallbacks[0]): valid" \
        in out and "alternative 2 (fallbacks[1]): invalid" in out
    errors = [line for line in out.splitlines() if line.startswith("  - ")]
    assert not missing(errors[0], "fallbacks[1]", "worker_pool_specs[0] (chief)",
                       "machine_spec.accelerator_count is 3", "g2-standard-8 takes 1 x NVIDIA_L4")
    assert len(errors) == 2 and errors[1].startswith("  - fallbacks[1]: worker_pool_specs[1]")
    assert main(["validate-gpu", "--config", str(path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [a["ok"] for a in report["alternatives"]] == [True, True, False]
    assert report["alternatives"][1]["training_plan"]["accelerator"] == "NVIDIA_TESLA_A100"
    # The valid ones' input pipelines (2 training machines each), also under the old key.
    assert report["input_pipelines"] == report["shard_multiple"] == 2
    with pytest.raises(ConfigError, match=r"vertex\.fallbacks\[1\]: worker_pool_specs\[0\]"):
        load_config(path)


def test_a_repeated_configuration_and_a_persistent_resource_are_refused():
    with pytest.raises(ConfigError) as raised:
        config(fallbacks=[{"scheduling_strategy": "STANDARD"}])
    assert "vertex.fallbacks[0] is the same configuration as primary" in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        config(fallbacks=[{"region": "us-east4"}], persistent_resource_id="fast-pool")
    assert "persistent resource's machines are reserved" in str(raised.value)
    with pytest.raises(ConfigError, match=r"unknown field vertex\.fallbacks\[0\]\.timeout; "
                                          r"valid fields of vertex\.fallbacks\[0\] are region, "
                                          "reservation, scheduling_strategy, "
                                          "worker_pool_specs"):
        config(fallbacks=[{"timeout": "1s"}])


# --- Quotas ----------------------------------------------------------------------------------


def test_what_a_configuration_needs_of_each_quota():
    gpus, cpus = quotas.needs(parse_pools(pools(T4, 3)), "us-central1", "STANDARD")
    assert (gpus.metric, gpus.amount) == (
        "aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus", 4)
    # A GPU machine's vCPUs count too (users' 429s name both quotas for n1 + T4).
    assert (cpus.metric, cpus.amount) == (
        "aiplatform.googleapis.com/custom_model_training_cpus", 32)  # 1 x 8 + 3 x 8 vCPUs
    # Spot and DWS count against the preemptible quotas; parallel trials multiply.
    for strategy in ("SPOT", "FLEX_START"):
        gpus, cpus = quotas.needs(parse_pools(pools(A100)), "us-central1", strategy, copies=3)
        assert (gpus.metric, gpus.amount) == ("aiplatform.googleapis.com/custom_model_"
                                              "training_preemptible_nvidia_a100_gpus", 6)
        assert (cpus.metric, cpus.amount) == ("aiplatform.googleapis.com/custom_model_"
                                              "training_preemptible_a2_cpus", 72)
        assert gpus.what.endswith("x 3 parallel trials")
    # CPU-only pools: their vCPUs, by machine family.
    layout = [*pools(T4), {"machine_spec": {"machine_type": "n1-highmem-8"}, "replica_count": 2},
              {"machine_spec": {"machine_type": "c2-standard-16"}, "replica_count": 1}]
    found = {n.metric.rsplit("/", 1)[1]: n.amount
             for n in quotas.needs(parse_pools(layout), "us-central1", "STANDARD")}
    assert found == {"custom_model_training_nvidia_t4_gpus": 2,
                     "custom_model_training_cpus": 32, "custom_model_training_c2_cpus": 16}
    # 8 x a2-highgpu-8g: 64 A100s and 768 vCPUs (the catalog's 96 each, not the name's 8).
    eight = [{"machine_spec": {"machine_type": "a2-highgpu-8g", "accelerator_type":
                               "NVIDIA_TESLA_A100", "accelerator_count": 8}, "replica_count": 1},
             {"machine_spec": {"machine_type": "a2-highgpu-8g", "accelerator_type":
                               "NVIDIA_TESLA_A100", "accelerator_count": 8}, "replica_count": 7}]
    assert {n.metric.rsplit("_", 2)[-2]: n.amount
            for n in quotas.needs(parse_pools(eight), "us-central1", "STANDARD")} == \
        {"a100": 64, "a2": 768}


def test_a_cpu_quota_the_project_does_not_list_is_not_known_never_refused():
    [_, cpus] = quotas.check(quotas.needs(parse_pools(pools(A100)), "us-central1", "STANDARD"), {})
    assert cpus.limit is None and not cpus.refused
    assert cpus.describe("my-proj").endswith("the project has no such quota, not checked")


def _clients(apis):
    return Clients(quotas=rest_client(cloudquotas_v1.CloudQuotasClient, apis),
                   jobs=rest_client(aiplatform_v1.JobServiceClient, apis))


def test_submit_refuses_a_quota_below_the_need_with_the_numbers(apis):
    from pipelines.vertex import runs

    apis.quotas = {"custom_model_training_nvidia_t4_gpus": {"us-central1": 1,
                                                            "us-east4": 16}}
    cfg = config(fallbacks=[{"region": "us-east4"}])
    clients = iam_clients(apis)
    clients.quotas, clients.jobs = _clients(apis).quotas, _clients(apis).jobs
    with pytest.raises(quotas.QuotaError) as raised:
        runs.submit(cfg, dry_run=False, clients=clients, credentials=AnonymousCredentials(),
                    log=print)
    message = str(raised.value)
    assert not missing(message, "aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus",
                       "us-central1", "needs 2", "allows 1")
    assert "https://console.cloud.google.com/iam-admin/quotas?project=my-proj" in message
    assert "CustomModelTrainingNvidiaT4GpusPerProjectPerRegion" in message
    assert "nothing was uploaded, built or submitted" in message
    # Cloud Quotas was asked, as its own request type; nothing was uploaded or built.
    (listed,) = apis.recorded(r"/quotaInfos$", method="GET")
    assert listed.path == "/v1/projects/my-proj/locations/global/services/" \
                          "aiplatform.googleapis.com/quotaInfos"
    assert apis.recorded(r"/builds$") == [] and apis.recorded(r"/customJobs$") == []
    assert not [r for r in apis.requests if "upload" in r.path]


def test_a_fallback_without_quota_and_jobs_in_the_way_are_warnings(apis):
    apis.quotas = {"custom_model_training_nvidia_t4_gpus": {"us-central1": 3},
                   "custom_model_training_nvidia_l4_gpus": {"us-central1": 0}}
    # Another team's job waits for 2 T4s in the region.
    body = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {
        "machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4",
        "acceleratorCount": 1}, "replicaCount": 2}]}}
    name = "projects/my-proj/locations/us-central1/customJobs/99"
    apis.jobs[name] = CustomJob(name, {**body, "name": name}, [], state="JOB_STATE_PENDING")
    lines: list[str] = []
    found = preflight.check_capacity(config(fallbacks=[{"worker_pool_specs": pools(L4)}]),
                                     _clients(apis), dry_run=False, log=lines.append)
    # The CPU quota is not among the project's: not known, not refused.
    assert [(q.limit, q.in_use, q.busy) for q in found] == [(3, 2, True), (None, 16, False)]
    assert any(line.startswith("warning: quota: primary: ") and "2 in use by active "
               "CustomJobs" in line for line in lines)
    assert any(line.startswith("warning: quota: fallbacks[0] cannot run while ")
               and "but the quota allows 0" in line for line in lines)
    (listed,) = apis.recorded(r"/customJobs$", method="GET")
    assert listed.query["filter"] == ['state="JOB_STATE_QUEUED" OR state="JOB_STATE_PENDING" '
                                      'OR state="JOB_STATE_RUNNING"']


def test_the_deploy_stages_serving_quota_is_read_with_the_training_quota(apis, capsys):
    """A canary the serving quota refuses is a warning at submit (the deploy stage reads
    the quota again and keeps the champion serving); the dry run names the need."""
    apis.quotas = {"custom_model_training_nvidia_t4_gpus": {"us-central1": 8},
                   "custom_model_serving_nvidia_t4_gpus": {"us-central1": 1}}
    cfg = config(deploy={"endpoint": "serving", "machine_type": "n1-standard-8",
                         "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 1,
                         "max_replica_count": 2})
    lines: list[str] = []
    preflight.check_capacity(cfg, _clients(apis), dry_run=False, log=lines.append)
    (warned,) = [line for line in lines if line.startswith("warning: quota: ")]
    assert not missing(warned, "canary", "custom_model_serving_nvidia_t4_gpus", "needs 2",
                       "allows 1")
    preflight.check_capacity(cfg, Clients(), dry_run=True, log=print)
    (said,) = [line for line in capsys.readouterr().out.splitlines()
               if "custom_model_serving_cpus" in line]
    assert not missing(said, "canary", "needs 16", "2 x n1-standard-8")


def test_the_dry_run_prints_the_quota_requests_and_sends_none(capsys):
    cfg = config(fallbacks=[{"region": "us-east4"}])
    preflight.check_capacity(cfg, Clients(), dry_run=True, log=print)
    out = capsys.readouterr().out
    # One line per request by default, the bodies with --verbose.
    assert re.search(r"  ListQuotaInfosRequest to projects/my-proj/locations/global/services/"
                     r"aiplatform\.googleapis\.com: \d+ bytes \(--verbose prints it\)", out)
    assert "  ListCustomJobsRequest to projects/my-proj/locations/us-east4: " in out
    preflight.check_capacity(cfg, Clients(), dry_run=True, log=print, verbose=True)
    out = capsys.readouterr().out
    assert '"parent": "projects/my-proj/locations/global/services/aiplatform.googleapis.com"' \
        in out
    assert '"parent": "projects/my-proj/locations/us-east4"' in out
    assert "quota: fallbacks[0] needs 2 of aiplatform.googleapis.com/custom_model_training_" \
           "nvidia_t4_gpus in us-east4" in out


# --- The launcher --------------------------------------------------------------------------


def test_a_stock_out_moves_on_a_short_quota_is_skipped_and_another_failure_stops(apis):
    apis.stockouts = {("n1-standard-8", "us-central1")}
    apis.quotas = {"custom_model_training_nvidia_l4_gpus": {"us-central1": 1}}
    cfg = config(fallbacks=[{"worker_pool_specs": pools(L4)}, {"region": "us-west1"}])
    alternatives, how, lines, fake_time = launch_settings(apis, cfg, rounds=3)
    with pytest.raises(TrainingJobError) as raised:
        launch(alternatives, how)
    # Not a capacity failure: the same image would fail anywhere, so nothing more is tried.
    assert "(fallbacks[1]) ended JOB_STATE_FAILED: image" in str(raised.value)
    assert "cannot be pulled" in str(raised.value)
    created = [aiplatform_v1.CreateCustomJobRequest(parent=r.path[4:-11]).parent
               for r in apis.recorded(r"/customJobs$")]
    assert created == ["projects/my-proj/locations/us-central1",
                       "projects/my-proj/locations/us-west1"]
    assert fake_time.sleeps == []
    assert any("primary in us-central1: stock-out" in line and "Resources are insufficient "
               "in region: us-central1" in line for line in lines)
    assert any("fallbacks[0] in us-central1: skipped: aiplatform.googleapis.com/custom_model"
               "_training_nvidia_l4_gpus in us-central1: needs 2" in line for line in lines)
    # The request is the library's own type, with the fallback's settings.
    sent = aiplatform_v1.CustomJob.from_json(json.dumps(apis.recorded(r"/customJobs$")[1].body))
    assert sent.job_spec.scheduling.strategy.name == "STANDARD"
    assert sent.job_spec.worker_pool_specs[0].machine_spec.machine_type == "n1-standard-8"


def test_vertex_ai_refusing_for_quota_moves_on_and_rounds_back_off(apis):
    # The quotas cannot be read (the launcher then lets Vertex AI decide): Vertex AI
    # refuses the T4 job with 429, and L4 is stocked out, in both rounds.
    apis.quotas = {"custom_model_training_nvidia_t4_gpus": {"us-central1": 1}}
    apis.stockouts = {("NVIDIA_L4", "us-central1")}
    cfg = config(fallbacks=[{"worker_pool_specs": pools(L4)}], capacity_backoff="300s")
    alternatives, how, lines, fake_time = launch_settings(apis, cfg, rounds=2,
                                                          quota_check=lambda alternative: "")
    with pytest.raises(NoCapacityError) as raised:
        launch(alternatives, how)
    attempts = str(raised.value).splitlines()[1:5]
    assert [re.sub(r" \(projects/[^)]*\)", "", a).split(": ")[:2] for a in attempts] == [
        ["  - primary in us-central1", "quota"],
        ["  - fallbacks[0] in us-central1", "stock-out"]] * 2
    assert attempts[0].endswith(": The following quota metrics exceed quota limits: "
                                "aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus")
    outcomes = [line.split(": ")[1].split(" (")[0] for line in lines
                if line.startswith("capacity: ") and " in us-central1: " in line]
    assert outcomes == ["primary in us-central1", "fallbacks[0] in us-central1"] * 2
    assert fake_time.sleeps == [300.0]
    assert len(apis.recorded(r"/customJobs$")) == 4  # two refused, two created and failed


class _RanThenStockedOut:
    """A JobServiceClient whose job ran, then failed for capacity (a Spot VM preempted
    once Vertex AI's own restarts were spent)."""

    def __init__(self):
        self.created = 0

    def create_custom_job(self, parent, custom_job):
        self.created += 1
        return aiplatform_v1.CustomJob(name=f"{parent}/customJobs/1")

    def get_custom_job(self, name, timeout=None):
        job = aiplatform_v1.CustomJob(name=name, state="JOB_STATE_FAILED")
        job.start_time = "2026-11-25T03:00:00Z"
        job.error.code, job.error.message = 8, "Resources are insufficient in region: x"
        return job


def test_a_failure_after_the_job_ran_is_not_retried_elsewhere():
    cfg = config(scheduling_strategy="SPOT", fallbacks=[{"region": "us-east4"}])
    client = _RanThenStockedOut()
    alternatives = check_alternatives(cfg.vertex, cfg.training).alternatives
    how = Launch("my-proj", lambda a: aiplatform_v1.CustomJob(), lambda r: client,
                 lambda a: "", print, rounds=2)
    how.watch.sleep = lambda s: None
    with pytest.raises(TrainingJobError, match="after it ran"):
        launch(alternatives, how)
    assert client.created == 1


@pytest.mark.parametrize(("message", "reason"), [
    ("Resources are insufficient in region: us-central1. Please try a different region.",
     "stock-out"),
    ("The following quota metrics exceed quota limits: aiplatform.googleapis.com/"
     "custom_model_training_nvidia_l4_gpus", "quota"),
    ("replica workerpool0-0 exited with 1: ValueError", ""),
    ("image us-docker.pkg.dev/x@sha256:00 cannot be pulled", ""),
])
def test_only_capacity_messages_are_capacity(message, reason):
    assert capacity_reason(message) == reason


def test_a_cancelled_step_cancels_its_running_job():
    """Vertex AI Pipelines stops a cancelled run's step with SIGTERM (as gcpc's launchers
    expect, container/utils/execution_context.py): the job it follows is cancelled too."""
    import os
    import signal

    from components.capacity.following import cancelled_with_the_step

    class Jobs:
        cancelled: list[str] = []

        def cancel_custom_job(self, name):
            self.cancelled.append(name)

    jobs, before = Jobs(), signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit, match="cancelled: the training CustomJob j/1 was cancelled"):
        with cancelled_with_the_step(jobs, "j/1"):
            os.kill(os.getpid(), signal.SIGTERM)
    assert jobs.cancelled == ["j/1"]
    assert signal.getsignal(signal.SIGTERM) is before  # the step's own handler is back
