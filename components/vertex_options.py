"""How a run uses Vertex AI: worker pools, the CustomJob's settings, model registration.

Declared once (see `trainer.common.schema`); the config file's `vertex` section extends it with
what only the client needs (`pipelines.config.VertexConfig`), and the pipeline receives it
as its `vertex` parameter, which the stages read back through this model.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

import pydantic
from pydantic import AfterValidator, Field

from components import images
from components.build.given_images import GivenImages
from components.cloud_names import (
    HttpsUrl,
    ImageReference,
    KmsKey,
    ModelDisplayName,
    Network,
    NetworkAttachment,
    PinnedImage,
    Region,
    ServiceAccount,
    Tensorboard,
    WorkerPoolName,
    model_region,
    resource_region,
)
from components.durations import duration_seconds
from components.gpu.worker_pool import WorkerPool, parse_pools
from components.serving.batch_options import BatchPredictOptions
from components.serving.deploy_options import DeployOptions
from components.training.job_names import JOB_NAME_SUFFIX, validate_job_name
from trainer.common.schema import STRICT, short
from trainer.serving.measure import REFERENCE_IMAGES


def _repository(value: str) -> str:
    from components.build.cloud_build import Repository

    if value != images.DEFAULT_IMAGE_REPOSITORY:  # the placeholder, refused by submit
        Repository.parse(value)
    return value


ImageRepository = Annotated[str, AfterValidator(_repository)]


def default_pools() -> list[dict[str, Any]]:
    """A chief and one worker, each an n1-standard-8 with one T4: the smallest real
    multi-worker GPU cluster, valid in every GPU region."""
    return [WorkerPool(role, "n1-standard-8", "NVIDIA_TESLA_T4", 1).to_api() for role in (0, 1)]


SchedulingStrategy = Literal["STANDARD", "SPOT", "FLEX_START"]
#: `vertex.promotion`'s rule for scheduled retraining (named `non_inferior` before: it
#: promotes unless the challenger is shown worse, which is not a non-inferiority test).
UNLESS_SHOWN_WORSE = "unless_shown_worse"


class Fallback(pydantic.BaseModel):
    """An alternative to the primary configuration, which the training step tries when
    Vertex AI has no capacity for the ones before it; what it leaves out is the primary's."""

    model_config = STRICT

    region: Region | None = Field(None, description="Vertex AI region of this alternative.")
    worker_pool_specs: list[Any] | None = Field(None, description=(
        "Worker pools of this alternative (the same roles as the primary's)."))
    scheduling_strategy: SchedulingStrategy | None = Field(None, description=(
        "STANDARD, SPOT or FLEX_START for this alternative."))
    reservation: str | None = Field(None, description=(
        "The Compute Engine reservation its GPU pools consume: any, none, ZONE/NAME or "
        "projects/P/zones/Z/reservations/R (a shared one); unset: each pool's own. A "
        "configuration on a specific reservation is tried before the others."))


