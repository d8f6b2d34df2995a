"""The shape of the code: layers that import one way, one error model, options declared once."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.paths import ROOT
from trainer.common.errors import InputError, ProjectError, StageError

#: Each package may import only the packages listed (and itself): the trainer, which runs
#: alone in its container, sits at the bottom; the pipelines' CLI and definitions at the top;
#: the release tooling (`make lock`, `make image-check`) beside them, imported by none.
LAYERS = {"trainer": set(), "components": {"trainer"}, "pipelines": {"trainer", "components"},
          "release": {"trainer", "components"}}


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


#: Inside the trainer, each sub-package may import only those listed (and itself); the
#: entry point `trainer/task.py` sits above them all.
TRAINER_LAYERS = {"common": set(), "cluster": {"common"}, "models": {"common"},
                  "serving": {"common", "models"},
                  "run": {"common", "cluster", "models", "serving"},
                  "benchmark": {"common", "cluster", "models", "run"}}


def _imported_modules(path: Path) -> set[str]:
    """The project's modules a file imports, as dotted names (`from a.b import c` gives
    `a.b.c` when that is a module, else `a.b`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                module = ROOT.joinpath(*dotted.split("."))
                found.add(dotted if module.with_suffix(".py").is_file() or module.is_dir()
                          else node.module)
    return {name for name in found if name.split(".")[0] in LAYERS}


@pytest.mark.parametrize("path", sorted((ROOT / "trainer").glob("*/*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_trainers_packages_import_one_way(path):
    package = path.parent.name
    allowed = TRAINER_LAYERS[package] | {package}
    used = {name.split(".")[1] for name in _imported_modules(path)
            if name.startswith("trainer.") and name.count(".") >= 1}
    assert used <= allowed, f"{path.relative_to(ROOT)} imports trainer.{used - allowed}"


def test_no_module_imports_itself_back():
    """No import circle between the project's modules, imports inside functions included
    (a circle forces an order on imports and hides which module is the lower one)."""
    graph = {}
    for _, path in _modules():
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        graph[name.removesuffix(".__init__")] = _imported_modules(path)
    state: dict[str, int] = {}

    def visit(node, trail):
        if state.get(node) == 1:
            raise AssertionError("import circle: " + " -> ".join(
                [*trail[trail.index(node):], node]))
        if state.get(node) == 2:
            return
        state[node] = 1
        for child in sorted(graph.get(node, ())):
            visit(child, [*trail, node])
        state[node] = 2

    for node in sorted(graph):
        visit(node, [])


#: A test module names the modules it exercises without importing them (through a
#: subprocess, the CLI or the pipeline) on comment lines that start with this, each module
#: in backquotes.
EXERCISED = "# Exercised here without an import"


def _tested_modules() -> set[str]:
    """What the test modules import (a package's module by `from package import module`
    too), and the modules they name after EXERCISED."""
    found: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        for block in re.findall(rf"^{re.escape(EXERCISED)}.*\n(?:#.*\n)*", text, flags=re.M):
            found.update(re.findall(r"`([a-z_][\w.]*)`", block))
    return found


def test_every_module_is_imported_by_a_test_or_named_as_exercised():
    tested = _tested_modules()
    missing = []
    for _, path in _modules():
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        body = ast.parse(path.read_text()).body
        only_a_docstring = len(body) <= 1 and all(isinstance(n, ast.Expr) for n in body)
        if name not in tested and not (path.name == "__init__.py" and only_a_docstring):
            missing.append(name)
    assert not missing, f"imported by no test and named after {EXERCISED!r} in none: {missing}"


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
    from pipelines import cli
    from pipelines.commands import validate_gpu
    from pipelines.vertex.publishing import PublishError

    raised = {"InputError": PublishError("the destination is refused"),
              "StageError": BuildContextError("the sources are missing")}[error]

    def fail(args):
        raise raised

    monkeypatch.setattr(validate_gpu, "run", fail)
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
    options = copy / "trainer" / "run" / "training_options.py"
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
    probe = ("import json; from pipelines.config import Config; "
             "from pipelines.config_loading import load_config; "
             "schema = Config.model_json_schema(); "
             "config = load_config(overrides={'training': {'label_smoothing': 0.25}}); "
             "print(json.dumps([schema['$defs']['TrainingOptions']['properties']"
             "['label_smoothing'], config.training_options().model_dump()]))")
    declared, options = json.loads(run("-c", probe))
    assert declared["exclusiveMaximum"] == 1 and declared["default"] == 0.0
    assert options["label_smoothing"] == 0.25
    bad = subprocess.run([sys.executable, "-m", "pipelines.cli", "compile", "--label-smoothing",
                          "2", "--output", str(copy / "x.yaml")], cwd=copy, text=True,
                         capture_output=True, env={**os.environ, "PYTHONPATH": str(copy)})
    assert bad.returncode == 2
    assert "training.label_smoothing is 2.0; expected a finite number in [0, 1)" in bad.stderr


@pytest.mark.slow
def test_a_new_training_option_reaches_the_spec_and_the_trainer(with_new_option):
    copy, run = with_new_option
    run("-m", "pipelines.cli", "compile", "--output", str(copy / "spec.yaml"),
        "--label-smoothing", "0.1")
    spec = yaml.safe_load((copy / "spec.yaml").read_text())
    training = spec["root"]["inputDefinitions"]["parameters"]["training"]["defaultValue"]
    assert training["label_smoothing"] == 0.1
    assert "--label-smoothing" in run("-m", "trainer.task", "--help")
    # What the training stages pass to the trainer's container.
    flags = run("-c", "from trainer.run.training_options import TrainingOptions; "
                      "from trainer.common.schema import to_flags; "
                      "print(to_flags(TrainingOptions(label_smoothing=0.1)))")
    assert "'--label-smoothing', '0.1'" in flags
