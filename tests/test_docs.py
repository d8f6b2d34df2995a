"""The README and docs/ pages, as a newcomer reads them: every `gpu-pipeline` command they
show still parses, every link between them leads to a page, and every file they name
exists."""

from __future__ import annotations

import re
import shlex

import pytest

from pipelines.cli import build_parser
from tests.support.paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.M | re.S)


def _commands(text: str) -> list[str]:
    """The `gpu-pipeline ...` command lines of a page's code blocks (continuations joined,
    comments and a prompt's `$ ` dropped)."""
    found = []
    for block in _code_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            words = line.split()
            if words and words[0].endswith("gpu-pipeline") and words[0] != "[gpu-pipeline]":
                found.append(line.split(" #")[0].strip())
    return found


COMMANDS = [(page.name, command) for page in PAGES for command in _commands(page.read_text())]


def test_the_pages_show_commands():
    assert len(COMMANDS) >= 15, COMMANDS  # the extraction did find them


def test_every_command_shown_runs_in_the_shell_the_readme_leaves():
    """The README installs into `.venv` and runs from the checkout: a command shown as
    `gpu-pipeline ...` would be `command not found` there (nothing puts it on the PATH)."""
    bare = [f"{page}: {command}" for page, command in COMMANDS
            if not command.startswith(".venv/bin/gpu-pipeline ")]
    assert not bare, bare


@pytest.mark.parametrize("page,command", COMMANDS, ids=[f"{p}: {c[:60]}" for p, c in COMMANDS])
def test_every_command_shown_parses(page, command):
    # `[--dry-run]` in a page means "optionally": both forms must parse.
    for form in {command.replace("[", "").replace("]", ""),
                 re.sub(r"\s*\[[^\]]*\]", "", command)}:
        args = shlex.split(form)[1:]
        try:
            build_parser().parse_args(args)
        except SystemExit as exc:
            pytest.fail(f"{page}: `{form}` does not parse (exit {exc.code})")


def _links(page):
    return [(page, target) for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)",
                                                      page.read_text())
            if "://" not in target]


LINKS = [link for page in PAGES for link in _links(page)]


@pytest.mark.parametrize("page,target", LINKS, ids=[f"{p.name} -> {t}" for p, t in LINKS])
def test_every_link_between_pages_leads_somewhere(page, target):
    assert (page.parent / target).exists(), f"{page.name} links to {target}, which is missing"


#: Paths the pages name that a command writes (not in a fresh clone).
WRITTEN = ("benchmarks/results/",)


def test_every_file_a_page_names_exists():
    """Backquoted paths of the project's files (`components/gpu/pools.py`, `examples/...`)."""
    missing = []
    for page in PAGES:
        for path in re.findall(r"`((?:trainer|components|pipelines|tests|examples|benchmarks|"
                               r"docker|requirements|docs)/[\w./-]*)`", page.read_text()):
            if "*" not in path and "<" not in path and path not in WRITTEN \
                    and not (ROOT / path).exists():
                missing.append(f"{page.name}: {path}")
    assert not missing, missing


def test_every_module_a_page_names_exists():
    """Backquoted dotted names of the project (`trainer.cluster.training_plan`,
    `components.gpu.pools.check_pools`): a module, or a name in one."""
    missing = []
    for page in PAGES:
        for name in re.findall(r"`((?:trainer|components|pipelines)(?:\.\w+)+)", page.read_text()):
            path = ROOT.joinpath(*name.split("."))
            module = path.parent.with_suffix(".py")
            if not (path.with_suffix(".py").exists() or path.is_dir()
                    or (module.exists() and path.name in module.read_text())):
                missing.append(f"{page.name}: {name}")
    assert not missing, missing


def _normalised(lines: list[str]) -> list[str]:
    """Sample output lines without what changes with every commit (content hashes, the
    size of a request that embeds the components' code) or machine (why the registry or
    the price catalog could not be read)."""
    return [re.sub(r"(Cloud Billing Catalog API \(DefaultCredentialsError: ).*(\); using)",
                   r"\1...\2",
                   re.sub(r"(no measured speed: ).*", r"\1...",
                          re.sub(r"[\d,]+ bytes", "N bytes",
                                 re.sub(r"[0-9a-f]{16,}", "HASH", line))))
            for line in lines]


#: Sample outputs a page shows whole, each with the command that prints it (None: the
#: block's first line, after `$ `) and the start of its block.
SAMPLES = [
    ("vertex-ai.md", None, "$ .venv/bin/gpu-pipeline submit --dry-run"),
    ("gpu-configuration.md",
     "gpu-pipeline validate-gpu --config examples/pools.json --region us-central1",
     "invalid GPU configuration (vertex worker pool specs):"),
]


@pytest.mark.parametrize("page,command,start", SAMPLES, ids=[p for p, _, _ in SAMPLES])
@pytest.mark.slow
def test_a_documented_sample_output_is_what_its_command_prints(page, command, start, capsys,
                                                               monkeypatch):
    from pipelines.cli import main

    (block,) = [b for b in _code_blocks((ROOT / "docs" / page).read_text())
                if b.startswith(start)]
    if command is None:
        command, _, block = block.replace("\\\n", " ").partition("\n")
    monkeypatch.chdir(ROOT)  # the commands name the checkout's files
    main(shlex.split(command.removeprefix("$ "))[1:])
    printed = capsys.readouterr()
    assert _normalised((printed.out + printed.err).splitlines()) == \
        _normalised(block.splitlines())


#: Documented commands that need what a test has not: a cloud project, a trained model,
#: a user's own photos, the internet, or minutes of training (the local run has tests of its own).
NEEDS_MORE = ("run --local", "predict", "serve", "models list", "schedule list",
              "schedule pause", "weights copy")
#: Documented commands that show a refusal (the page prints it): the exit status they end with.
REFUSALS = {"validate-gpu --machine-type n1-standard-32 --accelerator-type NVIDIA_TESLA_V100": 1,
            "validate-gpu --config examples/pools.json": 1}


def _runnable(command: str) -> bool:
    words = command.split(maxsplit=1)[1] if " " in command else ""
    if any(words.startswith(prefix) for prefix in NEEDS_MORE):
        return False
    # What would call Google Cloud runs here only as its dry run.
    return not words.startswith(("submit", "schedule", "publish", "benchmark")) \
        or "--dry-run" in command


RUNNABLE = [(page, command) for page, command in COMMANDS if _runnable(command)]


def test_the_runnable_commands_are_found():
    assert len(RUNNABLE) >= 10, RUNNABLE


@pytest.mark.parametrize("page,command", RUNNABLE, ids=[f"{p}: {c[:60]}" for p, c in RUNNABLE])
@pytest.mark.slow
def test_every_command_a_newcomer_can_run_here_runs_as_written(page, command, tmp_path,
                                                               monkeypatch, capsys):
    """In a directory as the pages leave it (`cp config.example.yaml my-config.yaml`, the
    checkout's examples beside it), each command ends as documented, without a traceback."""
    import shutil

    from pipelines.cli import main

    shutil.copyfile(ROOT / "config.example.yaml", tmp_path / "my-config.yaml")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    form = command.replace("[", "").replace("]", "")
    expected = next((code for start, code in REFUSALS.items() if start in form), 0)
    try:
        code = main(shlex.split(form)[1:])
    except SystemExit as exc:
        code = exc.code
    printed = capsys.readouterr()
    assert (code or 0) == expected, f"{page}: `{form}` ended {code}:\n{printed.out}{printed.err}"
    assert "Traceback" not in printed.out + printed.err
    assert not (tmp_path / "local_runs").exists()  # nothing ran beyond what it said
