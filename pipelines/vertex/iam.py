"""IAM known before the run: what `submit` can check of its caller's permissions.

A missing role otherwise shows up mid-run (a build that cannot push, a job that cannot act
as its service account). `testIamPermissions` tells which of a list of permissions the
caller holds on a resource, without changing anything; `submit` asks each resource where
the grant is made (IAM grants inherit downward: a role granted on a repository or bucket is
invisible on its project) and reports every missing permission at once:

- Vertex AI's project (Resource Manager): creating the pipeline run, reading the quotas
  and the active CustomJobs (`pipelines.vertex.capacity`);
- the image repository's project (Resource Manager), where Cloud Build runs the build
  (`components.build.cloud_build`): creating the build; one request with the above when
  it is the same project;
- the image repository (Artifact Registry's own testIamPermissions): reading image tags,
  which admins grant there (`roles/artifactregistry.reader` on the repository);
- the pipeline root's bucket (Cloud Storage): uploading the sources, reading them back;
- each project whose Compute Engine reservation a pool names (Resource Manager): reading
  the reservation;
- the run-as service account (IAM): `iam.serviceAccounts.actAs`, without which Vertex AI
  refuses a run that uses it (Vertex AI docs: "Configure a service account for
  Vertex AI Pipelines").

testIamPermissions answers for the caller only: what the run-as account and Google's
service agents need inside the run is listed by `unchecked` (and the README), not checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from components.stage_messages import say
from pipelines.config import Config
from pipelines.vertex.clients import Clients
from trainer.common.cloud_calls import remote_call
from trainer.common.errors import InputError

#: The caller's permissions on Vertex AI's project: `submit` reads the Vertex AI quotas
#: (Cloud Quotas' ListQuotaInfos) and the active CustomJobs, and creates the pipeline run.
PROJECT_PERMISSIONS = ("aiplatform.pipelineJobs.create", "cloudquotas.quotas.get",
                       "aiplatform.customJobs.list")
#: On each project whose Compute Engine reservation a pool names: `submit` reads it
#: (`pipelines.vertex.capacity.check_reservations`).
RESERVATION_PERMISSIONS = ("compute.reservations.get",)
#: On the image repository's project, where Cloud Build builds the images.
BUILD_PERMISSIONS = ("cloudbuild.builds.create",)
#: On a private pool's project: building in it (Cloud Build docs, "Run builds in a private
#: pool": the WorkerPool User role, to whoever requests the build).
POOL_PERMISSIONS = ("cloudbuild.workerpools.use",)
#: On the image repository: `submit` asks whether each image's content tag exists.
REPOSITORY_PERMISSIONS = ("artifactregistry.tags.get",)
#: On the pipeline root's bucket: `submit` uploads the sources and checks what is there.
BUCKET_PERMISSIONS = ("storage.buckets.get", "storage.objects.create", "storage.objects.get")
#: On the run-as service account.
SERVICE_ACCOUNT_PERMISSIONS = ("iam.serviceAccounts.actAs",)
#: The IAM API, which has no client library among the project's dependencies.


class PermissionsError(InputError):
    """The caller lacks permissions the run needs."""


@dataclasses.dataclass(frozen=True)
class Check:
    """One testIamPermissions request: on what, through which API, which permissions."""

    api: str
    resource: str
    permissions: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.api} testIamPermissions on {self.resource}: {', '.join(self.permissions)}"


def reservation_projects(config: Config) -> list[str]:
    """The projects whose Compute Engine reservations the run's pools name."""
    from components.gpu.alternatives import reservations_named
    from components.gpu.reservations import SPECIFIC, Reservation

    return sorted({Reservation(SPECIFIC, name).project
                   for name in reservations_named(config.vertex)})