class VertexOptions(pydantic.BaseModel):
    """The Vertex AI settings the pipeline's stages use at run time."""

    model_config = STRICT

    region: Region = Field("us-central1", description="Vertex AI region of the job.")
    worker_pool_specs: list[Any] = Field(default_factory=default_pools, description=(
        "CustomJob worker pools: 0 chief, 1 workers, 2 parameter servers, 3 evaluators."))
    job_name: str = Field("gpu_training", description=(
        "Letters, digits and underscores; each run adds a _YYYYMMDD_HHMMSS suffix."))
    image_repository: ImageRepository = Field(images.DEFAULT_IMAGE_REPOSITORY, description=(
        "Artifact Registry Docker repository of the project's two images."))
    build_machine_type: Literal["E2_HIGHCPU_8", "E2_HIGHCPU_32", "N1_HIGHCPU_8", "N1_HIGHCPU_32",
                                "E2_STANDARD_2", "E2_MEDIUM"] = Field(
        "E2_HIGHCPU_8", description=(
            "Cloud Build machine that builds the images; Cloud Build's default has 2 vCPUs, "
            "slow for the GPU image's 3.5 GB of packages."))
    build_timeout: str = Field("3600s", description=(
        "Longest a Cloud Build of the images may run, e.g. 3600s (at most 86400s)."))
    build_worker_pool: WorkerPoolName = Field("", description=(
        "A Cloud Build private pool the images are built in "
        "(projects/P/locations/REGION/workerPools/NAME; its machines, not "
        "build_machine_type; logs to Cloud Logging only); empty: Cloud Build's default pool."))
    python_base_image: PinnedImage = Field("", description=(
        "Debian's Python base image (python:3.11-slim-bookworm) from a mirror, by digest, "
        "for builds that cannot reach Docker Hub; empty: Docker Hub's."))
    beam_sdk_image: PinnedImage = Field("", description=(
        f"Beam's SDK image ({images.BEAM_SDK_IMAGE}) from a mirror, by digest; empty: "
        "Docker Hub's."))
    pip_index_url: HttpsUrl = Field("", description=(
        "A Python package index the images' locked packages are installed from (an Artifact "
        "Registry Python repository is read as the build's account); empty: PyPI."))
    apt_mirror_url: HttpsUrl = Field("", description=(
        f"A copy of {images.GOOGLE_APT_REPOSITORY[0]} (its paths) the GPU image's Reduction "
        "Server plugin is installed from; empty: Google's."))
    service_account: ServiceAccount = Field("", description=(
        "Service account the pipeline runs as (its steps), and every other role's unless "
        "that role has its own."))
    training_service_account: ServiceAccount = Field("", description=(
        "Service account the training CustomJobs and the tuning job's trials run as "
        "(empty: service_account). Google recommends an account per role."))
    build_service_account: ServiceAccount = Field("", description=(
        "Service account Cloud Build builds the images as (empty: service_account; never "
        "the legacy Cloud Build account, which has broad roles)."))
    network: Network = Field("", description=(
        "projects/NUMBER/global/networks/NAME for VPC peering; empty for none."))
    restart_job_on_worker_restart: bool = Field(True, description=(
        "Restart the whole job when a worker restarts (training then resumes)."))
    scheduling_strategy: SchedulingStrategy = Field(
        "STANDARD", description=(
            "STANDARD, SPOT (preemptible machines) or FLEX_START (Dynamic Workload "
            "Scheduler: the job waits until the GPUs are available)."))
    max_wait_duration: str = Field("", pattern=r"^(\d+s)?$", description=(
        "FLEX_START: the longest the job waits for its GPUs, e.g. 3600s; empty: Vertex AI's "
        "default."), json_schema_extra={"valid": "whole seconds with an s, e.g. 3600s, or "
                                                 "empty"})
    timeout: str = Field("604800s", description="Most time the CustomJob may run, e.g. 86400s.")
    fallbacks: list[Fallback] = Field(default_factory=list, max_length=8, description=(
        "Alternatives tried in order when Vertex AI has no capacity (a stock-out or a "
        "quota refusal) for the primary configuration, each overriding any of region, "
        "worker_pool_specs and scheduling_strategy."))
    capacity_rounds: int = Field(2, ge=1, le=10, description=(
        "How many times the training step goes through the configurations (the primary, "
        "then each fallback) while every one is out of capacity."))
    capacity_backoff: str = Field("600s", description=(
        "Wait before the next round, doubled each round, e.g. 600s."))
    queue_limit: str = Field("3600s", pattern=r"^\d+s$", description=(
        "A STANDARD or SPOT job still waiting for its machines (QUEUED or PENDING) this "
        "long after it was created is cancelled and the next configuration tried; the last "
        "one tried waits, and FLEX_START waits up to max_wait_duration. 0s: no limit."),
        json_schema_extra={"valid": "whole seconds with an s, e.g. 3600s, or 0s for no "
                                    "limit"})
    tensorboard: Tensorboard = Field("", description=(
        "projects/.../locations/.../tensorboards/ID; empty for none. With it, each run's "
        "Vertex AI Experiments run also gets its per-epoch curves as time series."))
    experiment: str = Field("", pattern=r"^([a-z0-9][a-z0-9-]{0,62})?$", description=(
        "The Vertex AI Experiments experiment each Vertex AI run is recorded in (its "
        "parameters, metrics, the gate's decision and cost); empty: the model's display "
        "name, in lowercase letters, digits and hyphens."), json_schema_extra={
        "valid": "1 to 63 lowercase letters, digits and hyphens, starting with a letter or "
                 "digit, or empty"})
    accuracy_threshold: float = Field(0.9, ge=0, le=1, description=(
        "Register the model only at or above this validation accuracy."))
    model_display_name: ModelDisplayName = Field("gpu-pipeline-model", description=(
        "Display name of the registered model."))
    parent_model: str = Field("", description=(
        "projects/.../locations/REGION/models/ID, in `region`: register as a new version "
        "of it."))
    promotion: Literal["default", "unless_shown_worse", "version_only", "never"] = Field(
        "default", description=(
            "default: a model shown better than the champion on the same held-out images "
            "(McNemar's exact test) becomes the default version, one that only passes the "
            "threshold a non-default version; unless_shown_worse: the same, but a model "
            "is promoted unless the test shows it worse than vertex.non_inferiority_margin "
            "allows (for scheduled retraining on fresh data: on a small split almost any "
            "model passes, and the decision says what the split can detect; the earlier "
            "name non_inferior is read as it, with a warning); version_only: every model "
            "that passes the threshold a non-default version; never: nothing registered."))

    @pydantic.field_validator("promotion", mode="before")
    @classmethod
    def _renamed_promotion(cls, value: Any) -> Any:
        # Specs compiled before the rename pass the old name (the loader warns of it).
        return UNLESS_SHOWN_WORSE if value == "non_inferior" else value
    promotion_level: float = Field(0.05, gt=0, lt=0.5, description=(
        "The one-sided level of the gate's paired test (McNemar's exact test on the "
        "held-out images the two models disagree on)."))
    champion_kept_warning: int = Field(3, ge=1, le=1000, description=(
        "From this many runs in a row that kept the champion on, each run ends with a "
        "warning naming the rule and the figures (the count is in the report, the Model "
        "Registry labels and `gpu-pipeline models list`)."))
    non_inferiority_margin: float = Field(0.1, ge=0, le=1, description=(
        "vertex.promotion unless_shown_worse: how many more errors than the champion's the new "
        "model may make, as a share of the champion's (0.1: at most 10% more)."))
    persistent_resource_id: str = Field("", pattern=r"^([a-z][a-z0-9-]{0,62})?$", description=(
        "A Vertex AI persistent resource to train on (fast starts); empty for none."),
        json_schema_extra={"valid": "a resource ID (a lowercase letter, then lowercase "
                                    "letters, digits and hyphens, at most 63) or empty"})
    prices: dict[str, float] = Field(default_factory=dict, description=(
        "USD per hour by machine or accelerator type (e.g. g2-standard-8: 0.85, NVIDIA_L4: "
        "0.64; SPOT:NVIDIA_L4 or FLEX_START:NVIDIA_L4 for jobs of that provisioning "
        "model; RESERVED:NVIDIA_H100_80GB for Vertex AI's fee on a reservation's GPU; "
        "PREDICTION:n1-standard-4 for serving and batch prediction nodes; "
        "e2-standard-4 for the pipeline's steps; DATAFLOW:VCPU, DATAFLOW:MEMORY_GB and "
        "DATAFLOW:DISK_GB per vCPU- or GB-hour of the dataset stage's Dataflow job; "
        "CLOUD_BUILD:E2_HIGHCPU_8 per hour of a build the build stage makes): the "
        "cost estimates' prices, over those read from the Cloud Billing Catalog API, its "
        "cache or the shipped table (components/prices; `gpu-pipeline prices` shows them; "
        "which types none holds, the estimate names)."))
    psc_network_attachment: NetworkAttachment = Field("", description=(
        "A Private Service Connect interface for the PipelineJob and every CustomJob: the "
        "network attachment (projects/P/regions/REGION/networkAttachments/NAME) in the "
        "run's region; instead of network (VPC peering), not with it."))
    encryption_key: KmsKey = Field("", description=(
        "A Cloud KMS key (customer-managed encryption) for everything the run creates: the "
        "PipelineJob, its CustomJobs and tuning job, the model, the endpoint, the batch "
        "prediction and Dataflow jobs. In the run's region; empty: Google-managed keys."))
    budget_usd: float = Field(0.0, ge=0, le=10_000_000, description=(
        "The most one run may cost, in USD (0: no budget). Each training configuration "
        "over it is dropped before anything is created (and again by the training step "
        "before its first job, against what the run leaves), the run refused when none "
        "fits, a running job that would pass what the run leaves cancelled, a study's "
        "trials bounded by it, and the canary's window held to what the run leaves "
        "(components/capacity/budget.py)."))
    labels: dict[str, str] = Field(default_factory=dict, description=(
        "Labels of the pipeline job and the CustomJob, for cost tracking."))
    serving_check_images: int = Field(REFERENCE_IMAGES, ge=0, le=REFERENCE_IMAGES, description=(
        "Held-out images sent, one request each, to the model server on the new model "
        "before it may serve (0: no check); its answers must match the SavedModel's own."))
    serving_p95_seconds: float = Field(2.0, gt=0, description=(
        "The bound on the 95th percentile of one prediction request's time in that check."))
    images: GivenImages = Field(default_factory=GivenImages, description=(
        "The project's images built elsewhere (gpu and cpu, each by digest): nothing builds "
        "them then (components/build/given_images.py); empty: built from the sources."))
    serving_image: ImageReference = Field("", description=(
        "Image serving the registered model, by digest; empty: the run's own CPU image (the "
        "TensorFlow it was trained with); to serve on GPUs, the run's GPU image."))
    deploy: DeployOptions = Field(default_factory=DeployOptions, description=(
        "The deploy stage: the endpoint, the canary and the rollout rule (docs/serving.md)."))
    batch_predict: BatchPredictOptions = Field(default_factory=BatchPredictOptions, description=(
        "The batch step after a promotion: the images the promoted model scores "
        "(docs/serving.md)."))

    @pydantic.field_serializer("fallbacks")
    def _fallbacks(self, fallbacks: list[Fallback]) -> list[dict[str, Any]]:
        # What a fallback leaves out stays out: pipeline parameters hold no nulls.
        return [f.model_dump(exclude_none=True) for f in fallbacks]

    @property
    def training_account(self) -> str:
        """The account the training and tuning jobs run as ("" : the Custom Code Service
        Agent)."""
        return self.training_service_account or self.service_account

    @property
    def build_account(self) -> str:
        """The account Cloud Build runs as ("": its default)."""
        return self.build_service_account or self.service_account

    @property
    def pools(self) -> tuple[WorkerPool | None, ...]:
        """`worker_pool_specs` parsed (`components.gpu.worker_pool`); read them once
        stage 1's rules have passed."""
        return parse_pools(self.worker_pool_specs)

    def problems(self) -> list[str]:
        """Rules a single field's type cannot say (formats); the GPU rules are stage 1's."""
        found = validate_job_name(self.job_name, "job_name", reserve=JOB_NAME_SUFFIX)
        found += _seconds_problems("timeout", self.timeout, "86400s")
        found += _seconds_problems("capacity_backoff", self.capacity_backoff, "600s", 86400)
        # A persistent resource's machines are reserved: no stock-out to fall back from,
        # and an alternative's region or machines would not be the resource's.
        if self.fallbacks and self.persistent_resource_id:
            found.append(f"fallbacks has {len(self.fallbacks)} alternative(s) but "
                         f"persistent_resource_id is {self.persistent_resource_id!r}; a "
                         "persistent resource's machines are reserved, so there is no "
                         "stock-out to fall back from: remove one of them")
        # Cloud Build's longest build timeout is 24 hours (Cloud Build docs: "Build
        # configuration file schema", timeout).
        found += _seconds_problems("build_timeout", self.build_timeout, "3600s", 86400)
        # Vertex AI docs, "Set up Vertex AI TensorBoard": "The Vertex AI TensorBoard
        # integration with custom training requires attaching a service account."
        if self.tensorboard and not self.service_account:
            found.append(f"tensorboard is {short(self.tensorboard)} but service_account is "
                         "empty; a job writes to a Vertex AI TensorBoard only as a service "
                         "account with access to it: set vertex.service_account")
        for key, value in self.labels.items():
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", key) or \
                    not re.fullmatch(r"[a-z0-9_-]{0,63}", value):
                found.append(f"labels has {short(key)}: {short(value)}; label keys start with "
                             "a lowercase letter and keys and values hold only lowercase "
                             "letters, digits, '_' and '-' (at most 63 characters)")
        found += [f"prices has {short(kind)}: {price}; expected USD per hour above 0"
                  for kind, price in self.prices.items() if not 0 < price < 10000]
        where = model_region(self.parent_model) if self.parent_model else ""
        if self.parent_model and not where:
            found.append(f"parent_model is {short(self.parent_model)}; expected "
                         "projects/PROJECT/locations/REGION/models/ID")
        elif where and where != self.region:
            # Vertex AI reaches no resource across regions (GoogleCloudPlatform/
            # vertex-ai-samples#925): the run registers its model version in its region.
            found.append(f"parent_model is in {where} but region is {self.region}; the run "
                         "registers the new version in its own region: give a model in "
                         f"{self.region}, or set region to {where}")
        if self.tensorboard:
            # Vertex AI works on a resource in its own location ("Vertex AI locations":
            # "you must use the location of the resource you're operating on") and reaches
            # none across regions (GoogleCloudPlatform/vertex-ai-samples#925).
            found += self._regional("tensorboard", resource_region(self.tensorboard),
                                    "a TensorBoard", "a job streams its logs to a "
                                    f"TensorBoard in its region: use one in {self.region}",
                                    keep=" with tensorboard set")
        found += self.deploy.in_region(self.region)
        found += self._key_problems()
        found += self._attachment_problems()
        return found

    def _attachment_problems(self) -> list[str]:
        """A job is reached through VPC peering (`network`) or a Private Service Connect
        interface (`pscInterfaceConfig`; Vertex AI docs, "Use Private Service Connect
        interface for Vertex AI Training" and "Configure Private Service Connect interface
        for a pipeline"), one or the other; the attachment is "within the region"
        (PscInterfaceConfig.network_attachment's API reference)."""
        from components.cloud_names import attachment_region

        if not self.psc_network_attachment:
            return []
        found = [] if not self.network else [
            f"network is {short(self.network)} and psc_network_attachment is "
            f"{short(self.psc_network_attachment)}; a job is reached through VPC peering or "
            "a Private Service Connect interface, not both: keep one"]
        where = attachment_region(self.psc_network_attachment)
        return found + self._regional("psc_network_attachment", where, "an attachment",
                                      f"use a network attachment in {self.region}")

    def _key_problems(self) -> list[str]:
        """A customer-managed key must be in the region of the resource it encrypts ("The
        key needs to be in the same region as where the compute resource is created":
        gcpc's ModelUploadOp, `encryption_spec_key_name`)."""
        from components.cloud_names import kms_key_location

        if not self.encryption_key:
            return []
        return self._regional(
            "encryption_key", kms_key_location(self.encryption_key), "a key",
            "a customer-managed key must be in the region of the resources it encrypts: "
            f"use a key in {self.region}", keep=" with encryption_key set")

    def _regional(self, field: str, where: str, thing: str, fix: str,
                  keep: str = "") -> list[str]:
        """A regional resource (`field`, in `where`) outside the run's region, and each
        fallback in another region: it would need `thing` of its own there, which a
        fallback cannot give, so it is refused."""
        found = [] if where == self.region else [
            f"{field} is in {where} but region is {self.region}; {fix}"]
        return found + [
            f"fallbacks[{i}] is in {f.region} but {field} is in {where}; a configuration in "
            f"another region needs {thing} there, which a fallback cannot give: keep "
            f"fallbacks in {where}{keep}"
            for i, f in enumerate(self.fallbacks) if f.region and f.region != where]

    def build_settings(self) -> Any:
        """How Cloud Build builds the images (`components.build.cloud_build.BuildSettings`)."""
        from components.build.cloud_build import BuildSettings
        from components.build.sources import BuildSources

        timeout = duration_seconds(self.build_timeout) or 1
        return BuildSettings(machine_type=self.build_machine_type,
                             timeout_seconds=max(1, round(timeout)),
                             service_account=self.build_account,
                             worker_pool=self.build_worker_pool,
                             sources=BuildSources(self.python_base_image, self.beam_sdk_image,
                                                  self.pip_index_url, self.apt_mirror_url))


def _seconds_problems(name: str, value: str, example: str, maximum: float = math.inf) -> list[str]:
    """A duration option's problems: a positive number of seconds like `example`."""
    found = duration_seconds(value)
    if found is None or not 0 < found <= maximum:
        bound = "" if maximum == math.inf else f" up to {maximum:.0f}s"
        return [f"{name} is {short(value)}; expected a positive number of seconds{bound} like "
                f"'{example}'"]
    return []
