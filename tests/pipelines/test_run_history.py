"""The local runs' history (`pipelines.run_history`) and `gpu-pipeline runs`; the runs
themselves are recorded by the local run (`test_local_run`)."""

from __future__ import annotations

from pipelines import run_history
from pipelines.cli import main

# Exercised here without an import, through the command line: `pipelines.commands.runs`.


def test_runs_are_appended_and_listed_as_a_table(tmp_path, capsys):
    assert main(["runs", "--pipeline-root", str(tmp_path)]) == 0
    assert "no runs recorded under" in capsys.readouterr().out
    manifest = {"source": "builtin://shapes", "examples": 320,
                "source_fingerprint": "sha256:" + "ab" * 32}
    run_history.record(tmp_path, {
        "run": "r1", "state": "SUCCEEDED", "seconds": 41.2, "metric": "test_accuracy",
        "accuracy": 0.9375, "data": run_history.dataset_words(manifest),
        "decision": run_history.decision_words(True, "1", True), "local": True})
    run_history.record(tmp_path, {"run": "r2", "state": "FAILED", "seconds": 3.0,
                                  "error": "dataset: no images", "data": "-",
                                  "decision": run_history.decision_words(False, "", False)})
    (tmp_path / run_history.FILE).open("a").write("{torn\n")
    assert main(["runs", "--pipeline-root", str(tmp_path)]) == 0
    header, first, second, note = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["ended", "state", "data"]
    assert "SUCCEEDED  builtin://shapes (320 images, abababababab)  test_accuracy 0.9375  " \
        "promoted (version 1)  0 USD (local)  41 s" in first
    assert "FAILED" in second and second.rstrip().endswith("3 s")
    assert note == f"(1 line(s) of {tmp_path / run_history.FILE} could not be read)"
    assert run_history.decision_words(False, "2", True) == "champion kept (version 2 registered)"