def checks(config: Config) -> list[Check]:
    """The testIamPermissions requests `submit` makes for a configuration."""
    from components.build.cloud_build import Repository
    from trainer.common.gcs import split_gcs_uri

    bucket, _ = split_gcs_uri(config.vertex.pipeline_root)
    repository = Repository.parse(config.vertex.image_repository)
    # Per project, in order: Vertex AI's, the build's, the private pool's (a pool may be
    # another project's: Cloud Build docs, "Run builds in a private pool").
    projects: dict[str, tuple[str, ...]] = {f"projects/{config.vertex.project}": ()}
    wanted = [(f"projects/{config.vertex.project}", PROJECT_PERMISSIONS),
              (f"projects/{repository.project}", BUILD_PERMISSIONS)]
    if config.vertex.build_worker_pool:
        wanted.append(("/".join(config.vertex.build_worker_pool.split("/")[:2]),
                       POOL_PERMISSIONS))
    wanted += [(f"projects/{owner}", RESERVATION_PERMISSIONS)
               for owner in reservation_projects(config)]
    for project, permissions in wanted:
        projects[project] = projects.get(project, ()) + permissions
    found = [Check("Resource Manager", project, permissions)
             for project, permissions in projects.items()]
    found += [Check("Artifact Registry", repository.name, REPOSITORY_PERMISSIONS),
              Check("Cloud Storage", f"gs://{bucket}", BUCKET_PERMISSIONS)]
    # Whoever submits acts as every account the run uses (Vertex AI docs, "Use a custom
    # service account": iam.serviceAccounts.actAs on each).
    found += [Check("IAM", f"projects/-/serviceAccounts/{account}", SERVICE_ACCOUNT_PERMISSIONS)
              for account in accounts(config)]
    return found


def accounts(config: Config) -> list[str]:
    """The distinct service accounts a run uses, in the order of their roles: the
    pipeline's, the training jobs', Cloud Build's, the Dataflow workers'."""
    found = [config.vertex.service_account, config.vertex.training_account,
             config.vertex.build_account]
    if config.dataset.engine == "beam":
        found.append(config.dataset.workers_account(config.vertex.service_account))
    return list(dict.fromkeys(a for a in found if a))


def default_account_warnings(config: Config) -> list[str]:
    """A line for each role that runs as the Compute Engine default account, which has the
    Editor role on its project unless the organisation turned that off."""
    roles = {"vertex.service_account": config.vertex.service_account,
             "vertex.training_service_account": config.vertex.training_service_account,
             "vertex.build_service_account": config.vertex.build_service_account,
             "dataset.dataflow_service_account": config.dataset.dataflow_service_account}
    return [f"warning: {role} is {account}, the Compute Engine default service account "
            "(Editor on its project by default); Google recommends a dedicated account with "
            "the least roles for each role (docs/iam.md)"
            for role, account in roles.items()
            if account.endswith("-compute@developer.gserviceaccount.com")]


