"""The training launcher against the fake Google APIs: configurations of a few GPU pools,
the launcher's settings for one, with a clock that moves only when the launcher waits (so
an hour's queue takes no time)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from google.cloud import aiplatform_v1, cloudquotas_v1

from components import images
from components.capacity.job_records import job_labels
from components.capacity.launcher import Launch
from components.capacity.vertex_launch import quota_checker
from components.gpu.alternatives import check_alternatives
from components.training.vertex_job import custom_job, custom_job_spec, trainer_flags
from pipelines.config_loading import load_config
from tests.support.google_fakes import rest_client
from tests.support.vertex_emulator.apis import _tag_name

REPO = "us-central1-docker.pkg.dev/my-proj/ml-images"
T4 = {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
      "accelerator_count": 1}
L4 = {"machine_type": "g2-standard-8", "accelerator_type": "NVIDIA_L4", "accelerator_count": 1}
A100 = {"machine_type": "a2-highgpu-1g", "accelerator_type": "NVIDIA_TESLA_A100",
        "accelerator_count": 1}


def pools(machine: dict[str, Any], workers: int = 1) -> list[dict[str, Any]]:
    """A chief and `workers` workers of one machine."""
    return [{"machine_spec": dict(machine), "replica_count": 1},
            {"machine_spec": dict(machine), "replica_count": workers}]


def config(**vertex: Any) -> Any:
    """The project's configuration in us-central1 with these `vertex` settings."""
    return load_config(overrides={"vertex": {
        "project": "my-proj", "region": "us-central1", "pipeline_root": "gs://pipelines/root",
        "image_repository": REPO, **vertex}})


class FakeTime:
    """Wall-clock seconds that start now and move by what the launcher sleeps; sleeps of
    more than `record_above` seconds are recorded (the rounds' back-off, not the looks
    every 20 s); each sleep also waits `real_sleep` real seconds."""

    def __init__(self, record_above: float = 100.0, real_sleep: float = 0.0):
        self.now = time.time()
        self.sleeps: list[float] = []
        self.record_above = record_above
        self.real_sleep = real_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if seconds > self.record_above:
            self.sleeps.append(seconds)
        if self.real_sleep:
            time.sleep(self.real_sleep)


def pushed_images(apis: Any) -> dict[str, dict[str, str]]:
    """The project's images, pushed to the fake Artifact Registry (jobs can pull them)."""
    found = {}
    for image in images.PROJECT_IMAGES:
        digest = "sha256:" + "1" * 64
        tag = _tag_name(f"{REPO}/{image.name}:pushed")
        apis.tags[tag] = f"{tag.split('/tags/')[0]}/versions/{digest}"
        found[image.key] = {"reference": f"{REPO}/{image.name}@{digest}"}
    return found


def missing_images() -> dict[str, dict[str, str]]:
    """The project's images by a digest the fake cannot pull (a job that gets machines
    fails at once, as a job whose image is missing does)."""
    return {i.key: {"reference": f"{REPO}/{i.name}@sha256:{'0' * 64}"}
            for i in images.PROJECT_IMAGES}


def launch_settings(apis: Any, cfg: Any, *, pulled: dict | None = None,
                    command: list[str] | None = None, fake_time: FakeTime | None = None,
                    watch: dict | None = None, **how: Any):
    """`cfg`'s checked alternatives and a `Launch` of them against the fake.

    Args:
        pulled: The images the jobs name (`missing_images()` when None).
        command: What every replica runs instead of the trainer (e.g. ["true"]: it
            succeeds at once).
        fake_time: The clock and sleep (a new `FakeTime` when None).
        watch: `Watch` fields besides the clock.
        how: `Launch` fields.

    Returns:
        (alternatives, settings, log lines, the FakeTime).
    """
    checked = check_alternatives(cfg.vertex, cfg.training).raise_for_errors()
    references = missing_images() if pulled is None else pulled

    def make_job(alternative):
        spec = custom_job_spec(alternative.pools, references,
                               dataset_path="/gcs/d", output_uri="gs://b/job",
                               output_path="/gcs/b/job",
                               trainer_args=trainer_flags(cfg.training,
                                                          alternative.plan.to_dict()))
        job = custom_job(spec, cfg.vertex, alternative.scheduling_strategy,
                         labels=job_labels(cfg.vertex.labels, alternative.index))
        for pool in job.job_spec.worker_pool_specs:
            if command is not None and pool.container_spec.image_uri:
                pool.container_spec.command, pool.container_spec.args = command, []
        return job

    lines: list[str] = []
    fake_time = fake_time or FakeTime()
    client = rest_client(aiplatform_v1.JobServiceClient, apis)
    defaults = {"quota_check": quota_checker(rest_client(cloudquotas_v1.CloudQuotasClient, apis),
                                             "my-proj", lines.append),
                "rounds": cfg.vertex.capacity_rounds,
                "backoff_seconds": float(cfg.vertex.capacity_backoff[:-1]),
                "queue_limit_seconds": float(cfg.vertex.queue_limit[:-1])}
    settings = Launch("my-proj", make_job, lambda region: client, log=lines.append,
                      **{**defaults, **how})
    settings.watch = dataclasses.replace(
        settings.watch, **{"poll_seconds": 20.0, "sleep": fake_time.sleep,
                           "clock": fake_time.clock, **(watch or {})})
    return checked.alternatives, settings, lines, fake_time
