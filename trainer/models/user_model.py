"""Your own model: `training.model: "package.module:function"`.

The contract (the README's "Your own model"): the trainer imports `package.module`, with
`training.user_code` (a directory holding the package) first on the import path, and
calls `function(image_size=..., num_classes=...)` inside the distribution strategy's
scope. When the function takes a `weights` keyword (or `**kwargs`), it also gets
`training.weights` as a local path ('' when unset, 'imagenet' as given), so a model can
load its own pretrained weights. It returns an uncompiled tf.keras (tf-keras) model that
takes images of shape (image_size, image_size, 3) with pixel values in [0, 255] and
outputs `num_classes` class probabilities (a softmax). The trainer compiles, trains,
exports and serves it like its own models.

Locally the directory is used where it is; for Vertex AI it is packed into the build
context as `user_code/` (so the image, and its digest, change with it) and the trainer
there reads it from `USER_CODE_IN_IMAGE`.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.common.errors import InputError, first_line

#: `package.module:function`: dotted Python names, a colon, a function name.
REFERENCE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")

#: Where the image holds `training.user_code` (each image's Dockerfile copies the context there).
USER_CODE_IN_IMAGE = "/app/user_code"


class UserModelError(InputError):
    """A user model that cannot be imported, called or trained."""


def is_reference(model: str) -> bool:
    """Whether a `training.model` value names a function rather than a built-in model."""
    return REFERENCE.fullmatch(model) is not None


def module_files(reference: str, user_code: str) -> list[Path]:
    """Where the module of `reference` would be under `user_code` (without importing it)."""
    parts = reference.split(":")[0].split(".")
    base = Path(user_code).joinpath(*parts)
    return [base.with_suffix(".py"), base / "__init__.py"]


def load_function(reference: str, user_code: str = "") -> Callable[..., Any]:
    """Imports the function `reference` names.

    Raises:
        UserModelError: The module does not import, or has no such function.
    """
    module_name, function_name = reference.split(":")
    if user_code and user_code not in sys.path:
        sys.path.insert(0, user_code)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        where = f"in training.user_code {user_code!r} or " if user_code else ""
        raise UserModelError(
            f"training.model is {reference!r}, but module {module_name} cannot be imported "
            f"({first_line(exc)}); it must be {where}installed, e.g. as "
            f"{module_files(reference, user_code or '.')[0]}") from None
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raised on import
        raise UserModelError(f"training.model is {reference!r}, but importing {module_name} "
                             f"failed: {_where(exc)}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        defined = sorted(n for n, v in vars(module).items()
                         if inspect.isfunction(v) and not n.startswith("_")
                         and v.__module__ == module.__name__)
        raise UserModelError(
            f"training.model is {reference!r}, but {module_name} has no function "
            f"{function_name}; it defines {', '.join(defined) or 'no public functions'}")
    return function


def _where(exc: BaseException) -> str:
    """`file:line: Type: message` of an exception, at the innermost frame of a traceback
    outside the import machinery (the user's code, or what it called)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "importlib" not in f.filename]
    place = f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""
    return f"{place}{type(exc).__name__}: {first_line(exc)}"


def _accepts(function: Callable[..., Any], name: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in parameters)


def _require_weights_keyword(function: Callable[..., Any], reference: str,
                             weights: str) -> None:
    if not _accepts(function, "weights"):
        raise UserModelError(f"training.weights is {weights!r}, but {reference} takes no "
                             "weights keyword; add one, or leave training.weights empty")


def build_user_model(keras: Any, reference: str, *, image_size: int, num_classes: int,
                     weights: str = "", user_code: str = "") -> Any:
    """Calls the user's function and checks what it returns.

    Returns:
        The user's model (uncompiled), checked against the contract.

    Raises:
        UserModelError: Naming the reference and what does not fit the contract.
    """
    function = load_function(reference, user_code)
    kwargs: dict[str, Any] = {"image_size": image_size, "num_classes": num_classes}
    if weights:
        _require_weights_keyword(function, reference, weights)
        kwargs["weights"] = weights
    _check_signature(function, reference, kwargs)
    try:
        model = function(**kwargs)
    except UserModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the user's function raised
        raise UserModelError(f"training.model {reference!r} failed when called with "
                             f"{', '.join(f'{k}={v!r}' for k, v in kwargs.items())}: "
                             f"{_where(exc)}") from None
    _check_model(keras, model, reference, image_size, num_classes)
    return model


def _check_signature(function: Callable[..., Any], reference: str,
                     kwargs: dict[str, Any]) -> None:
    """Refuses a function that cannot take the contract's keywords, before calling it."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin or C function: the call itself will tell
        return
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        call = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise UserModelError(
            f"training.model {reference!r} is {function.__name__}{signature}, which cannot "
            f"be called as {function.__name__}({call}) ({exc}); the contract calls it with "
            "the keywords image_size and num_classes (README: \"Your own model\")") from None


def _check_model(keras: Any, model: Any, reference: str, image_size: int,
                 num_classes: int) -> None:
    kind = f"{type(model).__module__}.{type(model).__name__}"
    if not isinstance(model, keras.Model):
        hint = (" (a Keras 3 model: build it with tf_keras, or tf.keras with "
                "TF_USE_LEGACY_KERAS=1, which the trainer uses)"
                if kind.startswith("keras.") else "")
        raise UserModelError(f"training.model {reference!r} returned a {kind}; expected a "
                             f"tf.keras Model{hint}")
    try:
        inputs, outputs = model.input_shape, model.output_shape
    except AttributeError:  # a subclassed model that was never called
        inputs = outputs = None
    if not (isinstance(inputs, tuple) and len(inputs) == 4 and inputs[3] == 3
            and all(d in (None, image_size) for d in inputs[1:3])):
        raise UserModelError(f"training.model {reference!r} returned a model whose input has "
                             f"shape {inputs}; expected (None, {image_size}, {image_size}, 3) "
                             "images with pixel values in [0, 255]")
    if not (isinstance(outputs, tuple) and tuple(outputs[1:]) == (num_classes,)):
        raise UserModelError(f"training.model {reference!r} returned a model whose output "
                             f"has shape {outputs}; expected (None, {num_classes}): one "
                             f"probability per class of the dataset ({num_classes})")
    import numpy as np

    pixels = np.random.default_rng(0).integers(0, 256, (2, image_size, image_size, 3))
    rows = np.asarray(model(pixels.astype("float32"), training=False), dtype="float64")
    if not (np.all(rows >= -1e-3) and np.allclose(rows.sum(axis=-1), 1.0, atol=1e-2)):
        raise UserModelError(f"training.model {reference!r} returned a model whose outputs "
                             f"are not class probabilities (rows sum to "
                             f"{', '.join(f'{v:.3g}' for v in rows.sum(axis=-1))}); end it "
                             "with a softmax (the trainer's loss expects probabilities)")


def preflight(reference: str, *, user_code: str, image_size: int, num_classes: int,
              weights: str = "") -> None:
    """Builds the user's model once on the CPU, as the trainer will, before any stage runs.

    Weights the trainer would fetch (`imagenet`, a remote file) are not loaded here: the
    function must only accept them. Run in a process of its own (`main`), which imports
    TensorFlow.

    Raises:
        UserModelError: One line naming `training.model` and what breaks the contract.
    """
    import os

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tf_keras as keras

    local = weights if weights and Path(weights).is_file() else ""
    if weights and not local:
        _require_weights_keyword(load_function(reference, user_code), reference, weights)
    build_user_model(keras, reference, image_size=image_size, num_classes=num_classes,
                     weights=local, user_code=user_code)


def main(argv: list[str] | None = None) -> int:
    """`python -m trainer.models.user_model REFERENCE --user-code DIR --image-size N --num-classes K
    [--weights W]`: the pre-flight of a user's model; exit 2 with one line when it breaks
    the contract."""
    import argparse
    import os

    parser = argparse.ArgumentParser(prog="python -m trainer.models.user_model")
    parser.add_argument("reference")
    parser.add_argument("--user-code", default="")
    parser.add_argument("--image-size", type=int, required=True)
    parser.add_argument("--num-classes", type=int, required=True)
    parser.add_argument("--weights", default="")
    args = parser.parse_args(argv)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # a tiny CPU build, whatever the machine has
    try:
        preflight(args.reference, user_code=args.user_code, image_size=args.image_size,
                  num_classes=args.num_classes, weights=args.weights)
    except UserModelError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
