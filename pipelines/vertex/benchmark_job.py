"""`gpu-pipeline benchmark` on Vertex AI: one CustomJob of the built trainer image (by
digest) on the primary configuration's GPU, one GPU of it (`components.gpu.benchmark_machine`),
running `python -m trainer.benchmark all` with the configuration's model, batch and image
size; its results file lands in the measurements location, keyed by accelerator type,
model and image digest, where the next plan reads it. The job gets the run's settings
(service account, network or PSC interface, CMEK key, labels) as the training job does
(`components.training.vertex_job.custom_job`), is followed until it ends, and is cancelled
if this command is stopped: nothing is left running.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from components.gpu.benchmark_machine import BenchmarkMachine, benchmark_machine
from components.prices.price_list import PriceBook, unpriced_words
from pipelines.benchmark import Benchmark
from pipelines.config import Config

#: The benchmark's entry point in the trainer image.
BENCHMARK_COMMAND = ("python", "-m", "trainer.benchmark")
#: Beyond the cases' budget, the job's timeout allows this for the image's pull and
#: TensorFlow's start.
START_SECONDS = 1200
#: The label that tells a benchmark job from the runs' training jobs.
LABEL = {"gpu-pipeline-job": "benchmark"}


def benchmark_job(config: Config, benchmark: Benchmark, images: Mapping[str, Any], *,
                  data: str, output: str) -> tuple[Any, BenchmarkMachine]:
    """The CustomJob of a benchmark (nothing is sent), and the machine it runs on.

    Args:
        config: The configuration (its primary configuration's GPU is measured).
        benchmark: What to run.
        images: The build's images (`gpu` by digest).
        data: A prepared dataset (`gs://`; "" for synthetic batches only).
        output: The results file's `gs://` URI.
    """
    from components.training.job_names import unique_job_name
    from components.training.vertex_job import custom_job
    from trainer.common.gcs import to_mount_path
    from trainer.run.xla_compile import cache_location

    primary = config.alternatives()[0]
    chief = primary.pools[0]
    where = benchmark_machine(chief.machine, chief.accelerator or "", chief.gpus_per_machine)
    image = images["gpu"]["reference"]
    machine_spec = {**chief.to_api()["machine_spec"], "machine_type": where.machine,
                    "accelerator_count": where.gpus}
    training = config.vertex_training()
    arguments = benchmark.arguments(
        config.model_copy(update={"training": training}),
        data=to_mount_path(data) if data else "", output=output, image=image,
        call=f"gpu-pipeline benchmark on Vertex AI: {where.machine} ({where.why})")
    # The `cache` cases read and fill the runs' own XLA cache of this GPU and image.
    arguments += ["--xla-cache", cache_location(training.xla_cache, where.accelerator, image)]
    pool = {"machine_spec": machine_spec, "replica_count": 1,
            "container_spec": {
                "image_uri": image, "command": list(BENCHMARK_COMMAND),
                # One GPU is measured; a machine that comes with more shows TensorFlow one.
                "args": [*arguments, "--expected-gpus", "1"],
                "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}] if where.gpus > 1
                else []}}
    name = unique_job_name("gpu_benchmark")
    spec = {"worker_pool_specs": [pool], "display_name": name,
            "base_output_directory": f"{config.vertex.pipeline_root.rstrip('/')}/"
                                     f"benchmark-jobs/{name}"}
    # The job's own timeout: its cases' budget and time to start, not a training run's;
    # not on a persistent resource, whose pools are sized for the training machines.
    options = config.vertex_options().model_copy(update={
        "timeout": f"{int(benchmark.budget) + START_SECONDS}s", "persistent_resource_id": ""})
    job = custom_job(spec, options, primary.scheduling_strategy,
                     labels={**config.vertex.labels, **LABEL})
    return job, where


def run_job(client: Any, parent: str, job: Any, log: Callable[[str], None],
            poll_seconds: float = 0.0) -> Any:
    """Creates the job, follows it until it ends (cancelled if this command is stopped),
    and returns it in its final state."""
    from components.capacity.following import (
        POLL_SECONDS,
        REQUEST_TIMEOUT,
        RETRY_FIRST_DELAY,
        Watch,
        cancelled_with_the_step,
        console_link,
        follow,
    )
    from trainer.common.cloud_calls import remote_call

    with remote_call("creating the benchmark's CustomJob"):
        created = client.create_custom_job(parent=parent, custom_job=job,
                                           timeout=REQUEST_TIMEOUT)
    log(f"benchmark: {created.name} created; {console_link(created.name)}")
    watch = Watch(log, poll_seconds=poll_seconds or POLL_SECONDS,
                  retry_first_delay=RETRY_FIRST_DELAY,
                  request_timeout=REQUEST_TIMEOUT)
    with cancelled_with_the_step(client, created.name):
        done, _ = follow(client, created.name, watch)
    return done


def job_cost_lines(job: Any, book: PriceBook) -> list[str]:
    """What the job cost (its machine and GPUs for the time Vertex AI billed), as the runs'
    cost lines price a CustomJob (`components.capacity.cost.job_cost`)."""
    from google.protobuf.json_format import MessageToDict

    from components.capacity.cost import job_cost

    found = job_cost(MessageToDict(type(job).pb(job)), book)
    minutes = found.seconds / 60
    if not found.billed:
        return [f"cost: nothing billed ({found.state}: Vertex AI bills no failed job)"]
    return [f"cost: about {found.usd:.2f} USD, {minutes:.1f} minutes of one "
            f"{found.pools[0]['machine'] if found.pools else 'machine'} with its GPU"
            + (f" ({found.strategy})" if found.strategy else "") + f" ({found.prices})"
            + unpriced_words(found.unpriced)]


def run_on_vertex(config: Config, benchmark: Benchmark, *, data: str, folder: str,
                  dry_run: bool, clients: Any, log: Callable[[str], None],
                  verbose: bool = False, poll_seconds: float = 0.0
                  ) -> tuple[dict[str, Any] | None, str, list[str]]:
    """The benchmark as one CustomJob: the images found or built, the job created and
    followed, its results read back (None in a dry run, which sends nothing).

    Returns:
        The results, the results file's URI, and the cost lines.

    Raises:
        StageError: The job did not succeed (its cost is logged first).
    """
    import json
    import tempfile
    from pathlib import Path

    from google.cloud import aiplatform_v1

    from pipelines.benchmark import results_name
    from pipelines.vertex.dry_run import NOTHING_SENT, show
    from pipelines.vertex.runs import ensure_images
    from trainer.common.errors import StageError

    with tempfile.TemporaryDirectory(prefix="gpu-pipeline-benchmark-") as work:
        built = ensure_images(config, Path(work), dry_run=dry_run, clients=clients, log=log)
    output = f"{folder.rstrip('/')}/{results_name(benchmark, built.found['gpu']['reference'])}"
    job, where = benchmark_job(config, benchmark, built.found, data=data, output=output)
    region = config.alternatives()[0].region
    parent = f"projects/{config.vertex.project}/locations/{region}"
    log(f"benchmark: {where.machine} with {where.gpus} x {where.accelerator} in {region} "
        f"({where.why}); {benchmark.model} at batch {benchmark.batch}, "
        f"{benchmark.size}x{benchmark.size}; cases for at most {benchmark.budget / 60:.0f} "
        f"minutes; results to {output}")
    if dry_run:
        log("Vertex AI would receive this CreateCustomJobRequest:")
        show(aiplatform_v1.CreateCustomJobRequest(parent=parent, custom_job=job), log,
             verbose=verbose)
        log(NOTHING_SENT)
        return None, output, []
    done = run_job(clients.get_jobs(region), parent, job, log, poll_seconds)
    cost = job_cost_lines(done, clients.price_book(config.vertex, log))
    if done.state.name != "JOB_STATE_SUCCEEDED":
        for line in cost:
            log(line)
        raise StageError(f"the benchmark's CustomJob {done.name} ended {done.state.name}: "
                         f"{done.error.message or 'no message'}")
    from trainer.common.gcs import split_gcs_uri

    bucket, name = split_gcs_uri(output)
    text = clients.get_storage().bucket(bucket).blob(name).download_as_bytes()
    return json.loads(text), output, cost

