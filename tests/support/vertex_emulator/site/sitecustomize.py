"""Loaded by every process of the emulated Vertex AI run (through PYTHONPATH).

Google's own code runs unchanged; only what cannot exist here is redirected:

- requests to `*.googleapis.com` go to the fake APIs on loopback (EMULATED_GOOGLE_APIS);
- Google API clients use their REST transport (the fake speaks REST, not gRPC) and
  credentials that need no account;
- the google-cloud-pipeline-components launchers and the project's training launcher
  poll every 0.2 s instead of 20 s (the latter retries a failed look after 0.2 s, and
  takes a look that lasts 2 s as timed out);
- Cloud Monitoring's gRPC client goes to the fake's ListTimeSeries (EMULATED_MONITORING);
- the dataset stage's Dataflow jobs go to the fake Dataflow API (EMULATED_DATAFLOW), whose
  state it follows every 0.2 s;
- Vertex AI's Cloud Storage mount `/gcs/` is the stand-in directory EMULATED_GCS_MOUNT
  (for KFP's executor and the project), where directory renames fail as on Cloud
  Storage FUSE (`rename-dir-limit` 0).
"""

import errno
import importlib.abc
import os
import sys

APIS = os.environ.get("EMULATED_GOOGLE_APIS")
MOUNT = os.environ.get("EMULATED_GCS_MOUNT")
DATAFLOW = os.environ.get("EMULATED_DATAFLOW")
MONITORING = os.environ.get("EMULATED_MONITORING")


def _credentials(*args, **kwargs):
    from google.oauth2.credentials import Credentials

    return Credentials(token="emulated"), os.environ.get("GOOGLE_CLOUD_PROJECT", "emulated")


def _patch_auth(module):
    module.default = _credentials


def _patch_requests(module):
    original = module.Session.request

    def request(self, method, url, *args, **kwargs):
        scheme, _, rest = str(url).partition("://")
        host, _, path = rest.partition("/")
        if host.endswith("googleapis.com") and not host.startswith(("storage.", "oauth2.")):
            headers = dict(kwargs.pop("headers", None) or {})
            headers["X-Emulated-Host"] = host
            url = f"{APIS}/{path}"
            kwargs["headers"] = headers
        return original(self, method, url, *args, **kwargs)

    module.Session.request = request


def _rest_transport(client_module):
    def patch(module):
        for value in vars(module).values():
            registry = getattr(value, "_transport_registry", None)
            if isinstance(value, type) and registry and "rest" in registry:
                value.get_transport_class = classmethod(
                    lambda cls, label=None: cls._transport_registry[label or "rest"])
    return patch


def _fast_polling(module):
    module._POLLING_INTERVAL_IN_SECONDS = 0.2


def _fast_launcher(module):
    # Looks every 0.2 s; after a failed look, again in 0.2 s (doubled); a look that takes
    # 2 s has timed out (the fake's "timeout" fault answers after longer).
    module.POLL_SECONDS = 0.2
    module.RETRY_FIRST_DELAY = 0.2
    module.REQUEST_TIMEOUT = 2.0


def _monitoring_channel(module):
    # Cloud Monitoring's Python client speaks gRPC only: its ListTimeSeries is served by
    # the fake on EMULATED_MONITORING, without TLS.
    def metrics_client():
        import grpc
        from google.cloud import monitoring_v3
        from google.cloud.monitoring_v3.services.metric_service.transports import (
            MetricServiceGrpcTransport,
        )

        return monitoring_v3.MetricServiceClient(transport=MetricServiceGrpcTransport(
            channel=grpc.insecure_channel(MONITORING)))

    module.metrics_client = metrics_client


def _kfp_mount(module):
    module._GCS_LOCAL_MOUNT_PREFIX = MOUNT


def _project_mount(module):
    module.GCS_MOUNT = MOUNT


def _dataflow_endpoint(module):
    # Beam's Dataflow client calls the API at the job's `--dataflow_endpoint` (through
    # httplib2, which the requests redirect above does not see): the fake Dataflow's.
    import dataclasses

    make = module.dataflow_job

    def dataflow_job(*args, **kwargs):
        return dataclasses.replace(make(*args, **kwargs), endpoint=DATAFLOW)

    module.dataflow_job = dataflow_job
    module.POLL_SECONDS = 0.2


def _refuse_directory_renames():
    def refuse(rename):
        def wrapped(src, dst, *args, **kwargs):
            if os.path.isdir(src) and os.path.abspath(src).startswith(MOUNT.rstrip("/")):
                raise OSError(errno.ENOTSUP, "Cloud Storage FUSE does not rename directories "
                              "(rename-dir-limit is 0)", src)
            return rename(src, dst, *args, **kwargs)
        return wrapped

    # shutil.move then falls back to copying, as it would on Cloud Storage FUSE.
    os.rename = refuse(os.rename)
    os.replace = refuse(os.replace)


PATCHES = {
    "google.auth": _patch_auth,
    "requests.sessions": _patch_requests,
    "google.cloud.aiplatform_v1.services.job_service.client": _rest_transport("job"),
    "google.cloud.aiplatform_v1.services.model_service.client": _rest_transport("model"),
    "google.cloud.aiplatform_v1.services.pipeline_service.client":
        _rest_transport("pipeline"),
    "google.cloud.aiplatform_v1.services.endpoint_service.client": _rest_transport("endpoint"),
    "google.cloud.aiplatform_v1.services.prediction_service.client":
        _rest_transport("prediction"),
    "google.cloud.aiplatform_v1.services.metadata_service.client": _rest_transport("metadata"),
    "google.cloud.aiplatform_v1.services.tensorboard_service.client":
        _rest_transport("tensorboard"),
    "google.cloud.devtools.cloudbuild_v1.services.cloud_build.client": _rest_transport("build"),
    "google.cloud.artifactregistry_v1.services.artifact_registry.client":
        _rest_transport("registry"),
    "google.cloud.cloudquotas_v1.services.cloud_quotas.client": _rest_transport("quotas"),
    "google.cloud.billing_v1.services.cloud_catalog.client": _rest_transport("billing"),
    # Where the looks' timing is declared, and where the launcher reads it.
    "components.capacity.following": _fast_launcher,
    "components.capacity.vertex_launch": _fast_launcher,
    "google_cloud_pipeline_components.container.v1.gcp_launcher.job_remote_runner":
        _fast_polling,
    "google_cloud_pipeline_components.container.v1.gcp_launcher.lro_remote_runner":
        _fast_polling,
    "kfp.dsl.types.artifact_types": _kfp_mount,
    "trainer.common.gcs": _project_mount,
    **({"components.dataset.dataflow": _dataflow_endpoint} if DATAFLOW else {}),
    **({"components.cloud_monitoring": _monitoring_channel} if MONITORING else {}),
}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Applies a patch right after its module is first executed."""

    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_module
        return spec


if APIS and MOUNT:
    _refuse_directory_renames()
    sys.meta_path.insert(0, _AfterImport())
