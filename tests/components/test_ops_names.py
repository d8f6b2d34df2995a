"""The task and output names code outside the components reads (`components.ops.names`)
are the components' own: a renamed component or output fails here, not in a user's run."""

from __future__ import annotations

import pytest

from components.ops import export, names, setup, training

COMPONENTS = [
    (names.PREPARE_DATASET, setup.prepare_dataset, [names.DATASET]),
    (names.BUILD_IMAGES, setup.build_images, []),
    (names.TUNE_LOCALLY, training.tune_on_local_workers, []),
    (names.TRAIN_LOCALLY, training.train_on_local_workers, [names.TRAINING_JOB]),
    (names.TRAIN_ON_VERTEX, training.train_on_vertex_ai, [names.TRAINING_JOB]),
    (names.REPORT_TRAINING, training.report_training, [names.CURVES]),
    (names.EXPORT_MODEL, export.export_model, [names.EXPORTED_MODEL, names.RUN_REPORT]),
    (names.DECIDE_REGISTRATION, export.decide_registration, []),
    (names.SUMMARIZE_RUN, export.summarize_run, [names.SUMMARY]),
]


@pytest.mark.parametrize("task,component,outputs", COMPONENTS,
                         ids=[task for task, _, _ in COMPONENTS])
def test_each_name_is_its_components_own(task, component, outputs):
    assert component.name == task
    assert set(outputs) <= set(component.component_spec.outputs or {})


def test_an_artifact_is_named_task_slash_output():
    assert names.artifact(names.REPORT_TRAINING, names.CURVES) == "report-training/curves"
