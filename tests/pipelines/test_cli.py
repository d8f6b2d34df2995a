"""The `gpu-pipeline` command: clear messages and exit codes, never a traceback."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.prices import shipped_table
from pipelines.cli import build_parser, main
from pipelines.commands.common import DEFAULT_SPEC
from pipelines.config import ConfigError
from pipelines.config_loading import load_config
from tests.support.facts import figures, listed_after, missing
from tests.support.paths import ROOT
from trainer.common.shell_name import command
from trainer.run.training_options import TrainingOptions

# Exercised here without an import, through `cli.COMMANDS` and `main`: the command modules
# `pipelines.commands.run`, `pipelines.commands.compile`, `pipelines.commands.submit`,
# `pipelines.commands.schedule`, `pipelines.commands.models`, `pipelines.commands.publish`,
# `pipelines.commands.batch_predict` (with `components.serving.batch`), and through
# `predict --config`/`--endpoint`: `components.serving.online`.

BIN = Path(sys.executable).parent / "gpu-pipeline"


def test_every_command_is_a_module_the_cli_assembles():
    """One module per command, each with its flags (`add_parser`) and its work (`run`);
    the parser is built from them alone, every time the same."""
    import pkgutil

    from pipelines import cli, commands

    modules = {info.name for info in pkgutil.iter_modules(commands.__path__)} - {"common"}
    assert {m.__name__.rsplit(".", 1)[1] for m in cli.COMMANDS.values()} == modules
    for name, module in cli.COMMANDS.items():
        assert callable(module.add_parser) and callable(module.run), name
    first, second = cli.build_parser(), cli.build_parser()
    assert first.format_help() == second.format_help()
    from pipelines.commands.common import overrides

    given = overrides(first.parse_args(["run", "--local", "--epochs", "3",
                                        "--training-machines", "3"]))
    assert given["training"] == {"epochs": 3} and given["local"]["training_machines"] == 3


def test_the_former_name_of_a_flag_still_works_with_a_warning(capsys):
    """`--workers` counted the training machines, while a layout's workers are one fewer:
    it is `--training-machines` now, and the old name is read as it with a warning."""
    from pipelines import cli
    from pipelines.commands.common import overrides

    parser = cli.build_parser()
    given = overrides(parser.parse_args(["run", "--local", "--workers", "3"]))
    assert given["local"]["training_machines"] == 3
    assert not missing(capsys.readouterr().err, "warning: --workers is deprecated",
                       "--training-machines 3")
    both = overrides(parser.parse_args(["run", "--local", "--workers", "3",
                                        "--training-machines", "2"]))
    assert both["local"]["training_machines"] == 2
    assert "--training-machines 2 wins" in capsys.readouterr().err
    assert "--workers" not in parser.format_help()


def run(*args, cwd=None):
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


@pytest.mark.parametrize("args,message", [
    (["run", "--local", "--epochs", "0"], "training.epochs is 0; expected an integer from 1 "
                                          "to 10000"),
    (["run", "--local", "--colour", "red"], "unrecognized arguments: --colour red"),
    (["run"], "gpu-pipeline run --local`"),
    (["run", "--local", "--config", "/no/such.yaml"], "--config '/no/such.yaml' is not a "
                                                      "readable file"),
    (["run", "--local", "--dataset-source", "/no/such/dir"], "dataset.source is '/no/such/dir'"),
    (["run", "--local", "--training-machines", "9"], "local.training_machines is 9; expected an "
                                           "integer from 1 to 8"),
    (["compile", "--region", "mars-1"], "region is 'mars-1', which offers no GPUs"),
    (["run", "--local", "--pipeline-root", "/dev/null/runs"],
     "--pipeline-root '/dev/null/runs' cannot be created (Not a directory)"),
    (["compile", "--output", "/dev/null/specs/spec.yaml"],
     "--output's directory '/dev/null/specs' cannot be created (Not a directory)"),
    (["compile", "--output", "spec.txt"], "--output 'spec.txt' must end in .yaml, .yml or .json"),
    (["run", "--local", "--dataset-source", "/gcs/images/flowers"],
     "for a local run give 'gs://images/flowers'"),
])
@pytest.mark.slow
def test_user_mistakes(args, message, tmp_path):
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert list(tmp_path.iterdir()) == []  # nothing was started or written


def test_a_usage_error_is_one_line_and_flags_are_never_abbreviated(tmp_path, capsys):
    # `--epoch` would have been taken as `--epochs` by argparse's abbreviations.
    with pytest.raises(SystemExit, match="2"):
        main(["run", "--local", "--epoch", "3"])
    err = capsys.readouterr().err
    assert err == ("gpu-pipeline run: error: unrecognized arguments: --epoch 3 (see "
                   "gpu-pipeline run --help)\n")
    with pytest.raises(SystemExit, match="2"):
        main(["compile", "--out", str(tmp_path / "spec.yaml")])
    assert capsys.readouterr().err.splitlines() == [
        "gpu-pipeline compile: error: unrecognized arguments: --out "
        f"{tmp_path / 'spec.yaml'} (see gpu-pipeline compile --help)"]
    assert list(tmp_path.iterdir()) == []


def test_an_empty_config_file_is_warned_about(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    assert main(["compile", "--config", str(empty), "--output", str(tmp_path / "s.yaml")]) == 0
    out, err = capsys.readouterr()
    assert not missing(err, "warning: ", str(empty), "empty")
    # The spec names the images by a placeholder: it says so, and what makes one that runs.
    assert not missing(out, "us-central1-docker.pkg.dev/PROJECT_ID/",
                       "gpu-pipeline submit --config CONFIG",
                       "gpu-pipeline publish DESTINATION --config CONFIG")
    # Each command it prints parses as printed (with its placeholders filled in).
    printed = re.findall(r"`(\S*gpu-pipeline [^`]+)`", out)
    assert len(printed) == 2, out
    for line in printed:
        words = shlex.split(line.replace("CONFIG", "my.yaml").replace(
            "DESTINATION", "gs://bucket/shared/"))
        build_parser().parse_args(words[1:])


def test_invalid_config_refused_before_compiling(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("vertex:\n  worker_pool_specs:\n    - machine_spec: {machine_type: "
                      "n1-standard-32, accelerator_type: NVIDIA_TESLA_V100, "
                      "accelerator_count: 2}\n")
    out = tmp_path / "spec.yaml"
    result = run("compile", "--config", str(config), "--output", str(out))
    assert result.returncode == 2
    assert "n1-standard-32 takes 4, 8 x NVIDIA_TESLA_V100" in result.stderr
    assert not out.exists()


def test_compile_writes_the_spec(tmp_path):
    out = tmp_path / "nested" / "spec.yaml"
    assert main(["compile", "--output", str(out)]) == 0
    assert "gpu-training-pipeline" in out.read_text()


def test_compile_never_writes_a_configuration_over_the_projects_own_spec(tmp_path, monkeypatch):
    """Without --output, a configuration's spec goes beside its file and other flags' to a
    file of their own: the project's compiled/ spec (which `make compile` regenerates and
    a test holds against the code) is written only when nothing changes it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "mine.yaml"
    config.write_text("training:\n  epochs: 3\n")
    assert main(["compile", "--config", str(config)]) == 0
    assert (tmp_path / "configs" / "mine.pipeline.yaml").is_file()
    assert main(["compile", "--epochs", "4"]) == 0
    assert (tmp_path / "compiled" / "custom_pipeline.yaml").is_file()
    assert not (tmp_path / DEFAULT_SPEC).exists()
    assert main(["compile"]) == 0
    assert (tmp_path / DEFAULT_SPEC).is_file()
    # In this checkout, those two files leave `git status` clean; the project's spec is
    # tracked.
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", "config.example.pipeline.yaml",
         "compiled/custom_pipeline.yaml", str(DEFAULT_SPEC)], capture_output=True, text=True)
    assert ignored.stdout.split() == ["config.example.pipeline.yaml",
                                      "compiled/custom_pipeline.yaml"]