def unchecked(config: Config) -> list[str]:
    """What the run needs of identities other than the caller, for which no
    testIamPermissions can answer (it answers for the caller only): one line each."""
    from components.build.cloud_build import Repository
    from components.build.pip_index import is_artifact_registry
    from trainer.common.gcs import split_gcs_uri

    bucket, _ = split_gcs_uri(config.vertex.pipeline_root)
    repository = Repository.parse(config.vertex.image_repository)
    account = config.vertex.service_account or "the Compute Engine default service account"
    training = config.vertex.training_service_account
    jobs = "CustomJob" + (", HyperparameterTuningJob" if config.tuning.enabled else "")
    who = f"every step and the {jobs}" if not training else "every step"
    lines = [f"{account} ({who}): roles/aiplatform.user, "
             "roles/logging.logWriter and roles/cloudquotas.viewer (the training step reads "
             f"the quotas before each attempt) on projects/{config.vertex.project}, "
             f"roles/storage.objectUser on gs://{bucket}, roles/artifactregistry.reader on "
             f"{repository.name}, roles/iam.serviceAccountUser on itself",
             f"Cloud Build ({config.vertex.build_account or 'its default account'}): "
             f"roles/artifactregistry.writer on {repository.name}, "
             f"roles/storage.objectViewer on gs://{bucket}"
             + (", roles/logging.logWriter on the project"
                if config.vertex.build_service_account else "")
             + "".join(f", roles/artifactregistry.reader on the repository of {mirror}"
                       for mirror in (config.vertex.python_base_image,
                                      config.vertex.beam_sdk_image, config.vertex.pip_index_url)
                       if is_artifact_registry(mirror))]
    if training:
        lines.append(f"{training} (the {jobs}): roles/aiplatform.user and "
                     f"roles/logging.logWriter on projects/{config.vertex.project}, "
                     f"roles/storage.objectUser on gs://{bucket}, "
                     f"roles/artifactregistry.reader on {repository.name}")
    owners = reservation_projects(config)
    if owners:  # the training step reads them before each try (`vertex_launch`)
        lines.append(f"{account} (the training step): roles/compute.viewer, or "
                     "compute.reservations.get, on " + ", ".join(f"projects/{o}" for o in owners)
                     + ", where its reservations are")
    if repository.project != config.vertex.project:
        lines.append("Vertex AI's service agent (service-PROJECT_NUMBER@gcp-sa-aiplatform"
                     f".iam.gserviceaccount.com): roles/artifactregistry.reader on "
                     f"{repository.name}, which is in another project")
    if config.dataset.engine == "beam":
        workers = config.dataset.workers_account(config.vertex.service_account)
        separate = workers != config.vertex.service_account
        lines.append(f"{account} with dataset.engine beam: roles/dataflow.developer"
                     + (" and roles/dataflow.worker" if not separate else "")
                     + f" on projects/{config.vertex.project}")
        if separate:
            lines.append(f"{workers} (the Dataflow workers): roles/dataflow.worker on "
                         f"projects/{config.vertex.project}, roles/storage.objectUser on "
                         f"gs://{bucket}, roles/artifactregistry.reader on {repository.name}")
    return lines


def granted(check: Check, clients: Clients) -> set[str]:
    """Which of `check`'s permissions the caller holds (one request)."""
    from google.iam.v1 import iam_policy_pb2
    from google.protobuf import json_format

    request = iam_policy_pb2.TestIamPermissionsRequest(resource=check.resource,
                                                       permissions=check.permissions)
    if check.api == "Resource Manager":
        response = clients.get_projects().test_iam_permissions(request=request)
        return set(response.permissions)
    if check.api == "Artifact Registry":
        response = clients.get_builders()[1].test_iam_permissions(request=request)
        return set(response.permissions)
    if check.api == "Cloud Storage":
        bucket = clients.get_storage().bucket(check.resource[len("gs://"):])
        return set(bucket.test_iam_permissions(list(check.permissions)))
    session, endpoint = clients.get_iam()
    answer = session.post(f"{endpoint}/v1/{check.resource}:testIamPermissions",
                          json={"permissions": list(check.permissions)}, timeout=60)
    answer.raise_for_status()
    response = json_format.ParseDict(answer.json(), iam_policy_pb2.TestIamPermissionsResponse(),
                                     ignore_unknown_fields=True)
    return set(response.permissions)


#: What Vertex AI's service agent needs on a customer-managed key (Vertex AI docs,
#: "Customer-managed encryption keys"); the predefined role that holds both uses.
KEY_ROLE = "roles/cloudkms.cryptoKeyEncrypterDecrypter"


