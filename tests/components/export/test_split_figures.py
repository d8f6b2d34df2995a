"""Every accuracy figure a run prints names its split; the headline is the gate's figure."""

from __future__ import annotations

from components.export.split_figures import headline, model_figures, trainer_figures

EXPORTED = {"accuracy": 0.9864, "examples": 295, "test_accuracy": 0.956, "test_examples": 182,
            "accuracy_circle": 0.9747, "accuracy_cross": 1.0}


def test_the_per_class_figures_are_said_with_the_validation_split_not_after_the_test_one():
    words = model_figures(EXPORTED)
    validation, test = words.split("; ")
    assert validation.startswith("validation accuracy 0.9864 on 295 images")
    assert "circle 0.9747" in validation and "cross 1.0000" in validation
    assert test == "test accuracy 0.9560 on 182 images"


def test_the_headline_is_the_test_accuracy_the_gate_used_else_the_validation_one():
    assert headline(EXPORTED).startswith("test accuracy 0.9560 on 182 images")
    without_test = {"accuracy": 0.9864, "examples": 295}
    assert headline(without_test).startswith("validation accuracy 0.9864 on 295 images")
    assert "no test split" in headline(without_test)


def test_the_trainers_final_figures_are_split_by_split_and_counts_are_whole():
    words = trainer_figures({"loss": 0.0023, "accuracy": 1.0, "examples": 1088.0,
                             "val_loss": 0.0036, "val_accuracy": 0.9966, "val_examples": 295.0,
                             "epochs_completed": 10.0})
    assert words == ("training split: loss 0.0023, accuracy 1.0000 on 1,088 images; "
                     "validation split: loss 0.0036, accuracy 0.9966 on 295 images")
    assert ".0000 images" not in words and "1088.0000" not in words
