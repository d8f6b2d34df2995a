"""A user's model checked before the pipeline starts (`run --local`, `submit`, `compile`).

Otherwise `training.model: package.module:function` is first called after the dataset is
prepared and the cluster started, and a typo in the function's arguments costs a whole
stage and prints from inside the cluster. The check imports the function from
`training.user_code`, calls it with the contract's arguments (the dataset's image size, and
its class count where it is known before preparing it, else a stand-in) and checks what it
returns, in a process of its own on the CPU (`python -m trainer.models.user_model`), so that this
command does not load TensorFlow.
"""

from __future__ import annotations

import os
import subprocess
import sys

from components.stage_messages import say
from pipelines.config import Config
from trainer.models.user_model import UserModelError, is_reference

#: The class count a model is built with when the dataset's is known only once prepared.
STAND_IN_CLASSES = 5
#: How long building the model may take (TensorFlow's start included).
TIMEOUT_SECONDS = 600


def known_classes(config: Config) -> int | None:
    """The dataset's class count where it is known before preparing it."""
    from components.dataset.dataset_options import BUILTIN_SHAPES
    from components.dataset.shapes import SHAPE_CLASSES

    return len(SHAPE_CLASSES) if config.dataset.source == BUILTIN_SHAPES else None


def check_user_model(config: Config) -> None:
    """Refuses a user's model that breaks the contract, in one line.

    Raises:
        UserModelError: Naming training.model and what does not fit.
    """
    training = config.training
    if not is_reference(training.model):
        return
    known = known_classes(config)
    classes = known or STAND_IN_CLASSES
    command = [sys.executable, "-m", "trainer.models.user_model", training.model,
               "--user-code", training.user_code, "--image-size",
               str(config.dataset.image_size), "--num-classes", str(classes),
               "--weights", training.weights]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env,
                              timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        raise UserModelError(f"training.model {training.model!r} was not built within "
                             f"{TIMEOUT_SECONDS} s on the CPU") from None
    if done.returncode == 2:
        raise UserModelError(done.stderr.strip().splitlines()[-1])
    if done.returncode != 0:
        raise UserModelError(f"training.model {training.model!r}: the check exited with "
                             f"{done.returncode}: {done.stderr.strip()[-500:]}")
    say(f"your model {training.model}: built with image_size="
          f"{config.dataset.image_size}, num_classes={classes}"
          + ("" if known else " (a stand-in: the dataset's count is known "
             "once it is prepared)") + "; it meets the contract")
