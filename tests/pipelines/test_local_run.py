"""The whole pipeline with KFP's local runner, as `make demo` runs it."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import urllib.request
from pathlib import Path

import pytest

from components import images
from components.build.context import write_build_context
from components.dataset.shapes import generate_shapes
from tests.support.facts import missing
from tests.support.leaky_data import copy_test_images_into_training
from tests.support.local_runs import BIN, registry_index, run_json
from trainer.common.committed_dirs import committed

# Exercised here without an import, through the command line: `pipelines.commands.predict`
# and `pipelines.commands.serve` (the demo's champion classified and served, by
# `trainer.serving.loopback_server` in the server's process); through
# `components.serving.deploy_stage`: `components.serving.local_endpoint` (the local
# rollout).

pytestmark = pytest.mark.slow


def dead_proxy() -> str:
    """A proxy URL on a loopback port where nothing answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`gpu-pipeline run --local --json` on the embedded default, in an empty directory, on
    a machine whose environment names a proxy that does not answer (most company laptops
    set these): the cluster's own gRPC must go around it, or it never forms."""
    cwd = tmp_path_factory.mktemp("demo")
    temp = tmp_path_factory.mktemp("tmp")
    proxy = dead_proxy()
    proxies = {name: proxy for name in ("http_proxy", "https_proxy", "grpc_proxy",
                                        "HTTP_PROXY", "HTTPS_PROXY")}
    result = subprocess.run([str(BIN), "run", "--local", "--json"], cwd=cwd,
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TMPDIR": str(temp), **proxies})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # KFP's runner writes every component's source to a temporary directory: removed.
    assert os.listdir(temp) == []
    return cwd, result.stdout


def test_demo_says_where_the_training_time_went(demo):
    """Per replica: images per second, the input share of the step, the GPU figures'
    absence said as such; the verdict and its advice; efficiency.json and the report's
    section."""
    cwd, stdout = demo
    summary = json.loads(stdout.strip().splitlines()[-1])
    for replica in ("chief-0", "worker-0"):
        assert re.search(rf"\[gpu-pipeline\] efficiency: {replica}: \d+ images/s in its "
                         r"steps, step [0-9.]+ ms, input \d+% of the step; GPU unavailable \(NVML ",
                         stdout), stdout[-3000:]
    assert re.search(r"efficiency: cluster \d+ images/s in the steps \(the replicas' sum\), "
                     r"no GPU seen", stdout)
    assert re.search(r"efficiency: (compute|input)-bound: the steps wait", stdout)
    assert "efficiency: advice: " in stdout
    job = Path(summary["artifacts"]["train-on-local-workers/training_job"])
    figures = json.loads((job / "efficiency.json").read_text())
    assert set(figures["replicas"]) == {"chief-0", "worker-0"}
    assert figures["cluster"]["missing_replicas"] == []
    assert all(r["samples"] >= 1 and r["host"]["cpu_percent"] >= 0
               for r in figures["replicas"].values())
    page = Path(summary["artifacts"]["report-training/curves"]).read_text()
    assert "<h2>Efficiency</h2>" in page
    # The run's report draws each replica's CPU use over time.
    report = Path(summary["artifacts"]["export-model/report"]).read_text()
    assert "CPU (solid) and GPU (dashed) use per replica" in report


def test_demo_reaches_target_accuracy_from_the_exported_model(demo):
    cwd, stdout = demo
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["pipeline_root"] == str(cwd / "local_runs")
    assert summary["metrics"]["accuracy"] >= 0.90
    assert summary["metrics"]["test_accuracy"] >= 0.90
    manifest = json.loads((Path(summary["artifacts"]["prepare-dataset/dataset"]) /
                           "manifest.json").read_text())
    assert summary["metrics"]["examples"] == manifest["splits"]["validation"]["count"]
    assert summary["metrics"]["test_examples"] == manifest["splits"]["test"]["count"]
    assert manifest["examples"] == 1600 and not summary["dataset_reused"]
    model = Path(summary["model_uri"])
    assert (model / "saved_model.pb").is_file()
    evaluation = json.loads((model / "evaluation.json").read_text())
    assert evaluation["metrics"]["accuracy"] == summary["metrics"]["accuracy"]


def test_demo_runs_every_stage_and_says_what_it_did(demo):
    cwd, stdout = demo
    summary = json.loads(stdout.strip().splitlines()[-1])
    artifacts = {name: Path(path) for name, path in summary["artifacts"].items()}
    assert (artifacts["prepare-dataset/dataset"] / "manifest.json").is_file()
    assert (artifacts["build-images/build_context"] / "context" / images.GPU.dockerfile).is_file()
    assert (artifacts["build-images/build_context"] / "context.tar.gz").is_file()
    report = json.loads((artifacts["train-on-local-workers/training_job"] /
                         "training_report.json").read_text())
    assert report["num_workers"] == 2 and report["replicas_in_sync"] == 2
    curves = artifacts["report-training/curves"].read_text()
    # The figures per epoch and each replica's efficiency; the charts are the run report's.
    assert curves.startswith("<!doctype html>") and "<svg" not in curves
    assert "<th>val_accuracy</th>" in curves and "<td>chief-0</td>" in curves
    assert "[gpu-pipeline] training: 10 epochs, multi_worker_mirrored on 2 training machine(s)" \
        in stdout
    # One line per epoch: the chief's (the worker's say the same; shown with --verbose).
    assert "[trainer chief:0] epoch 1/10" in stdout and "[trainer worker:0] epoch" not in stdout
    for line in ("GPU configuration valid for us-central1",
                 "were not built or pushed (no Docker engine is used); training uses the "
                 "trainer installed in this environment",
                 "[trainer chief:0] model written to",
                 # Behind the proxy of the environment, the cluster's gRPC went direct.
                 "[trainer chief:0] proxy variables set: the cluster's gRPC goes direct "
                 "(no_grpc_proxy=localhost,127.0.0.1)",
                 # The trainer measured the model it committed; export did not do it again.
                 "[trainer chief:0] exported model through its serving signature",
                 "[gpu-pipeline] exported model, as the trainer measured it: validation accuracy ",
                 "Pipeline 'gpu-training-pipeline-local' finished with status SUCCESS"):
        assert line in stdout
    if len(os.sched_getaffinity(0)) >= 2:  # each training process on its own core(s)
        for task in ("chief:0", "worker:0"):
            assert re.search(rf"\[trainer {task}\] data: .*; \d+ core\(s\) of a local cluster",
                             stdout), stdout[-3000:]
    # Progress stays readable: KFP's executor input dumps are not shown.
    assert '"executorInput"' not in stdout and "inputDefinitions" not in stdout
    # Each training plan once, from stage 1.
    assert stdout.count("training plan of this local run: ") == 1
    assert stdout.count("training plan on Vertex AI: ") == 1
    # The end says what to open next: the model, the report as a page, TensorBoard.
    job = artifacts["train-on-local-workers/training_job"]
    page = Path(summary["run_dir"]) / "training-report.html"
    text = page.read_text()
    assert text == artifacts["export-model/report"].read_text()
    # The run's report: the run, the decision, the metrics per class with the confusion
    # matrix, the curves, the data, the model, the cost and each replica's efficiency.
    for part in (f"<h1>Run {Path(summary['run_dir']).name}</h1>", "<h2>Champion/challenger",
                 "promoted to the default version", "Per class, on the test split",
                 "Confusion matrix (test split)", "true class", "Loss per epoch",
                 "builtin://shapes", "circle, cross, square, triangle", "multi_worker_mirrored",
                 "No cloud bill", "<h2>Efficiency</h2>", "chief-0 CPU", "worker-0 CPU"):
        assert part in text, part
    assert f"  the model (a SavedModel):  {summary['model_uri']}" in stdout
    assert f"  the run's report:         {page} (open it in a browser" in stdout
    assert f" --logdir {job / 'tensorboard'}" in stdout and (job / "tensorboard").is_dir()


def test_demo_checked_the_model_in_its_server_and_says_how_to_call_it(demo, monkeypatch,
                                                                        capsys):
    """Before the first model may serve it ran in the real model server; the run ends with
    how to call it, and `predict` and `serve` do what it says. The hint runs as printed in
    a fresh shell and `serve` as a process of its own; the other commands run in this
    process (`main`), each a TensorFlow start-up fewer."""
    import base64
    import signal
    import urllib.request

    from components.serving.serving_check import held_out_images
    from pipelines.cli import main
    from tests.support.serving import free_port

    cwd, stdout = demo
    assert re.search(r"\[gpu-pipeline\] serving check: 24 held-out image\(s\) through the model "
                     r"server, one request each: 24 x HTTP 200; p95 latency [0-9.]+ s \(bound "
                     r"2 s; first request [0-9.]+ s\); top-1 agrees with the SavedModel's own "
                     r"on 24/24", stdout), stdout[-3000:]
    hint = re.search(r"call the champion \(gpu-pipeline-model version 1\): (\S+) predict "
                     r"IMAGE\.\.\., or (\S+) serve ", stdout)
    assert hint and hint[1] == hint[2], stdout[-3000:]
    summary = json.loads(stdout.strip().splitlines()[-1])
    dataset = Path(summary["artifacts"]["prepare-dataset/dataset"])
    for number, image in enumerate(held_out_images(dataset, "test", 2)):
        (cwd / f"image{number}.png").write_bytes(image)
    # The hint runs as printed, in a fresh shell whose PATH knows nothing of the project.
    result = subprocess.run(["bash", "-c", f"{hint[1]} predict image0.png image1.png --top 2"],
                            cwd=cwd, capture_output=True, text=True, timeout=300,
                            env={"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")})
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("gpu-pipeline-model version 1 (")
    assert all(re.fullmatch(r"image\d\.png: \w+ [01]\.\d{3}, \w+ [01]\.\d{3}", line)
               for line in lines[1:3]), lines
    (cwd / "notes.txt").write_text("not an image")
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    for argv, code, message in (
            (["missing.png"], 2, "IMAGE 'missing.png' cannot be read"),
            (["notes.txt"], 1, "IMAGE 'notes.txt': it is not a JPEG, PNG, GIF, BMP or WebP"),
            (["image0.png", "--version", "9"], 2, "has no version '9'")):
        returncode = main(["predict", *argv])
        err = capsys.readouterr().err
        assert returncode == code and message in err, err[-2000:]
    # A bad or missing file among good ones costs its own line; the rest are predicted.
    returncode = main(["predict", "missing.png", "image0.png", "notes.txt"])
    out, err = capsys.readouterr()
    predicted = out.splitlines()[1:]
    assert returncode == 1 and len(predicted) == 1, out
    assert predicted[0].startswith("image0.png: ")
    assert err.splitlines() == [
        "error: IMAGE 'missing.png' cannot be read: No such file or directory",
        "error: IMAGE 'notes.txt': it is not a JPEG, PNG, GIF, BMP or WebP image",
        "error: 2 of 3 image(s) not predicted"], err

    # batch-predict: a folder (one file in it is no image) and a manifest, scored by the
    # champion; Vertex AI's output files, one line per image.
    images = cwd / "to-score"
    (images / "more").mkdir(parents=True)
    (images / "a.png").write_bytes((cwd / "image0.png").read_bytes())
    (images / "more" / "b.png").write_bytes((cwd / "image1.png").read_bytes())
    (images / "more" / "broken.png").write_text("not an image")
    returncode = main(["batch-predict", "to-score", "--output", "scored", "--batch-size", "2"])
    out, err = capsys.readouterr()
    assert returncode == 1, err[-2000:]  # one image refused
    assert "batch-predict: 2 predicted, 1 refused" in out, out
    assert "batch-predict: refused to-score/more/broken.png: the image is not a JPEG" in err
    results = [json.loads(line) for line in (cwd / "scored" / "prediction.results-00000-of-"
                                             "00001").read_text().splitlines()]
    assert [r["key"] for r in results] == ["to-score/a.png", "to-score/more/b.png"]
    first = lines[1].split(": ")[1].split(" ")[0]  # predict's top class of image0.png
    assert results[0]["prediction"]["class_name"] == first
    (refused,) = [json.loads(line) for line in (cwd / "scored" / "prediction.errors_stats-"
                                                "00000-of-00001").read_text().splitlines()]
    assert refused == {"key": "to-score/more/broken.png", "error": {
        "code": 400, "message": "the image is not a JPEG, PNG, GIF, BMP or WebP image"}}
    # The outputs keep the user's umask (not a temporary file's 0600).
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((cwd / "scored" / "prediction.results-00000-of-00001").stat()
                        .st_mode) == 0o666 & ~umask
    (cwd / "list.txt").write_text("# to score\nimage1.png\n\nmissing.png\nimage0.png\n")
    assert main(["batch-predict", "list.txt", "--output", "scored"]) == 2
    assert "already holds predictions" in capsys.readouterr().err
    returncode = main(["batch-predict", "list.txt", "--output", "listed"])
    # A missing file in the list costs its own line; the others are predicted.
    assert returncode == 1, capsys.readouterr().err[-2000:]
    assert [json.loads(line)["key"] for line in (cwd / "listed" / "prediction.results-00000-"
                                                 "of-00001").read_text().splitlines()] == [
        "image1.png", "image0.png"]
    assert [json.loads(line) for line in (cwd / "listed" / "prediction.errors_stats-00000-of-"
                                          "00001").read_text().splitlines()] == [
        {"key": "missing.png", "error": {"code": 400, "message": "the image cannot be read: "
                                                                 "No such file or directory"}}]
    # A port already taken: one line naming it and --port, before TensorFlow loads.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        result = subprocess.run([str(BIN), "serve", "--port", str(busy)], cwd=cwd,
                                capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout, result.stderr.splitlines()) == (2, "", [
        f"error: port {busy} on 127.0.0.1 is taken (Address already in use); choose another "
        f"with --port, e.g. --port {busy + 1}"])
    port = free_port()
    server = subprocess.Popen([str(BIN), "serve", "--port", str(port)], cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = []
    try:
        # Called as a user would: once the command says it is ready (its own health poll
        # may answer after the server already does).
        ready = f"serve: ready at http://127.0.0.1:{port}/predict"
        while not output or ready not in output[-1]:
            line = server.stdout.readline()
            assert line, "".join(output)[-3000:]
            output.append(line)
        body = json.dumps({"instances": [{"b64": base64.b64encode(
            (cwd / "image0.png").read_bytes()).decode()}]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/predict", data=body,
                                         headers={"Content-Type": "application/json"})
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with direct.open(request, timeout=60) as answer:
            predictions = json.loads(answer.read())["predictions"]
        assert len(predictions) == 1 and len(predictions[0]["probabilities"]) == 4
        # It listens on loopback alone (Linux's table: 0100007F is 127.0.0.1, 0A LISTEN).
        listening = [line.split()[1] for line in Path("/proc/net/tcp").read_text()
                     .splitlines()[1:] if line.split()[3] == "0A"
                     and line.split()[1].endswith(f":{port:04X}")]
        assert listening == [f"0100007F:{port:04X}"], listening
    finally:
        server.send_signal(signal.SIGINT)
        output.append(server.communicate(timeout=60)[0])
    assert "Traceback" not in "".join(output)
    with pytest.raises(OSError):  # stopped with the command
        direct.open(f"http://127.0.0.1:{port}/health", timeout=5)


TINY_MODEL = """
import tf_keras as keras

# Exercised here without an import, by KFP's local runner in subprocesses: the
# components (`components.ops.setup`, `components.ops.training`, `components.ops.export`,
# `components.ops.deploy`, `components.ops.batch_predict`) and what they call
# (`components.export.export_model`, `components.stage_messages`, `components.identity`),
# and through the configuration (`vertex.batch_predict`): `components.serving.batch_options`.


def build(image_size, num_classes):
    inputs = keras.Input((image_size, image_size, 3))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.Conv2D(8, 3, strides=2, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))
"""


def test_retraining_replaces_the_champion_only_with_a_better_model(demo):
    """Runs in a row, as a schedule makes them: the first promotes, a shorter second (on
    the same, reused data) is not significantly better (the paired test's figures said),
    and a third like the first under unless_shown_worse replaces it."""
    cwd, stdout = demo
    first = json.loads(stdout.strip().splitlines()[-1])
    assert first["registered_version"] == "1"
    assert first["decision"].startswith("no champion yet; test_accuracy")
    assert first["decision"].endswith("promoted to the default version")
    assert "run state: SUCCEEDED" in stdout and "run champion/challenger: no champion" in stdout
    assert registry_index(cwd)["default"] == "1"
    champion = first["metrics"]["test_accuracy"]

    # A deliberately shorter training of another team's own model, from a package outside
    # the project, with a threshold it passes: the champion refuses it.
    package = cwd / "their_code" / "their_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tiny.py").write_text(TINY_MODEL)
    # A git checkout: its .git/ (remote URLs can carry tokens) never enters the context.
    (cwd / "their_code" / ".git").mkdir()
    (cwd / "their_code" / ".git" / "config").write_text(
        '[remote "origin"]\n\turl = https://user:token@git.example/their_code\n')
    config = cwd / "their-model.yaml"
    config.write_text("training:\n  model: their_models.tiny:build\n  user_code: their_code\n"
                      "vertex:\n  accuracy_threshold: 0.0\n  promotion: default\n")
    second, out = run_json(cwd, "--epochs", "2", "--config", str(config))
    assert "model their_models.tiny:build, 2 epochs" in out
    # The same data: the dataset prepared by the first run, not prepared again.
    assert second["dataset_reused"] and second["run_dir"] != first["run_dir"]
    assert second["artifacts"]["prepare-dataset/dataset"] == \
        first["artifacts"]["prepare-dataset/dataset"]
    assert "reused the dataset prepared earlier" in out
    assert "[gpu-pipeline] dataset: 4 classes" in stdout and \
        "skipped; prepared by the local engine\n" in stdout
    assert "[gpu-pipeline] dataset: 4 classes" not in out  # not prepared again
    # Both models' figures on this (reused) dataset were committed beside them: no stage
    # evaluated either again.
    assert "as the trainer measured it" in out and "champion evaluated here" not in out
    # The local build stage packed the context `submit` would: the same digest.
    context = Path(second["artifacts"]["build-images/build_context"]) / "context"
    assert (context / "user_code" / "their_models" / "tiny.py").is_file()
    assert not (context / "user_code" / ".git").exists()
    submitted = write_build_context(cwd / "as-submit", user_code=cwd / "their_code")
    assert f"build context: {len(submitted.files)} files, {submitted.digest}" in out
    trained = json.loads((Path(second["artifacts"]["train-on-local-workers/training_job"])
                          / "training_report.json").read_text())
    assert trained["model"] == "their_models.tiny:build" and trained["epochs"] == 2
    assert second["metrics"]["test_accuracy"] < champion
    assert second["metrics"]["champion_test_accuracy"] == champion
    # The decision names its verdict, the champion's figure and the paired images it counted.
    assert not missing(second["decision"], "is not significantly better", f"{champion:.4f}",
                       "182 paired images", "the challenger alone right on")
    assert "McNemar's exact test, one-sided, that the challenger is better: p = " in \
        second["decision"]
    assert second["decision"].endswith("registered as a non-default version; the champion "
                                       "stays the default")
    assert second["registered_version"] == "2"
    registry = registry_index(cwd)
    assert registry["default"] == "1"
    assert [v["decision"]["promoted"] for v in registry["versions"]] == [True, False]
    _check_versions(cwd, second, champion)

    # The same data again under unless_shown_worse, as a schedule keeping the model current on
    # fresh data: a model not shown worse than the margin allows is promoted (multi-worker
    # training is not bit-reproducible: the two models disagree on a few test images).
    current = cwd / "non-inferior.yaml"
    current.write_text("vertex:\n  promotion: unless_shown_worse\n")
    third, _ = run_json(cwd, "--config", str(current))
    assert abs(third["metrics"]["test_accuracy"] - champion) < 0.05
    assert f"is not shown worse than the champion's {champion:.4f} (182 paired images" in \
        third["decision"], third["decision"]
    assert third["decision"].endswith("promoted to the default version")
    assert registry_index(cwd)["default"] == "3"
    # `gpu-pipeline runs` lines the runs up: data, accuracy, decision, cost, duration.
    listing = subprocess.run([str(BIN), "runs"], cwd=cwd, capture_output=True, text=True,
                             timeout=120)
    assert listing.returncode == 0, listing.stderr
    header, *rows = listing.stdout.splitlines()
    assert header.split() == ["ended", "state", "data", "model", "accuracy", "decision", "cost",
                              "duration"]
    assert len(rows) == 3 and all("SUCCEEDED" in row and "builtin://shapes" in row
                                  and "0 USD (local)" in row for row in rows)
    assert "promoted (version 1)" in rows[0] and "test_accuracy " in rows[0]
    assert "champion kept (version 2 registered)" in rows[1]
    assert "promoted (version 3)" in rows[2]
    # Each line holds what a Vertex AI run's Experiments run does: parameters and metrics.
    recorded = [json.loads(line) for line in
                (cwd / "local_runs" / "runs.jsonl").read_text().splitlines()]
    assert recorded[0]["params"]["strategy"] == "multi_worker_mirrored"
    assert recorded[0]["params"]["data_source"] == "builtin://shapes"
    assert recorded[1]["params"]["model"] == "their_models.tiny:build"
    assert recorded[1]["params"]["epochs"] == 2
    assert recorded[2]["metrics"]["test_accuracy"] == third["metrics"]["test_accuracy"]

    # Fresh data that lost a class and copies test images into training, under
    # dataset.drift: fail: the data checks say each and stop the run before it trains.
    source = generate_shapes(cwd / "fresh", images_per_class=40, image_size=32, seed=5)
    shutil.rmtree(source / "circle")
    copy_test_images_into_training(source, ["cross", "square", "triangle"], 2)
    drifted = cwd / "drifted.yaml"
    drifted.write_text(f"dataset:\n  source: {source}\n  drift: fail\n")
    result = subprocess.run([str(BIN), "run", "--local", "--config", str(drifted)], cwd=cwd,
                            capture_output=True, text=True, timeout=600)
    out = result.stdout
    assert result.returncode != 0, out[-3000:]
    for line in ("[gpu-pipeline] dataset: warning: 2 test image(s) are byte-identical to "
                 "training images",
                 "[gpu-pipeline] dataset: warning: class 'circle' is gone: the champion's "
                 "data had 400 image(s) of it (25.0%); the new model cannot answer it",
                 "[gpu-pipeline] dataset failed: dataset.drift is 'fail' and the data checks "
                 "warned"):
        assert line in out, out[-3000:]
    assert "[trainer chief:0]" not in out and "Traceback" not in out
    assert registry_index(cwd)["default"] == "3" and len(registry_index(cwd)["versions"]) == 3


def _check_versions(cwd: Path, last: dict, champion: float) -> None:
    """Every version is a committed copy with its lineage, the last run's report has the
    table, and `models list` shows the versions with the default."""
    registry = registry_index(cwd)
    for entry in registry["versions"]:
        version = cwd / "local_runs" / "registry" / "gpu-pipeline-model" / "versions" / \
            entry["version"]
        saved = Path(committed(version))
        assert (saved / "saved_model.pb").is_file()
        lineage = json.loads((saved / "lineage.json").read_text())
        assert lineage["dataset"]["source_fingerprint"].startswith("builtin://shapes")
        assert lineage["dataset"]["counts"]["test"] == last["metrics"]["test_examples"]
        assert lineage["cluster"]["strategy"] == "multi_worker_mirrored"
        # The training's efficiency figures beside the model, their summary in the lineage.
        figures = json.loads((saved / "efficiency.json").read_text())
        assert lineage["efficiency"]["verdict"] == figures["verdict"]
        assert lineage["efficiency"]["images_per_second"] == \
            figures["cluster"]["images_per_second"] > 0
    comparison = Path(last["artifacts"]["export-model/comparison"]).read_text()
    assert "| test_accuracy |" in comparison and f"{champion:.4f}" in comparison
    assert "**Decision**: test_accuracy" in comparison
    summary = (Path(last["run_dir"]) / "summarize-run" / "summary").read_text()
    assert "- state: SUCCEEDED" in summary and \
        "is not significantly better than the champion's" in summary
    listing = subprocess.run([str(BIN), "models", "list"], cwd=cwd, capture_output=True,
                             text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[0] == "gpu-pipeline-model: 2 version(s), default 1"
    # The second run kept the champion: counted, with the day it started.
    assert re.fullmatch(r"  the champion \(version 1\) kept 1 run\(s\) in a row, since "
                        r"\d{4}-\d\d-\d\d", lines[1]), lines[1]
    assert lines[2].startswith(" * version 1") and lines[3].startswith("   version 2")


def _failing_model(directory: Path) -> Path:
    """A SavedModel with the project's signatures whose every prediction fails (the model
    server answers 500), as a model that loads but breaks at serving time would."""
    import tensorflow as tf

    from trainer.serving.container import METADATA_FILE, SIGNATURE_BYTES, SIGNATURE_IMAGES

    class Failing(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def encoded(self, image_bytes):
            tf.debugging.assert_equal(tf.size(image_bytes), -1, message="broken model")
            return {"probabilities": tf.zeros([tf.size(image_bytes), 4])}

        @tf.function(input_signature=[tf.TensorSpec([None, 32, 32, 3], tf.float32,
                                                    name="images")])
        def floats(self, images):
            tf.debugging.assert_equal(tf.shape(images)[0], -1, message="broken model")
            return {"probabilities": tf.zeros([tf.shape(images)[0], 4])}

    module = Failing()
    tf.saved_model.save(module, str(directory), signatures={
        SIGNATURE_BYTES: module.encoded, SIGNATURE_IMAGES: module.floats})
    (directory / METADATA_FILE).write_text(json.dumps(
        {"class_names": ["a", "b", "c", "d"], "image_size": 32}))
    return directory


def _champion_and_canary(demo, tmp_path, canary) -> tuple[Path, Path, str]:
    """A local registry with the demo's model as version 1, the default, and
    `canary(its SavedModel)` as version 2, which run `job-1` made the default: (the
    registry, the model's directory, the demo's dataset)."""
    from components.export import local_registry

    cwd, stdout = demo
    dataset = json.loads(stdout.strip().splitlines()[-1])["artifacts"]["prepare-dataset/dataset"]
    entry, saved = local_registry.served(cwd / "local_runs" / "registry", "gpu-pipeline-model")
    root = tmp_path / "registry"
    model_dir = root / "gpu-pipeline-model"
    for default, model in ((True, saved), (False, canary(saved))):
        local_registry.register(model_dir, model, entry["metrics"], entry["lineage"],
                                {"default": default}, default=default)
    (root / ".runs").mkdir()
    (root / ".runs" / "job-1.json").write_text(json.dumps(
        {"default": True, "registered_version": "2"}))
    return root, model_dir, dataset


def _router_closed(lines: list[str]) -> None:
    """The rollout's router (named in its log) no longer answers: nothing left running."""
    router = next(line.split("behind ")[1].split()[0] for line in lines if "behind" in line)
    with pytest.raises(OSError):
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(router, timeout=5)


def test_a_local_canary_that_fails_its_requests_is_rolled_back(demo, tmp_path):
    """Real model servers: a canary answering 500 is rolled back at its first reading;
    the champion stays the default and nothing is left running."""
    from components.export import local_registry
    from components.serving.deploy_stage import deploy_locally
    from components.vertex_options import VertexOptions

    root, model_dir, dataset = _champion_and_canary(
        demo, tmp_path, lambda saved: _failing_model(tmp_path / "failing"))
    options = VertexOptions(deploy={"endpoint": "serving", "canary_percent": 50,
                                    "min_requests": 10, "check_interval": "1s"})
    lines: list[str] = []
    record = deploy_locally(str(root), options, "job-1", dataset, log=lines.append)
    assert record.outcome == "rolled back", lines
    assert "the canary's error rate 100.0%" in record.reason, record.reason
    assert local_registry.load(model_dir)["default"] == "1"
    _router_closed(lines)


def test_a_local_canary_is_served_beside_the_champion_and_promoted(demo, tmp_path):
    """The deploy stage's local rollout on the demo's model: champion and canary in real
    model servers, a weighted router in front, the test split as traffic; promoted, it
    becomes the default, and every server is stopped."""
    from components.export import local_registry
    from components.serving.deploy_stage import deploy_locally
    from components.vertex_options import VertexOptions

    root, model_dir, dataset = _champion_and_canary(demo, tmp_path, lambda saved: saved)
    options = VertexOptions(deploy={"endpoint": "serving", "canary_percent": 20,
                                    "min_requests": 15, "grace_period": "0s"})
    lines: list[str] = []
    record = deploy_locally(str(root), options, "job-1", dataset, log=lines.append)
    assert record.outcome == "promoted", lines
    checks = [s for s in record.steps if s["step"] == "check"]
    canary, champion = checks[-1]["canary"], checks[-1]["champion"]
    assert canary["requests"] >= 15 and canary["errors"] == 0
    # The router kept the split: about 4 champion requests for each canary one.
    assert 3 * canary["requests"] <= champion["requests"] <= 5 * canary["requests"] + 4
    assert local_registry.load(model_dir)["default"] == "2"
    promoted = local_registry.load(model_dir)["versions"][1]["decision"]["rollout"]
    assert promoted["outcome"] == "promoted"
    decision = json.loads((Path(local_registry.served(root, "gpu-pipeline-model")[1])
                           / "decision.json").read_text())
    assert decision["rollout"]["outcome"] == "promoted"
    run = json.loads((root / ".runs" / "job-1.json").read_text())
    assert run["rollout"]["steps"][0]["step"] == "canary"
    assert any("deploy: canary version 2 in a model server behind http://127.0.0.1:" in line
               for line in lines), lines
    _router_closed(lines)  # nothing is left running

    # The batch step after the promotion: the promoted version scores the source.
    from components.serving.batch import score_local_run
    from components.serving.serving_check import held_out_images

    source = tmp_path / "to-score"
    source.mkdir()
    for number, image in enumerate(held_out_images(Path(dataset), "test", 3)):
        (source / f"{number}.png").write_bytes(image)
    options = VertexOptions(batch_predict={"source": str(source)})
    scored = score_local_run(str(root), options, "job-1", log=lines.append)
    assert scored == {"directory": str(tmp_path / "batch-predictions" / "job-1"),
                      "predicted": 3, "refused": 0, "version": "2"}
    results = (tmp_path / "batch-predictions" / "job-1" / "prediction.results-00000-of-00001")
    assert [json.loads(line)["key"] for line in results.read_text().splitlines()] == [
        str(source / f"{n}.png") for n in range(3)]
    run = json.loads((root / ".runs" / "job-1.json").read_text())
    assert run["batch_predictions"]["predicted"] == 3 and run["rollout"]
    # A run whose canary was rolled back scores nothing.
    (root / ".runs" / "job-2.json").write_text(json.dumps(
        {"default": True, "registered_version": "2", "rollout": {"outcome": "rolled back"}}))
    assert score_local_run(str(root), options, "job-2", log=lines.append) is None
    assert lines[-1] == "batch predict: nothing scored (this run promoted no model)"
