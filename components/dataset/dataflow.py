"""The Beam engine on Vertex AI: the dataset stage as a Dataflow job it submits and follows.

Why the stage submits with Beam's DataflowRunner and waits, rather than gcpc's
`DataflowPythonJobOp` followed by `WaitGcpResourcesOp`:

- the job is submitted from the project's CPU image, the same image (by digest) its
  workers run as their SDK container: launcher and workers have the same Beam and the same
  code. gcpc's op runs the launching script in gcpc's own image after `pip install -r` of a
  requirements file at run time (`dataflow_python_job_remote_runner.install_requirements`):
  another Beam version, unpinned packages, and the internet needed at run time;
- the stage's contract stays in one task for both engines: the shard assignment before the job, then
  the skipped-images threshold, the report and the manifest last, and the cleanup when the
  job fails;
- a cancelled pipeline run cancels the job: Vertex AI stops a task's container with
  SIGTERM, and the stage then asks Dataflow to cancel, as gcpc's own launchers do
  (`google_cloud_pipeline_components.container.utils.execution_context`); a plain
  container would leave the job running (kubeflow/pipelines#3364).

The workers' image must start Beam's boot program (Dataflow docs, "Build custom container
images": `/opt/apache/beam/boot` must run at container start-up), which the CPU image does
as its entry point (docker/cpu.Dockerfile).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import signal
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from components import identity
from components.stage_messages import say
from trainer.common.errors import InputError, StageError, first_line

if TYPE_CHECKING:
    from components.dataset.dataset_options import DatasetOptions

#: Seconds between two looks at the job's state.
POLL_SECONDS = 10.0

#: The totals of a job's JobMetrics (v1b3 `getMetrics`, origin `dataflow/v1b3`; gcloud's
#: `dataflow metrics list` shows them as Service-cpu_num_seconds, -mem_mb_seconds,
#: -pd_gb_seconds and -pd_ssd_gb_seconds) that Dataflow bills a batch job's workers by
#: (Dataflow pricing: worker CPU and memory, Persistent Disk), and what each becomes:
#: (its key in the usage record, its units in one unit-hour).
USAGE_METRICS = {"TotalVcpuTime": ("vcpu_hours", 3600.0),
                 "TotalMemoryUsage": ("memory_gb_hours", 3600.0 * 1024),
                 "TotalPdUsage": ("disk_gb_hours", 3600.0),
                 "TotalSsdUsage": ("ssd_gb_hours", 3600.0)}

#: Dataflow's states after which a job does not change (JobState in the v1b3 API).
_TERMINAL = ("JOB_STATE_DONE", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_UPDATED",
             "JOB_STATE_DRAINED", "JOB_STATE_STOPPED")


class DataflowJobFailed(StageError):
    """The Dataflow job ended in another state than done."""


class DataflowSettingsError(InputError):
    """The run cannot give the Dataflow job what it needs."""


@dataclasses.dataclass(frozen=True)
class DataflowJob:
    """The Dataflow job the Beam engine runs as on Vertex AI.

    Attributes:
        project: Google Cloud project of the job.
        region: Its region: the pipeline run's.
        job_name: Its name, unique per output directory.
        sdk_image: The workers' SDK container: the project's CPU image, by digest.
        temp_location: `gs://` directory for Beam's temporary files (under the pipeline
            root).
        staging_location: `gs://` directory for the staged pipeline.
        service_account: The workers' service account (empty: Compute Engine's default).
        max_workers: Most workers.
        machine_type: The workers' machine type.
        flexrs: FlexRS (`FLEXRS_COST_OPTIMIZED`): delayed start, cheaper VMs.
        network: The workers' VPC network (empty: `default`).
        subnetwork: Their subnetwork (empty: the network's in the region).
        endpoint: The Dataflow API's URL (empty: Google's public endpoint).
        kms_key: A Cloud KMS key for the job's state and data (`--dataflow_kms_key`;
            Dataflow's and Compute Engine's service agents need to use it).
    """

    project: str
    region: str
    job_name: str
    sdk_image: str
    temp_location: str
    staging_location: str
    service_account: str = ""
    max_workers: int = 10
    machine_type: str = "n2-standard-4"
    flexrs: bool = False
    network: str = ""
    subnetwork: str = ""
    endpoint: str = ""
    kms_key: str = ""

    def pipeline_args(self) -> list[str]:
        """Beam's pipeline options for the job (`PipelineOptions(args)`)."""
        args = [
            "--runner=DataflowRunner", f"--project={self.project}", f"--region={self.region}",
            f"--job_name={self.job_name}", f"--temp_location={self.temp_location}",
            f"--staging_location={self.staging_location}",
            # The SDK and our code come from the image: nothing is installed at start-up.
            f"--sdk_container_image={self.sdk_image}", "--sdk_location=container",
            f"--max_num_workers={self.max_workers}", f"--machine_type={self.machine_type}",
            f"--labels=pipeline={identity.NAME}",
        ]
        for flag, value in (("service_account_email", self.service_account),
                            ("network", self.network), ("subnetwork", self.subnetwork),
                            ("dataflow_endpoint", self.endpoint),
                            ("dataflow_kms_key", self.kms_key)):
            if value:
                args.append(f"--{flag}={value}")
        if self.flexrs:
            args.append("--flexrs_goal=COST_OPTIMIZED")
        return args


