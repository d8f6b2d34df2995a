"""The exit handler's summary of a run (`run_summary.summarize`), from the local run's
record of its decision."""

from __future__ import annotations

import json

from components.export.local_registry import run_record
from components.export.run_summary import summarize
from components.vertex_options import VertexOptions


def test_a_local_run_s_decision_rollout_and_batch_are_told(tmp_path):
    record = run_record(str(tmp_path), "run-7")
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({
        "reason": "no champion yet: promoted", "registered_version": "1",
        "rollout": {"outcome": "promoted", "reason": "healthy"},
        "batch_predictions": {"predicted": 3, "refused": 1, "directory": "/b/run-7"},
        "trials": "## Study\n\n| trial |\n|---|\n| 1 **best** |\n"}))
    ended = summarize("SUCCEEDED", "", registry_root=str(tmp_path), job_name="run-7",
                      project="", vertex=VertexOptions())
    assert ended.facts == [("state", "SUCCEEDED"),
                           ("champion/challenger", "no champion yet: promoted"),
                           ("local registry version", "1"), ("deploy", "promoted: healthy"),
                           ("batch predictions", "3 predicted, 1 refused: /b/run-7")]
    assert ended.markdown("runs/7").startswith("# Run runs/7\n\n- state: SUCCEEDED\n")
    assert ended.lines()[-2:] == ["|---|", "| 1 **best** |"]


def test_a_failed_run_without_a_record_says_its_state_and_error(tmp_path):
    ended = summarize("FAILED", "stage 4 failed", registry_root=str(tmp_path),
                      job_name="run-8", project="", vertex=VertexOptions())
    assert ended.facts == [("state", "FAILED"), ("error", "stage 4 failed")]
    assert ended.trials == "" and ended.lines() == ["run state: FAILED",
                                                    "run error: stage 4 failed"]


def test_a_failed_run_s_summary_names_the_failed_stage_s_own_words(tmp_path, monkeypatch,
                                                                    capsys):
    import pytest

    from components.stage_messages import FAILURES_ENV, stage_errors
    from trainer.common.errors import InputError

    monkeypatch.setenv(FAILURES_ENV, str(tmp_path / "failures.txt"))
    with pytest.raises(SystemExit), stage_errors("dataset"):
        raise InputError("1 of 61 images (1.6%) could not be decoded\nsecond line")
    ended = summarize("FAILED", "Task exit-handler-1 failed.", registry_root=str(tmp_path),
                      job_name="run-9", project="", vertex=VertexOptions())
    assert ended.facts[1] == ("error", "dataset failed: 1 of 61 images (1.6%) could not be "
                                       "decoded (Task exit-handler-1 failed.)")
    assert "[gpu-pipeline] dataset failed: 1 of 61" in capsys.readouterr().out


def test_the_summary_is_titled_with_the_run_not_the_local_runners_task():
    from components.export.run_summary import run_title

    assert run_title("local-pipeline-exit-handler-1", "gpu-training-20261128-1") == \
        "gpu-training-20261128-1"
    vertex = "projects/my-proj/locations/us-central1/pipelineJobs/gpu-training-1"
    assert run_title(vertex, "gpu-training-1") == vertex