def test_validate_gpu(capsys):
    ok = ["validate-gpu", "--machine-type", "n1-standard-8", "--accelerator-type",
          "NVIDIA_TESLA_T4", "--accelerator-count", "1", "--replica-count", "3",
          "--region", "us-central1", "--json"]
    assert main(ok) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and [p["replica_count"] for p in report["worker_pool_specs"]] == [1, 2]
    bad = ["validate-gpu", "--machine-type", "n1-standard-4", "--accelerator-type",
           "NVIDIA_TESLA_T4", "--accelerator-count", "3"]
    assert main(bad) == 1
    assert "n1-standard-4 takes 1, 2, 4 x NVIDIA_TESLA_T4" in capsys.readouterr().out
    assert main(["validate-gpu"]) == 2
    assert "give --machine-type" in capsys.readouterr().err


def test_validate_gpu_prices_each_configuration(tmp_path, capsys):
    # The shipped table (no catalog here), us-central1: Compute Engine's n1-standard-8
    # (0.38) and T4 (0.35), each 1.15 times for Vertex AI: 0.437 and 0.4025.
    assert main(["validate-gpu", "--machine-type", "n1-standard-8", "--accelerator-type",
                 "NVIDIA_TESLA_T4", "--accelerator-count", "1", "--replica-count", "2"]) == 0
    # Two machines with a T4 each: 2 x (0.437 + 0.4025), every part priced.
    price = capsys.readouterr().out.splitlines()[-1]
    assert figures(price)[0] == pytest.approx(1.68)
    assert not missing(price, "shipped table") and "without a price" not in price
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"vertex": {
        "prices": {"NVIDIA_TESLA_T4": 0.35, "SPOT:NVIDIA_TESLA_T4": 0.1},
        "fallbacks": [{"scheduling_strategy": "SPOT"}]}}))
    assert main(["validate-gpu", "--config", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    prices = [line for line in out if "price:" in line]
    # The default pools (2 machines, a T4 each), on demand and then as Spot VMs: the
    # machine's Spot price is Compute Engine's (0.11605) plus the management fee (0.15 of
    # its on-demand 0.38: 0.057).
    shipped = f"us-central1 prices of {shipped_table.READ}, from the shipped table; " \
        "vertex.prices over them"
    # 2 x (0.437 + 0.35) and 2 x (0.17305 + 0.10), by hand.
    assert [figures(line)[0] for line in prices] == [pytest.approx(1.57), pytest.approx(0.55)]
    assert all(shipped in line for line in prices)
    assert "priced on demand" not in prices[1]
    # Offline there is no measured speed: the most each job can cost is its whole timeout
    # (the default 7 days).
    most = [line for line in out if "cost:" in line]
    # 2 x (0.437 + 0.35) = 1.574 USD an hour for 168 h: 264.43 USD; Spot 2 x (0.17305 +
    # 0.1) for 168 h: 91.74 USD.
    assert figures(most[0])[0] == pytest.approx(264.43, abs=0.01)
    assert not missing(most[0], "vertex.timeout 604800s", "168 h")
    assert figures(most[1])[0] == pytest.approx(91.74, abs=0.01)


def test_validate_gpu_reads_the_documents_config_yaml(tmp_path, capsys):
    from tests.support.seed_configs import (
        SEED_CONFIG_COMPUTE_ENGINE,
        SEED_CONFIG_LEGACY,
    )

    for text, gpu, valid in ((SEED_CONFIG_COMPUTE_ENGINE, "NVIDIA_TESLA_T4", True),
                             (SEED_CONFIG_LEGACY, "NVIDIA_TESLA_K80", False)):
        path = tmp_path / "config.yaml"
        path.write_text(text)
        assert main(["validate-gpu", "--config", str(path), "--region", "us-central1",
                     "--json"]) == (0 if valid else 1)
        report = json.loads(capsys.readouterr().out)
        assert report["ok"] is valid and report["input"] == "AI Platform config.yaml"
        assert [p["replica_count"] for p in report["worker_pool_specs"]] == [1, 9, 3]
        assert report["worker_pool_specs"][1]["machine_spec"]["accelerator_type"] == gpu
        if valid:  # the documents' headline layout: parameter servers, 4 x T4 per machine
            assert report["training_plan"] == {
                "strategy": "parameter_server", "all_reduce": "none", "mixed_precision": "off",
                "xla": False, "accelerator": "NVIDIA_TESLA_T4", "gpus_per_machine": 4,
                "reduction_server": False, "nvidia_environment": False, "keep_nhwc": False,
                "prefetch_to_gpu": False, "measured": {},
                "reasons": report["training_plan"]["reasons"]}
        else:  # the legacy machine types carry K80s, which no CUDA 12 image runs
            assert report["training_plan"] is None
            assert all(not missing(e, "complex_model_m_gpu", "4 x NVIDIA_TESLA_K80")
                       for e in report["errors"])
            assert "to paste in its place:\n      trainingInput:\n" in report["errors"][-1]


def test_validate_gpu_plans_a_reduction_server_under_europe_docker_and_names_its_plugin(
        tmp_path, capsys, monkeypatch):
    """The reducer image under europe-docker.pkg.dev (the nearest multi-region for a job in
    europe-west4) was taken for parameter servers; it plans NCCL through the reducers, and
    says which plugin the GPU image gets, pinned or resolved when it is built."""
    from components import images

    v100 = {"machine_spec": {"machine_type": "n1-highmem-96",
                             "accelerator_type": "NVIDIA_TESLA_V100", "accelerator_count": 8},
            "replica_count": 1}
    path = tmp_path / "pools.json"
    path.write_text(json.dumps([v100, {**v100, "replica_count": 4}, {
        "machine_spec": {"machine_type": "n1-highcpu-16"}, "replica_count": 16,
        "container_spec": {"image_uri": "europe-docker.pkg.dev/vertex-ai-restricted/training/"
                                        "reductionserver:latest"}}]))
    command = ["validate-gpu", "--config", str(path), "--region", "europe-west4", "--json"]
    for pinned in (None, "1.2.3"):
        monkeypatch.setattr(images, "reduction_server_plugin",
                            lambda root=None, pinned=pinned: pinned)
        assert main(command) == 0
        report = json.loads(capsys.readouterr().out)
        plan = report["training_plan"]
        assert (plan["strategy"], plan["all_reduce"], plan["reduction_server"], plan["xla"],
                plan["mixed_precision"]) == ("multi_worker_mirrored", "nccl", True, False,
                                             "float16")
        assert report["ok"] and report["errors"] == []
        (said,) = [w for w in report["warnings"] if "NCCL plugin" in w]
        assert ("google-reduction-server=1.2.3 (pinned by" if pinned else
                "resolved when the GPU image is built") in said


def test_validate_gpu_reports_every_problem_of_a_pools_file(tmp_path):
    path = tmp_path / "pools.json"
    path.write_text(json.dumps([
        {"machine_spec": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
                          "accelerator_count": 1}, "replica_count": 2},
        {"machine_spec": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_P100",
                          "accelerator_count": 1}, "replica_count": 2},
        {"machine_spec": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_K80",
                          "accelerator_count": 1}, "replica_count": 1}]))
    result = run("validate-gpu", "--config", str(path), "--region", "us-central1")
    assert result.returncode == 1
    assert not missing(result.stdout, "worker_pool_specs[0] (chief): replica_count is 2",
                       "exactly 1")
    assert "no single zone of us-central1 offers together" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_validate_gpu_applies_the_scheduling_strategy_s_rules_as_submit_does(tmp_path, capsys):
    # FLEX_START (Dynamic Workload Scheduler) serves no T4: submit refuses this config, and
    # so does validate-gpu (it runs the same check).
    config = tmp_path / "flex.yaml"
    config.write_text("vertex:\n  scheduling_strategy: FLEX_START\n  worker_pool_specs:\n"
                      "    - machine_spec: {machine_type: n1-standard-8, accelerator_type: "
                      "NVIDIA_TESLA_T4, accelerator_count: 1}\n      replica_count: 1\n")
    assert main(["validate-gpu", "--config", str(config)]) == 1
    assert "scheduling_strategy FLEX_START serves only NVIDIA_L4" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="scheduling_strategy FLEX_START serves only"):
        load_config(config)


