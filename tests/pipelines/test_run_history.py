"""The local runs' history (`pipelines.run_history`) and `gpu-pipeline runs`; the runs
themselves are recorded by the local run (`test_local_run`)."""

from __future__ import annotations

from pipelines import run_history
from pipelines.cli import main

# Exercised here without an import, through the command line: `pipelines.commands.runs`.


def test_runs_are_appended_and_listed_as_a_table(tmp_path, capsys):
    assert main(["runs", "--pipeline-root", str(tmp_path)]) == 0
    assert "no runs recorded under" in capsys.readouterr().out
    manifest = {"source": "builtin://shapes", "examples": 320, "image_size": [32, 32, 3],
                "source_fingerprint": "sha256:" + "ab" * 32}
    run_history.record(tmp_path, {
        "run": "r1", "state": "SUCCEEDED", "seconds": 41.2, "metric": "test_accuracy",
        "accuracy": 0.9375, "data": run_history.dataset_words(manifest),
        "decision": run_history.decision_words(True, "1", True), "local": True,
        "params": {"model": "cnn"}})
    run_history.record(tmp_path, {
        "run": "r2", "state": "SUCCEEDED", "seconds": 50.0, "metric": "test_accuracy",
        "accuracy": 0.95, "local": True, "params": {"model": "mobilenet_v3_small"},
        "data": run_history.dataset_words({**manifest, "image_size": [64, 64, 3]}),
        "decision": run_history.decision_words(True, "2", True)})
    run_history.record(tmp_path, {"run": "r3", "state": "FAILED", "seconds": 3.0,
                                  "error": "dataset: no images", "data": "-",
                                  "decision": run_history.decision_words(False, "", False)})
    (tmp_path / run_history.FILE).open("a").write("{torn\n")
    assert main(["runs", "--pipeline-root", str(tmp_path)]) == 0
    header, first, second, third, note = capsys.readouterr().out.splitlines()
    assert header.split() == ["ended", "state", "data", "model", "accuracy", "decision", "cost",
                              "duration"]
    # The data column tells a 32 px run from a 64 px one of the same source; the model
    # column tells two models' promotions apart.
    assert "builtin://shapes, 320 images, 32 px, data abababab  cnn " in first
    assert "builtin://shapes, 320 images, 64 px, data abababab  mobilenet_v3_small " in second
    assert "promoted (version 1)" in first and "promoted (version 2)" in second
    assert "FAILED" in third and third.rstrip().endswith("3 s")
    assert note == f"(1 line(s) of {tmp_path / run_history.FILE} could not be read)"
    assert run_history.decision_words(False, "2", True) == "champion kept (version 2 registered)"
