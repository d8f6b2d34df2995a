"""The run's report (`components.export.run_report`) and its charts (`components.charts`):
what a person reads first after a run, drawn with matplotlib."""

from __future__ import annotations

import re

import pytest

from components import charts
from components.export import run_report

CLASSES = ["circle", "cross", "square"]
# Rows are true classes: 8 circles (1 taken for a cross), 5 crosses, no square at all,
# and 2 images predicted square.
MATRIX = [[7, 1, 0], [0, 3, 2], [0, 0, 0]]


def test_per_class_figures_come_from_the_confusion_matrix():
    rows = {r["class"]: r for r in run_report.per_class(CLASSES, MATRIX)}
    assert rows["circle"] == {"class": "circle", "images": 8, "precision": 1.0,
                              "recall": 7 / 8, "f1": pytest.approx(2 * 7 / 8 / (1 + 7 / 8))}
    assert rows["cross"]["precision"] == 3 / 4 and rows["cross"]["recall"] == 3 / 5
    # Never predicted correctly although predicted twice: precision 0; no images: no recall.
    assert rows["square"] == {"class": "square", "images": 0, "precision": 0.0,
                              "recall": None, "f1": None}


@pytest.mark.slow
def test_charts_are_inline_svg_with_titles_axes_and_legends():
    confusion = charts.confusion(CLASSES, MATRIX, "test")
    assert confusion.startswith("<svg") and "<?xml" not in confusion
    for text in ("Confusion matrix (test split)", "predicted class", "true class", ">7<"):
        assert text in confusion, text
    history = [{"epoch": e, "loss": 1.0 / (e + 1), "accuracy": 0.3 * e, "val_loss": 0.9,
                "val_accuracy": 0.25 * e} for e in range(3)]
    curves = charts.curves(history, [{"epoch": 2, "loss": 0.5, "accuracy": 0.6}])
    for text in ("Loss per epoch", "Accuracy per epoch", "epoch", "training", "validation",
                 "sidecar evaluator"):
        assert text in curves, text
    use = charts.use_over_time({"chief-0": {"timeline": [[0, 90, 40], [1, 95, None]]},
                                "worker-0": {"timeline": [[0, 80, None]]}})
    for text in ("use (%)", "seconds since the first sample", "chief-0 CPU", "chief-0 GPU",
                 "worker-0 CPU"):
        assert text in use, text
    assert "worker-0 GPU" not in use  # no GPU sample, no line
    # Same input, same page: no dates or random ids in the SVG.
    assert charts.curves(history) == charts.curves(history)


def _page(**changes):
    manifest = {"source": "gs://b/images", "classes": CLASSES, "examples": 40,
                "image_size": [32, 32, 3], "image_format": "png", "skipped": ["a.jpg"],
                "bad_fraction": 0.025,
                "splits": {"train": {"count": 27, "per_class": dict.fromkeys(CLASSES, 9)},
                           "test": {"count": 13, "per_class": {}}}}
    trained = {"model": "cnn", "epochs": 3, "epochs_run": 3, "global_batch_size": 64,
               "per_replica_batch_size": 32, "strategy": "multi_worker_mirrored",
               "num_workers": 2, "mixed_precision": "off", "train_seconds": 4.2,
               "examples_per_second": 87.0,
               "phases": [{"name": "train", "epochs": 3, "learning_rate": 0.003}],
               "training_plan": {"accelerator": "NVIDIA_L4", "gpus_per_machine": 1,
                                 "mixed_precision": "bfloat16", "xla": True,
                                 "measured": {"xla": ["gs://b/measurements/l4.json"]}},
               "history": [{"epoch": 0, "loss": 1.0, "accuracy": 0.5}]}
    arguments = dict(
        run="run-<1>", model_name="shapes3", manifest=manifest, trained=trained,
        training={"weights": ""}, metrics={"accuracy": 0.8, "examples": 10,
                                           "test_accuracy": 0.77, "test_examples": 13},
        confusion={"split": "test", "classes": CLASSES, "matrix": MATRIX},
        decision={"reason": "below the threshold 0.85: not registered", "register": False,
                  "metric": "test_accuracy", "champion": None},
        champion=None, registered=None,
        efficiency={"cost": {"usd": 1.5, "per_epoch_usd": 0.5, "jobs": [{
            "job": "projects/p/locations/r/customJobs/42", "billed": True,
            "state": "JOB_STATE_SUCCEEDED", "pools": [{
                "pool": 0, "replicas": 1, "machine": "g2-standard-8", "accelerator":
                "NVIDIA_L4", "gpus_per_machine": 1, "usd_per_hour": 1.5, "hours": 1.0,
                "usd": 1.5}]}],
                             "per_1000_images_usd": 0.0, "prices_read": "2026-10-07",
                             "leaves_out": "disks", "unpriced": []}})
    return run_report.page(**{**arguments, **changes})


def test_the_page_says_the_run_its_data_model_decision_metrics_and_cost():
    page = _page()
    text = re.sub(r"<svg.*?</svg>", "", page, flags=re.S)
    for part in ("<h1>Run run-&lt;1&gt;</h1>",  # escaped
                 "shapes3: 0.7700 test accuracy; below the threshold 0.85: not registered",
                 "gs://b/images", "40 (train 27, test 13)", "1 file(s) (2.5% could not be "
                 "decoded)", "cnn (weights: none, trained from scratch)",
                 "train: 3 epoch(s) at learning rate 0.003", "1 x NVIDIA_L4 each",
                 "87 training images/s end to end", "Per class, on the test split",
                 "<td>circle</td><td>9</td><td>8</td><td>1.000</td><td>0.875</td>",
                 "about 1.50 USD", "<dt>registered</dt><dd>no</dd>",
                 "<td>42</td><td>0</td><td>1</td><td>g2-standard-8 + 1 x NVIDIA_L4</td>",
                 # The plan's GPU choices, each with the results files behind it.
                 "mixed_precision bfloat16 (not measured); xla on "
                 "(gs://b/measurements/l4.json); nvidia_environment off (not measured)"):
        assert part in text, part
    assert page.count("<svg") == 2  # the confusion matrix and the curves
    assert page.startswith("<!doctype html>") and "http" not in text.replace(
        "https://", "")  # nothing to fetch when it is opened


def test_a_model_measured_before_the_matrix_existed_and_a_local_run_say_so():
    page = _page(confusion=None, efficiency=None, registered="4", champion={"accuracy": 0.7},
                 decision={"reason": "promoted", "register": True, "metric": "test_accuracy",
                           "champion": 0.7})
    assert "No confusion matrix" in page and "No cloud bill" in page
    assert "<dd>version 4</dd>" in page and "<dd>test_accuracy 0.7000</dd>" in page
