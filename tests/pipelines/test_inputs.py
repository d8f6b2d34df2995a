"""No input crashes the CLI, slips through, or reaches the network on a dry run.

Each case is one found by trying `gpu-pipeline` as a new user would: it must end with one
message naming the field, the value and what is valid, and exit code 2 (or 1 when
valid input meets a failure), never a traceback.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.cli import main

# Exercised here without an import, through the CLI and config loading:
# `pipelines.yaml_input` (bounded, safe YAML), `components.cloud_names` (Google Cloud
# names by their formats).

REPO = "us-central1-docker.pkg.dev/my-proj/ml-images"
VERTEX = ["--project", "my-proj", "--pipeline-root", "gs://pipelines-x/root",
          "--image-repository", REPO]


def _config(tmp_path: Path, text: str | bytes, name: str = "c.yaml") -> str:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


CONFIG_CASES = [
    (b"training:\n  epochs: \xff\xfe\n", "is not UTF-8 text"),
    ("a: " + "[" * 200 + "]" * 200 + "\n", "nests deeper than 32 levels"),
    ("trainingInput: hello\n", "trainingInput is 'hello'; expected a mapping"),
    ("vertex: [1, 2]\n", "vertex is [1, 2]; expected a mapping with the fields region"),
    ("vertex:\n  worker_pool_specs:\n  - machine_spec: {machine_type: n1-standard-8, "
     "accelerator_type: [NVIDIA_TESLA_T4], accelerator_count: 1}\n",
     "accelerator_type is ['NVIDIA_TESLA_T4']; expected one GPU type name"),
    ("training:\n  learning_rate: .nan\n", "training.learning_rate is nan; expected a finite"),
    ("training:\n  learning_rate: .inf\n", "training.learning_rate is inf; expected a finite"),
    ("vertex:\n  worker_pool_specs:\n  - machine_spec: {machine_type: n1-standard-8}\n"
     "    replica_count: 1.0e+20\n",
     "replica_count is 100000000000000000000; expected an integer from 1 to 10000"),
    ("schedule:\n  cron: '99 99 99 99 99'\n", "not a valid unix-cron schedule"),
    ("schedule:\n  cron: 'a b c d e'\n", "not a valid unix-cron schedule"),
    ("vertex:\n  project: 'My Project!!/../x'\n", "vertex.project is 'My Project!!/../x'; "
                                                  "expected a project ID"),
    ("vertex:\n  service_account: trainer\n", "vertex.service_account is 'trainer'; expected a "
                                              "service account email"),
    ("vertex:\n  pipeline_root: 'gs://Bad_Bucket!!/x'\n",
     "bucket 'Bad_Bucket!!' is not a valid Cloud Storage bucket name"),
    ("vertex:\n  timeout: 0s\n", "vertex.timeout is '0s'; expected a positive number"),
    ("vertex:\n  model_display_name: ''\n", "vertex.model_display_name is ''; expected 1 to 128"),
    # gcpc's ModelUploadOp puts the display name into its request's JSON unescaped.
    ("vertex:\n  model_display_name: 'flowers \"v2\"'\n",
     "vertex.model_display_name is 'flowers \"v2\"'; contains '\"' or '\\', which"),
    ("vertex:\n  model_display_name: 'a\\\\b'\n", "puts unescaped into its request's JSON"),
    # Vertex AI refuses a reference with a tag and a digest (400 Invalid image URI).
    ("vertex:\n  serving_image: 'us-docker.pkg.dev/p/r/s:v1@sha256:" + "a" * 64 + "'\n",
     "vertex.serving_image is 'us-docker.pkg.dev/p/r/s:v1@sha256:"),
    ("vertex:\n  serving_image: 'us-docker.pkg.dev/p/r/s:v1@sha256:" + "a" * 64 + "'\n",
     "names both a tag and a digest, which Vertex AI refuses"),
    ("vertex:\n  build_timeout: 90000s\n", "vertex.build_timeout is '90000s'; expected a "
                                            "positive number of seconds up to 86400s"),
    ("vertex:\n  build_machine_type: n1-standard-8\n",
     "vertex.build_machine_type is 'n1-standard-8'; expected one of"),
    ("schedule:\n  display_name: ''\n", "schedule.display_name is ''; expected 1 to 128"),
    ("training:\n  epochs: 1\n  epochs: 2\n", "repeats the key 'epochs' (lines 2 and 3)"),
    ("trainingInput:\n  scaletier: CUSTOM\n  masterType: n1-standard-8\n",
     "unknown key 'scaletier'; did you mean scaleTier?"),
    ("trainingInput:\n  scaleTier: CUSTOM\n  masterType: n1-standard-8\n  colour: red\n",
     "unknown key 'colour'; valid keys are args"),
    ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
     "expands to more than 100000 values"),
    ("dataset:\n  source: http://example.com/images\n", "the scheme http:// is not read"),
    ("dataset:\n  source: builtin://circles\n", "the only builtin dataset is builtin://shapes"),
    ("vertex:\n  worker_pool_specs:\n  - machine_spec: {machine_type: n1-standard-8, "
     "accelerator_type: NVIDIA_TESLA_T4, accelerator_count: 0}\n",
     "accelerator_count is 0; give at least 1 GPU"),
]


@pytest.mark.parametrize("text,message", CONFIG_CASES,
                         ids=[f"config-{i}" for i in range(len(CONFIG_CASES))])
def test_bad_config_files_end_with_one_message(text, message, tmp_path, capsys):
    path = _config(tmp_path, text)
    assert main(["compile", "--config", path, "--output", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("error: ")
    assert len(err) < 5000  # shortened, whatever the input
    assert not (tmp_path / "s.yaml").exists()


@pytest.mark.parametrize("args,message", [
    (["compile", "--output", "/proc/spec.yaml"], "--output '/proc/spec.yaml' cannot be written"),
    (["compile", "--output", "/tmp/" + "a" * 300 + ".yaml"], "cannot be written"),
    (["publish", "gs://", "--tag", "v1"], "publish destination 'gs://'"),
    (["publish", "gs://shared-x/p", "--tag", "v 1 ; rm -rf"], "tags ['v 1 ; rm -rf'] are invalid"),
    (["publish", "https://example.com/x"], "neither an Artifact Registry Kubeflow Pipelines"),
    (["schedule", "pause", "../42", "--project", "my-proj"], "neither a schedule ID"),
    (["validate-gpu", "--machine-type", "n1-standard-8", "--accelerator-type",
      "NVIDIA_TESLA_T4", "--accelerator-count", "0"], "accelerator_count is 0"),
])
def test_bad_flags_end_with_one_message(args, message, capsys):
    code = main(args)
    out = capsys.readouterr()
    assert code in (1, 2) and message in out.err + out.out


def test_flags_take_effect_where_they_are_accepted(tmp_path, capsys):
    out = tmp_path / "spec.yaml"
    assert main(["compile", "--epochs", "77", "--region", "europe-west4", "--output",
                 str(out)]) == 0
    params = yaml.safe_load(out.read_text())["root"]["inputDefinitions"]["parameters"]
    assert params["training"]["defaultValue"]["epochs"] == 77
    assert params["vertex"]["defaultValue"]["region"] == "europe-west4"
    with pytest.raises(SystemExit):  # schedule list uses no training options
        main(["schedule", "list", "--epochs", "3"])


def test_yaml_booleans_for_switches(tmp_path):
    from pipelines.config_loading import load_config

    config = load_config(_config(tmp_path, "training:\n  xla: on\n  mixed_precision: off\n"))
    assert config.training.xla == "on" and config.training.mixed_precision == "off"


@pytest.fixture
def no_network(monkeypatch):
    """Every connection that is not to loopback fails (and is recorded)."""
    attempts = []
    real = socket.socket.connect

    def connect(sock, address):
        host = address[0] if isinstance(address, tuple) else address
        if host not in ("127.0.0.1", "::1", "localhost"):
            attempts.append(address)
            raise OSError("network disabled by the test")
        return real(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: (_ for _ in ()).throw(
        OSError("network disabled by the test")))
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    return attempts


@pytest.mark.parametrize("args", [
    ["submit", "--dry-run", *VERTEX],
    ["schedule", "create", "--dry-run", *VERTEX],
    ["schedule", "list", "--dry-run", "--project", "my-proj"],
    ["schedule", "pause", "42", "--dry-run", "--project", "my-proj"],
    ["schedule", "resume", "42", "--dry-run", "--project", "my-proj"],
    ["schedule", "delete", "42", "--dry-run", "--project", "my-proj"],
    ["publish", "gs://shared-x/p", "--dry-run", *VERTEX],
], ids=lambda a: " ".join(a[:2]))
@pytest.mark.slow
def test_dry_runs_never_touch_the_network(args, no_network, capsys):
    assert main(args) == 0, capsys.readouterr().err
    assert no_network == []


@pytest.mark.slow
def test_a_dry_run_without_credentials_looks_for_them_once(no_network, monkeypatch, capsys):
    # Without credentials google-auth asks the Compute Engine metadata server, three
    # times with back-off (3 s on a laptop); each client the dry run made asked again.
    from google.auth.compute_engine import _metadata

    pings = []
    real = _metadata.ping
    monkeypatch.setattr(_metadata, "ping", lambda *a, **k: pings.append(1) or real(*a, **k))
    monkeypatch.setenv("HOME", "/nonexistent")  # no gcloud application-default credentials
    monkeypatch.delenv("CLOUDSDK_CONFIG", raising=False)
    assert main(["submit", "--dry-run", *VERTEX]) == 0, capsys.readouterr().err
    assert len(pings) == 1


@pytest.mark.parametrize("args", [
    ["submit", *VERTEX],
    ["schedule", "list", "--project", "my-proj"],
    ["publish", "https://us-central1-kfp.pkg.dev/my-proj/pipelines", *VERTEX],
], ids=lambda a: " ".join(a[:2]))
@pytest.mark.slow
def test_without_network_or_credentials_a_clear_message(args, no_network, monkeypatch,
                                                        capsys):
    monkeypatch.setenv("HOME", "/nonexistent")  # no gcloud application-default credentials
    monkeypatch.delenv("CLOUDSDK_CONFIG", raising=False)
    code = main(args)
    err = capsys.readouterr().err
    assert code in (1, 2), err
    assert err.startswith("error: ") and "Traceback" not in err
    assert "credentials" in err or "failed" in err


# --- Property-based: random documents and flags never end in a traceback ------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                     st.text(max_size=20))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=20)
_keys = st.sampled_from(["dataset", "training", "vertex", "schedule", "trainingInput",
                         "worker_pool_specs", "epochs", "machine_spec", "scaleTier", "x"])
_documents = st.one_of(
    _values,
    st.dictionaries(_keys, _values, max_size=4),
    st.fixed_dictionaries({"vertex": st.fixed_dictionaries({"worker_pool_specs": st.lists(
        st.dictionaries(st.sampled_from(["machine_spec", "replica_count", "container_spec"]),
                        _values, max_size=3), max_size=5)})}),
    st.fixed_dictionaries({"trainingInput": st.dictionaries(st.sampled_from(
        ["scaleTier", "masterType", "workerCount", "workerType", "workerConfig",
         "parameterServerCount", "evaluatorCount", "region"]), _values, max_size=6)}),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=_documents)
@pytest.mark.slow
def test_random_documents_never_crash_config_loading_or_validate_gpu(document, tmp_path_factory):
    from components.gpu.pools import with_role_checks
    from pipelines.commands.validate_gpu import validate_file
    from pipelines.config import ConfigError
    from pipelines.config_loading import load_config
    from trainer.common.errors import ProjectError

    path = tmp_path_factory.mktemp("doc") / "doc.yaml"
    path.write_text(json.dumps(document, allow_nan=True))
    try:
        load_config(path)
    except ConfigError:
        pass
    try:
        result, _, _, training = validate_file(path, None)
        assert isinstance(result.ok, bool)
        checked = with_role_checks(result, training)  # the roles and the training plan
        assert checked.ok is (checked.plan is not None)
    except ProjectError:
        pass


_flag_values = st.one_of(st.text(max_size=30), st.integers().map(str),
                         st.floats().map(str), st.sampled_from(["", "-1", "0", "nan", "1e20"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flag=st.sampled_from(["--epochs", "--batch-size", "--learning-rate", "--model", "--xla",
                             "--region", "--dataset-source", "--dataset-image-size",
                             "--seed", "--cache-budget-mb", "--strategy"]),
       value=_flag_values)
@pytest.mark.slow
def test_random_flag_values_never_crash(flag, value, tmp_path_factory):
    out = tmp_path_factory.mktemp("spec") / "spec.yaml"
    try:
        code = main(["compile", "--output", str(out), f"{flag}={value}"])
    except SystemExit as exit_:  # argparse's own usage errors: exit 2 with a message
        code = exit_.code
    assert code in (0, 2)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # output is discarded
@given(machine=st.text(max_size=20), gpu=st.text(max_size=20),
       count=st.one_of(st.integers(), st.text(max_size=5).map(lambda t: t)),
       replicas=st.integers(min_value=-5, max_value=10**6))
def test_random_validate_gpu_flags_never_crash(machine, gpu, count, replicas, capsys):
    args = ["validate-gpu", "--machine-type", machine or "x", "--accelerator-type", gpu,
            "--accelerator-count", str(count), "--replica-count", str(replicas)]
    try:
        code = main(args)
    except SystemExit as exit_:
        code = exit_.code
    capsys.readouterr()
    assert code in (0, 1, 2)