def job_name_for(output_uri: str) -> str:
    """A Dataflow job name for the dataset written to `output_uri`: Dataflow's form
    (`[a-z]([-a-z0-9]*[a-z0-9])?`), one per pipeline task's output."""
    digest = hashlib.sha256(output_uri.encode()).hexdigest()[:12]
    return f"{identity.NAME}-dataset-{digest}"


def launch_settings(project_id: str, region: str, service_account: str,
                    images: Mapping[str, Any], kms_key: str = "") -> dict[str, str]:
    """What the dataset stage needs from the run to start its Dataflow job (the keyword
    arguments of `dataflow_job` besides the options and the output): the run's project,
    region, service account and encryption key, and the CPU image the build stage made, by
    digest.

    Raises:
        DataflowSettingsError: No project, or no CPU image by digest.
    """
    reference = str((images.get("cpu") or {}).get("reference", ""))
    problems = []
    if not project_id:
        problems.append("project is empty; expected the Google Cloud project of the run")
    if "@sha256:" not in reference:
        problems.append(f"images.cpu.reference is {reference!r}; expected the CPU image the "
                        "build stage made, by digest (REPOSITORY/NAME@sha256:...), which the "
                        "Dataflow workers run")
    if problems:
        raise DataflowSettingsError("; ".join(problems))
    return {"project_id": project_id, "region": region, "service_account": service_account,
            "sdk_image": reference, "kms_key": kms_key}


def dataflow_job(options: DatasetOptions, *, project_id: str, region: str, service_account: str,
                 sdk_image: str, output_uri: str, kms_key: str = "") -> DataflowJob:
    """The job that prepares `options`' dataset into `output_uri` (`gs://`), with temp and
    staging files beside it, under the pipeline root.

    Args:
        options: The dataset options (`DatasetOptions`; its `dataflow_*` fields).
        project_id: The Google Cloud project.
        region: The pipeline run's region.
        service_account: The account the run runs as (`options.dataflow_service_account`
            comes first).
        sdk_image: The project's CPU image, by digest.
        output_uri: Where the dataset goes (the stage's output artifact).
        kms_key: `vertex.encryption_key` (empty: none).
    """
    base = output_uri.rstrip("/").rsplit("/", 1)[0]
    return DataflowJob(
        project=project_id, region=region, job_name=job_name_for(output_uri),
        sdk_image=sdk_image, temp_location=f"{base}/dataflow/temp",
        staging_location=f"{base}/dataflow/staging",
        service_account=options.workers_account(service_account),
        max_workers=options.dataflow_max_workers, machine_type=options.dataflow_machine_type,
        flexrs=options.dataflow_flexrs, network=options.dataflow_network,
        subnetwork=options.dataflow_subnetwork, kms_key=kms_key)