def key_access(config: Config, clients: Clients) -> str:
    """Whether Vertex AI's service agent may use `vertex.encryption_key`, from the key's
    IAM policy (Cloud KMS `getIamPolicy`), in one line: a line that starts with "warning:"
    when it may not or the policy cannot be read (a policy inherited from the key ring or
    the project is not seen here)."""
    key = config.vertex.encryption_key
    with remote_call(f"reading projects/{config.vertex.project}"):
        number = clients.get_projects().get_project(
            name=f"projects/{config.vertex.project}").name.split("/")[-1]
    agent = f"service-{number}@gcp-sa-aiplatform.iam.gserviceaccount.com"
    grant = (f"grant {KEY_ROLE} on {key} to serviceAccount:{agent} (gcloud kms keys "
             "add-iam-policy-binding)")
    session, endpoint = clients.get_kms()
    try:
        answer = session.post(f"{endpoint}/v1/{key}:getIamPolicy",
                              json={"options": {"requestedPolicyVersion": 3}}, timeout=60)
        answer.raise_for_status()
        bindings = answer.json().get("bindings", [])
    except Exception as exc:  # noqa: BLE001 - an unreadable policy is a warning, not a refusal
        return (f"warning: the IAM policy of {key} could not be read ({type(exc).__name__}: "
                f"{str(exc)[:200]}); Vertex AI's service agent needs {KEY_ROLE} on it: {grant}")
    if any(b.get("role") == KEY_ROLE and f"serviceAccount:{agent}" in b.get("members", [])
           for b in bindings):
        return f"CMEK: Vertex AI's service agent {agent} holds {KEY_ROLE} on {key}"
    return (f"warning: Vertex AI's service agent {agent} has no {KEY_ROLE} on {key} (its own "
            "policy; one on the key ring or the project is not seen here): every create "
            f"with the key would fail; {grant}")


def check_permissions(config: Config, clients: Clients, *, dry_run: bool,
                      log: Callable[[str], None] = say) -> list[Check]:
    """Checks the caller's permissions (or, with `dry_run`, prints the requests it would
    send); returns the checks.

    Raises:
        PermissionsError: Naming every missing permission, on which resource, and the role
            that grants it.
    """
    planned = checks(config)
    for line in default_account_warnings(config):
        log(line)
    log("IAM: not checked (testIamPermissions answers for the caller only), needed in the "
        "run:")
    for line in unchecked(config):
        log(f"  {line}")
    if dry_run:
        log("IAM: submit would check the caller's permissions with:")
        for check in planned:
            log(f"  {check.describe()}")
        if config.vertex.encryption_key:
            log(f"  Cloud KMS getIamPolicy on {config.vertex.encryption_key}: whether Vertex "
                f"AI's service agent holds {KEY_ROLE}")
        return planned
    missing = []
    for check in planned:
        with remote_call(f"checking permissions on {check.resource}"):
            held = granted(check, clients)
        missing += [(check, p) for p in check.permissions if p not in held]
    if missing:
        raise PermissionsError(
            "missing permissions (nothing was uploaded, built or submitted):\n" + "\n".join(
                f"  - {permission} on {check.resource} ({ROLES.get(permission, '')})"
                for check, permission in missing)
            + "\nthe README's \"IAM\" section lists the roles of every identity a run uses")
    log(f"IAM: the caller holds the {sum(len(c.permissions) for c in planned)} permissions "
        "submit needs")
    if config.vertex.encryption_key:
        log(key_access(config, clients))
    return planned


#: The predefined role that grants each permission (Google Cloud docs: "IAM roles and
#: permissions index").
ROLES = {
    "aiplatform.pipelineJobs.create": "roles/aiplatform.user",
    "aiplatform.customJobs.list": "roles/aiplatform.user or roles/aiplatform.viewer",
    "cloudquotas.quotas.get": "roles/cloudquotas.viewer",
    "cloudbuild.builds.create": "roles/cloudbuild.builds.editor",
    "cloudbuild.workerpools.use": "roles/cloudbuild.workerPoolUser",
    "artifactregistry.tags.get": "roles/artifactregistry.reader",
    "storage.buckets.get": "roles/storage.legacyBucketReader or roles/storage.admin",
    "storage.objects.create": "roles/storage.objectUser",
    "storage.objects.get": "roles/storage.objectUser",
    "iam.serviceAccounts.actAs": "roles/iam.serviceAccountUser on the service account",
}