def test_validate_gpu_refuses_unknown_files(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("colour: red\n")
    result = run("validate-gpu", "--config", str(path))
    assert result.returncode == 2 and "in no format validate-gpu reads" in result.stderr


def test_run_refuses_zone_and_job_name_problems_before_any_work(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        "vertex:\n  job_name: nightly-train\n  worker_pool_specs:\n"
        "    - {machine_spec: {machine_type: n1-standard-8, accelerator_type: NVIDIA_TESLA_T4,"
        " accelerator_count: 1}, replica_count: 1}\n"
        "    - {machine_spec: {machine_type: n1-standard-8, accelerator_type: NVIDIA_TESLA_P100,"
        " accelerator_count: 1}, replica_count: 1}\n"
        "    - {machine_spec: {machine_type: n1-standard-8, accelerator_type: NVIDIA_TESLA_K80,"
        " accelerator_count: 1}, replica_count: 1}\n")
    result = run("run", "--local", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 2
    assert "vertex.region us-central1: the job uses" in result.stderr
    assert "vertex.job_name is 'nightly-train', which contains '-'" in result.stderr
    assert "vertex.worker_pool_specs[2] (parameter server): machine_spec.accelerator_type " \
        "NVIDIA_TESLA_K80 cannot run the trainer image" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_predict_on_vertex_prints_the_request_with_dry_run(tmp_path):
    (tmp_path / "cat.png").write_bytes(b"\x89PNG" + b"x" * 96)
    (tmp_path / "config.yaml").write_text(
        "vertex:\n  project: my-proj\n  region: europe-west4\n  deploy:\n    endpoint: serving\n")
    result = run("predict", "cat.png", "--config", "config.yaml", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == ("POST https://europe-west4-aiplatform.googleapis.com/v1/projects/"
                        "my-proj/locations/europe-west4/endpoints/<the ID of the endpoint "
                        "named 'serving'>:predict")
    body = json.loads("\n".join(lines[2:lines.index("}") + 1]))
    assert body == {"instances": [{"b64": "<100 bytes of base64 image>"}]}
    assert lines[-1] == "(dry run: nothing was sent)"

    named = "projects/p2/locations/us-east1/endpoints/42"
    result = run("predict", "cat.png", "--endpoint", named, "--dry-run", cwd=tmp_path)
    assert result.stdout.splitlines()[0] == (
        f"POST https://us-east1-aiplatform.googleapis.com/v1/{named}:predict")


@pytest.mark.parametrize("args,message", [
    (["--config", "config.yaml"], "predict on Vertex AI needs an endpoint: give --endpoint"),
    (["--endpoint", "serving"], "--endpoint 'serving' is a display name; finding it needs "
                                "vertex.project"),
    (["--dry-run"], "--dry-run prints the request to a Vertex AI endpoint; give --config"),
    (["--endpoint", "projects/p/locations/us-east1/endpoints/1", "--dry-run", "--top", "0"],
     "argument --top: 0 is not >= 1"),
])
@pytest.mark.slow
def test_predict_on_vertex_mistakes(args, message, tmp_path):
    (tmp_path / "cat.png").write_bytes(b"\x89PNG")
    (tmp_path / "config.yaml").write_text("vertex:\n  region: us-central1\n")
    result = run("predict", "cat.png", *args, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("args,message", [
    (["nowhere"], "SOURCE 'nowhere' is neither a folder nor a manifest"),
    (["empty"], "SOURCE 'empty' names no images; expected files ending in .jpg"),
    (["missing.txt"], "SOURCE 'missing.txt' cannot be read as a manifest: No such file"),
    (["empty", "--batch-size", "0"], "argument --batch-size: 0 is not >= 1"),
    (["empty"], "the following arguments are required: --output"),
])
@pytest.mark.slow
def test_batch_predict_mistakes(args, message, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.md").write_text("no images here")
    output = [] if "required" in message else ["--output", "out"]
    result = run("batch-predict", *args, *output, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "out").exists()


def test_version_and_run_without_local_point_where_to_go(capsys):
    from components import identity

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"gpu-pipeline {identity.version()}\n"
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert f"`{command()} run --local`" in err and f"`{command()} submit --config CONFIG`" in err


def test_tensorflow_start_up_lines_are_kept_out_of_a_commands_output(capfd):
    import os

    from pipelines.commands.common import tensorflow_start_quietly

    chatter = ("E0000 00:00:1795740110.507451    7313 cuda_platform.cc:52] failed call to "
               "cuInit: INTERNAL: CUDA error\n")
    with tensorflow_start_quietly():
        os.write(2, chatter.encode() + b"a line of its own\n")
    assert capfd.readouterr().err == "a line of its own\n"
    with pytest.raises(RuntimeError), tensorflow_start_quietly():
        os.write(2, chatter.encode())
        raise RuntimeError("loading failed")
    assert capfd.readouterr().err == chatter  # a failure shows everything


def test_validate_gpu_reports_every_misspelt_field_at_once_as_run_does(tmp_path, capsys):
    config = tmp_path / "typos.yaml"
    config.write_text("vertex:\n  regoin: us-central1\ntraining:\n  bach_size: 3\n"
                      "  colour: red\ntraning:\n  epochs: 2\n")
    for argv in (["validate-gpu"], ["compile", "--output", str(tmp_path / "p.yaml")]):
        assert main([*argv, "--config", str(config)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: invalid configuration:\n  - unknown section 'traning' "
                              "(did you mean training?)\n")
        # A typo gets the field it most likely meant; a name like none, every valid one.
        for said in ("unknown field training.bach_size (did you mean training.batch_size?)",
                     "unknown field training.colour; valid fields of training are "
                     + ", ".join(sorted(TrainingOptions.model_fields)),
                     "unknown field vertex.regoin (did you mean vertex.region?)"):
            assert said in err, err
    config.write_text("vertex:\n  region: us-centrl1\n")
    assert main(["validate-gpu", "--config", str(config)]) == 1  # a GPU rule refused it
    out = capsys.readouterr().out
    assert not missing(out, "'us-centrl1'", "did you mean us-central1?")
    assert "asia-east1" in listed_after(out, "GPU regions: ", end="\n")


def test_an_interrupt_is_reported_in_the_terms_of_the_command_it_stopped():
    """Ctrl-C's last line says what that command stopped: a local run's processes and its
    partial output, `serve`'s model server; nothing claims a run where there is none."""
    from pipelines.cli import COMMANDS, interrupted_words

    assert "what it had written was removed" in interrupted_words("run", [])
    serve = interrupted_words("serve", [])
    assert "model server" in serve and "run" not in serve.split()
    for name in set(COMMANDS) - {"run"}:
        assert " run " not in interrupted_words(name, []), name
    assert "[41, 42]" in interrupted_words("serve", [41, 42])


@pytest.mark.parametrize(("argv", "hint"), [
    (["submit"], True),
    (["runs"], False),
])
def test_without_credentials_only_a_command_with_a_dry_run_offers_one(tmp_path, monkeypatch,
                                                                      capsys, argv, hint):
    """`runs --config` has no --dry-run: its credentials error must not offer one."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    def no_account(*args, **kwargs):
        raise DefaultCredentialsError("no credentials in this test")

    monkeypatch.setattr(google.auth, "default", no_account)
    config = tmp_path / "vertex.yaml"
    config.write_text("vertex:\n  project: my-proj\n  pipeline_root: gs://my-bucket/root\n"
                      "  image_repository: us-central1-docker.pkg.dev/my-proj/images\n")
    assert main([*argv, "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "needs Google Cloud credentials" in err, err
    assert ("--dry-run" in err) is hint, err


def test_models_lists_without_its_only_action_named(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for argv in (["models"], ["models", "list"], ["models", "--pipeline-root", "local_runs"]):
        assert main(argv) == 0
        assert "no model registered under" in capsys.readouterr().out


def test_validate_gpu_reads_a_config_as_run_and_submit_do(tmp_path, capsys):
    """A misspelt section gets run's suggestion and an empty file is called empty (not
    "in no format validate-gpu reads"); without a region, the output says the region's
    rules were not checked."""
    typo = tmp_path / "typo.yaml"
    typo.write_text("trainig:\n  epochs: 3\n")
    assert main(["validate-gpu", "--config", str(typo)]) == 2
    assert "unknown section 'trainig' (did you mean training?)" in capsys.readouterr().err
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert main(["validate-gpu", "--config", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "is empty" in err and "no format" not in err
    assert main(["validate-gpu", "--machine-type", "n1-standard-8", "--accelerator-type",
                 "NVIDIA_TESLA_T4", "--accelerator-count", "1"]) == 0
    out = capsys.readouterr().out
    assert "no region given: which regions offer these GPUs was not checked" in out
    assert main(["validate-gpu", "--machine-type", "n1-standard-8", "--accelerator-type",
                 "NVIDIA_TESLA_T4", "--accelerator-count", "1", "--region", "us-east1"]) == 0
    assert "no region given" not in capsys.readouterr().out
