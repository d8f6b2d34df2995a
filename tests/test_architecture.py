"""The shape of the code: layers that import one way, one error model, options declared once."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainer.errors import InputError, ProjectError, StageError

ROOT = Path(__file__).resolve().parent.parent
#: Each package may import only the packages listed (and itself): the trainer, which runs
#: alone in its container, sits at the bottom; the pipelines' CLI and definitions at the top.
LAYERS = {"trainer": set(), "components": {"trainer"}, "pipelines": {"trainer", "components"}}


def _modules():
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield package, path


def _imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(LAYERS)


@pytest.mark.parametrize("package,path", list(_modules()),
                         ids=[str(p.relative_to(ROOT)) for _, p in _modules()])
def test_layers_import_one_way(package, path):
    allowed = LAYERS[package] | {package}
    assert _imported_packages(path) <= allowed, \
        f"{path.relative_to(ROOT)} imports {_imported_packages(path) - allowed}"


def _project_error_classes():
    classes = {}
    for package in LAYERS:
        for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if inspect.isclass(value) and issubclass(value, BaseException) \
                        and value.__module__ == info.name:
                    classes[f"{info.name}.{name}"] = value
    return classes


def test_every_project_error_is_an_input_error_or_a_failed_stage():
    classes = _project_error_classes()
    assert len(classes) >= 15, sorted(classes)  # the walk did find the project's errors
    bases = {ProjectError, InputError, StageError}
    for name, cls in classes.items():
        if cls in bases:
            continue
        assert issubclass(cls, (InputError, StageError)), name
        assert not (issubclass(cls, InputError) and issubclass(cls, StageError)), name
    assert InputError.exit_code == 2 and StageError.exit_code == 1


@pytest.mark.parametrize("error,code", [("InputError", 2), ("StageError", 1)])
def test_the_cli_reports_any_project_error_by_its_kind(error, code, monkeypatch, capsys):
    from components.build.context import BuildContextError
    from pipelines import cli, validate_gpu
    from pipelines.vertex.publish import PublishError

    raised = {"InputError": PublishError("the destination is refused"),
              "StageError": BuildContextError("the sources are missing")}[error]

    def fail(args):
        raise raised

    monkeypatch.setattr(validate_gpu, "command", fail)
    assert cli.main(["validate-gpu"]) == code
    err = capsys.readouterr().err
    assert err == f"error: {raised}\n"


OPTION = ('    label_smoothing: float = Field(0.0, ge=0, lt=1, description=(\n'
          '        "Label smoothing of the loss."))\n')


@pytest.fixture(scope="module")
def with_new_option(tmp_path_factory):
    """A copy of the project with one more training option: one declaration, one edit."""
    copy = tmp_path_factory.mktemp("project")
    for package in LAYERS:
        shutil.copytree(ROOT / package, copy / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    options = copy / "trainer" / "options.py"
    text = options.read_text()
    assert text.endswith("\n")
    options.write_text(text + OPTION)
    env = {**os.environ, "PYTHONPATH": str(copy), "TF_CPP_MIN_LOG_LEVEL": "3"}

    def run(*args):
        result = subprocess.run([sys.executable, *args], cwd=copy, env=env, text=True,
                                capture_output=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    return copy, run


def test_a_new_training_option_reaches_the_cli_and_the_config(with_new_option):
    copy, run = with_new_option
    assert "--label-smoothing" in run("-m", "pipelines.cli", "run", "--help")
    probe = ("import json; from pipelines.config import Config, load_config; "
             "schema = Config.model_json_schema(); "
             "config = load_config(overrides={'training': {'label_smoothing': 0.25}}); "
             "print(json.dumps([schema['$defs']['TrainingConfig']['properties']"
             "['label_smoothing'], config.training_options().model_dump()]))")
    declared, options = json.loads(run("-c", probe))
    assert declared["exclusiveMaximum"] == 1 and declared["default"] == 0.0
    assert options["label_smoothing"] == 0.25
    bad = subprocess.run([sys.executable, "-m", "pipelines.cli", "compile", "--label-smoothing",
                          "2", "--output", str(copy / "x.yaml")], cwd=copy, text=True,
                         capture_output=True, env={**os.environ, "PYTHONPATH": str(copy)})
    assert bad.returncode == 2
    assert "training.label_smoothing is 2.0; expected a finite number in [0, 1)" in bad.stderr


def test_a_new_training_option_reaches_the_spec_and_the_trainer(with_new_option):
    copy, run = with_new_option
    run("-m", "pipelines.cli", "compile", "--output", str(copy / "spec.yaml"),
        "--label-smoothing", "0.1")
    spec = yaml.safe_load((copy / "spec.yaml").read_text())
    training = spec["root"]["inputDefinitions"]["parameters"]["training"]["defaultValue"]
    assert training["label_smoothing"] == 0.1
    assert "--label-smoothing" in run("-m", "trainer.task", "--help")
    # What the training stages pass to the trainer's container.
    flags = run("-c", "from trainer.options import TrainingOptions; "
                      "from trainer.schema import to_flags; "
                      "print(to_flags(TrainingOptions(label_smoothing=0.1)))")
    assert "'--label-smoothing', '0.1'" in flags
