"""Whole local runs that stand alone (no demo run before them): a run the validation stage
stops, a dataset the dataset stage refuses, and the local pipeline's stages 6 and 7 (an
endpoint and a batch source). The runs on the demo's model are `test_local_run`'s."""

from __future__ import annotations

import io
import json

import pytest

from pipelines.config import Config
from pipelines.local_run import LocalRunError, run_local
from tests.support.facts import missing
from tests.support.local_runs import registry_index, run_json

pytestmark = pytest.mark.slow


def test_the_validation_stage_fails_the_run(tmp_path):
    # A configuration that skipped the CLI's pre-flight check: stage 1 must stop the run.
    config = Config()
    bad_pools = ({"machine_spec": {"machine_type": "n1-standard-4",
                                   "accelerator_type": "NVIDIA_TESLA_T4",
                                   "accelerator_count": 3}, "replica_count": 1},)
    config = config.model_copy(update={"vertex": config.vertex.model_copy(
        update={"worker_pool_specs": list(bad_pools)})})
    out = io.StringIO()
    with pytest.raises(LocalRunError, match="validate-gpu-config"):
        run_local(config, tmp_path, out=out)
    log = out.getvalue()
    assert "n1-standard-4 takes 1, 2, 4 x NVIDIA_TESLA_T4" in log
    # The exit handler ran all the same, and said how the run ended.
    assert "[gpu-pipeline] run state: FAILED" in log
    summary, = tmp_path.glob("*/summarize-run/summary")
    assert "- state: FAILED" in summary.read_text()
    # Validation runs first: nothing was prepared, built or trained.
    for stage in ("prepare-dataset", "build-images", "train-on-local-workers"):
        assert not list(tmp_path.rglob(stage)), stage


def test_a_dataset_the_stage_cannot_use_fails_the_run_with_its_message(tmp_path):
    # One class folder passes the config check (it is a directory) but not stage 2.
    from components.dataset.shapes import generate_shapes

    source = generate_shapes(tmp_path / "images", images_per_class=3, image_size=16, seed=1)
    for extra in ("cross", "square", "triangle"):
        for image in (source / extra).iterdir():
            image.unlink()
        (source / extra).rmdir()
    config = Config()
    config = config.model_copy(update={"dataset": config.dataset.model_copy(
        update={"source": str(source)})})
    out = io.StringIO()
    with pytest.raises(LocalRunError, match="fingerprint-dataset-source") as raised:
        run_local(config, tmp_path / "runs", out=out)
    log = out.getvalue()
    assert "[gpu-pipeline] dataset failed: dataset source" in log and \
        "has 1 class(es) (circle)" in log
    # The reason comes first in the error, before KFP's own words.
    assert str(raised.value).startswith("dataset failed: dataset source")
    assert "Traceback" not in log and "executor_input" not in log
    # The exit handler's summary and the run's kept record name it too, not only the group.
    assert "[gpu-pipeline] run error: dataset failed: dataset source" in log
    summary, = (tmp_path / "runs").glob("*/summarize-run/summary")
    assert "- error: dataset failed: dataset source" in summary.read_text()


def test_run_local_with_an_endpoint_and_a_batch_source_deploys_and_scores(tmp_path):
    """The local pipeline's stages 6 and 7, end to end: a first model (no champion) takes
    the local endpoint whole, then scores the batch source; the run's summary says so."""
    from PIL import Image

    source = tmp_path / "to-score"
    source.mkdir()
    for number in range(3):
        Image.new("RGB", (32, 32), (80 * number, 40, 200)).save(source / f"{number}.png")
    (source / "broken.png").write_text("not an image")
    config = tmp_path / "serve.yaml"
    config.write_text("vertex:\n  accuracy_threshold: 0.0\n  deploy:\n    endpoint: serving\n"
                      "  batch_predict:\n    source: to-score\n    destination: scored\n")
    summary, out = run_json(tmp_path, "--epochs", "2", "--config", str(config))
    (deployed,) = [line for line in out.splitlines()
                   if line.startswith("[gpu-pipeline] deploy: version 1 ")]
    assert not missing(deployed, "model server", "http://127.0.0.1:")
    assert "run deploy: deployed: the endpoint served no model" in out, out[-3000:]
    assert "run batch predictions: 3 predicted, 1 refused: scored" in out, out[-3000:]
    results = (tmp_path / "scored" / "prediction.results-00000-of-00001").read_text()
    assert [json.loads(line)["key"] for line in results.splitlines()] == [
        f"to-score/{n}.png" for n in range(3)]
    assert registry_index(tmp_path)["default"] == "1"
