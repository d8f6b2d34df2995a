"""The trainer's command line (`python -m trainer.task`): the job's locations, the
machine's expected GPUs and the cluster's training plan, the tuning metric, then every
training option (`TrainingOptions`), validated at parse time."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from trainer.common import schema
from trainer.run.training_options import REPORTED_METRICS, TrainingOptions

#: The trainer's one-line description (`--help`).
DESCRIPTION = ("Training application: `python -m trainer.task`, the entry point of the "
               "trainer image.")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parses the trainer's flags: the job's locations, then every training option.

    Returns:
        The namespace; `options` holds the validated `TrainingOptions`.
    """
    parser = argparse.ArgumentParser(prog="python -m trainer.task",
                                     description=DESCRIPTION)
    where = parser.add_argument_group("locations")
    where.add_argument("--job-dir", required=True,
                       help="Output directory of the job (reports; default checkpoint, "
                            "TensorBoard and model locations); gs:// paths are read through "
                            "the /gcs/ mount.")
    where.add_argument("--data-dir", required=True,
                       help="Prepared dataset directory (manifest.json and TFRecord shards).")
    where.add_argument("--model-dir", help="Final SavedModel directory (default: "
                       "$AIP_MODEL_DIR, else <job-dir>/model).")
    where.add_argument("--checkpoint-dir", help="Checkpoints and restart backup (default: "
                       "$AIP_CHECKPOINT_DIR, else <job-dir>/checkpoints).")
    where.add_argument("--tensorboard-dir", help="TensorBoard logs (default: "
                       "$AIP_TENSORBOARD_LOG_DIR, else <job-dir>/tensorboard).")
    machine = parser.add_argument_group("machine")
    machine.add_argument("--expected-gpus", type=_count, default=0, metavar="N",
                         help="GPUs this machine has (the CustomJob passes its pool's count): "
                              "stop before training when TensorFlow sees fewer; 0 (default) "
                              "expects none, as on local runs.")
    machine.add_argument("--training-plan", metavar="JSON", default="",
                         help="The cluster's training plan (strategy, all-reduce, mixed "
                              "precision, XLA) as the pipeline's validation stage made it for "
                              "every replica; without it, the trainer makes one from TF_CONFIG "
                              "and the GPUs it sees.")
    tuning = parser.add_argument_group("hyperparameter tuning")
    tuning.add_argument("--hypertune-metric", choices=REPORTED_METRICS, default="",
                        help="Report this metric after every epoch (the chief, with "
                             "cloudml-hypertune) for Vertex AI Vizier or a local study; "
                             "a trial's options follow as --<option> <value>.")
    names = schema.add_arguments(parser.add_argument_group("training options"),
                                 TrainingOptions, with_defaults=True, underscore_aliases=True)
    args = parser.parse_args(argv)
    try:
        args.options = schema.validate(TrainingOptions, schema.given(args, names))
    except schema.OptionsError as exc:
        parser.error(str(exc))
    return args


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (expected 0 or more)")
    return value