def run_on_dataflow(pipeline: Any, job: DataflowJob) -> dict[str, Any]:
    """Submits `pipeline` as `job` and follows it to its end; returns what the job used
    (`job_usage`).

    A SIGTERM (Vertex AI cancelling the run) or an interrupt while it runs cancels the
    job before the stage ends.

    Raises:
        DataflowJobFailed: The job failed or was cancelled (its last error message).
    """
    from apache_beam.runners.dataflow.internal import apiclient

    result = pipeline.run()
    job_id = result.job_id()
    client = apiclient.DataflowApplicationClient(pipeline._options)
    url = (f"https://console.cloud.google.com/dataflow/jobs/{job.region}/{job_id}"
           f"?project={job.project}")
    say(f"Dataflow job {job.job_name} ({job_id}) in {job.region}, up to {job.max_workers} "
        f"{job.machine_type} workers: {url}")
    with _cancelled_on_exit(client, job_id):
        state = _follow(client, job_id)
    if state != "JOB_STATE_DONE":
        raise DataflowJobFailed(f"Dataflow job {job.job_name} ({job_id}) ended in "
                                f"{state}: {_last_error(client, job_id) or 'no error message'}"
                                f"; see {url}")
    usage = job_usage(client, job_id, job)
    say(f"Dataflow job {job_id} used {usage.get('vcpu_hours', 0):.3f} vCPU-hours, "
        f"{usage.get('memory_gb_hours', 0):.3f} GB-hours of memory, "
        f"{usage.get('disk_gb_hours', 0):.3f} GB-hours of disk" if "unread" not in usage
        else f"Dataflow job {job_id}: what it used could not be read ({usage['unread']})")
    return usage


def job_usage(client: Any, job_id: str, job: DataflowJob) -> dict[str, Any]:
    """What a finished job used (its JobMetrics' totals, per unit-hour: USAGE_METRICS), when
    it ran and on which workers; a read that fails is said in `unread`, never raised (the
    dataset is written either way)."""
    usage: dict[str, Any] = {"job": job_id, "name": job.job_name, "project": job.project,
                             "region": job.region, "machine_type": job.machine_type}
    try:
        metrics = client.get_job_metrics(job_id).metrics
        ran = client.get_job(job_id)
    except Exception as exc:  # noqa: BLE001 - the job's cost is told, never a failure
        return {**usage, "unread": first_line(exc, 300)}
    for metric in metrics:
        if metric.name.origin == "dataflow/v1b3" and metric.name.name in USAGE_METRICS:
            key, per_hour = USAGE_METRICS[metric.name.name]
            usage[key] = round(float(metric.scalar or 0) / per_hour, 6)
    started, ended = ran.start_time or ran.create_time, ran.current_state_time
    if started and ended:
        usage["start_time"], usage["end_time"] = started.rfc3339(), ended.rfc3339()
    return usage


def _follow(client: Any, job_id: str, report_every: float = 300) -> str:
    """Polls the job until it is in a terminal state; returns that state's name. A job
    gives no count of its work: a state change is said at once, and a long state again
    every `report_every` seconds with how long the job has run."""
    last, said, started = None, 0.0, time.monotonic()
    while True:
        state = client.get_job(job_id).current_state.name
        now = time.monotonic()
        if state != last or now - said >= report_every:
            say(f"Dataflow job {job_id}: {state}"
                + (f" after {(now - started) / 60:.0f} min" if state == last else ""))
            last, said = state, now
        if state in _TERMINAL:
            return state
        time.sleep(POLL_SECONDS)


def _last_error(client: Any, job_id: str) -> str:
    """The job's last error message (its first line), or ''."""
    try:
        messages, _ = client.list_messages(job_id, minimum_importance="JOB_MESSAGE_ERROR")
    except Exception as exc:  # noqa: BLE001 - the failure is reported either way
        return f"(its messages could not be read: {first_line(exc, 200)})"
    texts = [m.message_text for m in messages if m.message_text]
    return first_line(texts[-1], 500) if texts else ""


@contextlib.contextmanager
def _cancelled_on_exit(client: Any, job_id: str) -> Iterator[None]:
    """Cancels the job when the block ends other than by the job's own end: SIGTERM (a
    cancelled pipeline run), an interrupt or an error."""
    stopped = []

    def stop(signum: int, frame: Any) -> None:
        stopped.append(signum)
        raise KeyboardInterrupt  # leaves the polling wherever it is

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except BaseException:
        say(f"cancelling Dataflow job {job_id}")
        try:
            client.modify_job_state(job_id, "JOB_STATE_CANCELLED")
        except Exception as cancel_error:  # noqa: BLE001 - the first error matters more
            say(f"could not cancel Dataflow job {job_id}: {first_line(cancel_error, 300)}")
        if stopped:
            raise DataflowJobFailed(f"the stage was stopped (SIGTERM); Dataflow job {job_id} "
                                    "was asked to cancel") from None
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
