"""The README, the sub-projects' READMEs and the documentation site (docs/) say only what runs.

* Every fenced Python block runs, each in a fresh namespace in a scratch folder.
* Every shell block (bash, sh, shell, console) runs, command by command, unless an HTML comment
  right before it, ``<!-- not-run: <reason> -->``, says why it cannot run here (a cluster, a GPU, a
  download, an hour, your own data). The comment is for the tests: a reader sees neither it nor the
  reason, so the prose before such a block says what the block needs ("On a GPU machine:"). A block's
  title is shown to readers, so none carries the tests' bookkeeping.
* Every command of a block that is not run is still parsed by its program's own parser, without
  running it (``command_problems``): argparse's (the module's ``main`` called with the arguments and
  stopped once ``parse_args`` returns), Hydra's (the app's CLI parser, then ``compose`` of the named
  config with the overrides, each value of a ``--multirun`` sweep), torchrun's, DVC's (and ``dvc repro``'s
  stages in dvc.yaml), wandb's (click), pip's (and the extras of a local project), the Makefile's
  targets and variables; repository paths a command names exist. A command of a program with no
  check here fails the test, so a new kind of command gets one.
  ``test_the_command_check_finds_a_wrong_command`` shows it failing on wrong commands.
* The README's claims table agrees with the claims file the pipeline writes, and the files the site
  includes (``--8<--``) exist; so does every repository path a page names.
* No page names an issue number, which a reader cannot see.
* ``tests/check_site_links.py`` (run by ``make docs`` on the built site) finds a broken link and a
  broken anchor.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import io
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SUBPROJECT_READMES = [
    REPO / f / "README.md" for f in ("core", "harness", "retrieval", "detection", "ablations", "figures", "results")
]
PAGES = [REPO / "README.md", *SUBPROJECT_READMES, *sorted((REPO / "docs").rglob("*.md"))]
SHELLS = ("bash", "sh", "shell", "console")
# The marker of a block that is not run: an HTML comment on its own line right before the fence
# (blank lines between them allowed). Markdown renderers (Material, GitHub) do not show it.
NOT_RUN = re.compile(r"^[ \t]*<!--[ \t]*not-run:(?P<reason>[^\n]*?)-->[ \t]*\n(?:[ \t]*\n)*\Z", re.M)
# Commands that only read the checkout run in its root; every other command runs in a scratch folder.
IN_REPO = {"make help", "python -m rambo.ablations.paper_settings"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)
SNIPPET = re.compile(r'^[ \t]*--8<-- "([^"]+)"', re.M)


def blocks_of(text: str, name: str, language_filter) -> list[tuple[str, str, str | None, str]]:
    """(name:line, language, the reason it is not run or None, code) of every fenced block of
    ``text`` whose language passes the filter."""
    found = []
    for match in FENCE.finditer(text):
        info = match["info"].strip()
        language = info.split()[0] if info else ""
        if not language_filter(language):
            continue
        marker = NOT_RUN.search(text, 0, match.start())
        indent = match["indent"]
        code = "".join(
            line[len(indent) :] if line.startswith(indent) else line for line in match["body"].splitlines(True)
        )
        where = f"{name}:{text[: match.start()].count(chr(10)) + 1}"
        found.append((where, language, None if marker is None else marker["reason"].strip(), code))
    return found


def blocks(language_filter) -> list[tuple[str, str, str | None, str]]:
    """The blocks of every page (``blocks_of``)."""
    return [
        block for page in PAGES for block in blocks_of(page.read_text(), str(page.relative_to(REPO)), language_filter)
    ]


PYTHON_BLOCKS = blocks(lambda language: language == "python")
SHELL_BLOCKS = blocks(lambda language: language in SHELLS)


def commands(code: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    lines = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            lines.append(" ".join(shlex.quote(word) for word in words))
    return lines


# ---------------------------------------------------------------------------------------------------
# The check of a command that is not run: its program's own parser, nothing executed.


def last_line(stream: io.StringIO) -> str:
    """The last line a parser printed: argparse's message."""
    return (stream.getvalue().strip().splitlines() or [""])[-1]


class _Parsed(Exception):
    """Raised in place of returning from ``parse_args``: the arguments parsed, the command stops there."""


def parsed_by_main(main, args: list[str]) -> tuple[argparse.Namespace | None, str | None]:
    """(the namespace, None) when ``main(args)``'s argparse parser accepts ``args``; (None, argparse's
    message) when it rejects them. ``main`` is stopped when ``parse_args`` returns, before any work."""
    source = Path(inspect.getsourcefile(main)).read_text()
    if "parse_args" not in source:
        return None, f"{main.__module__}.{main.__name__} parses no arguments with argparse: add a check for it here"
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise _Parsed(real(self, args, namespace))

    err = io.StringIO()
    argparse.ArgumentParser.parse_args = parse_then_stop
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            main(list(args))
    except _Parsed as parsed:
        return parsed.args[0], None
    except SystemExit as exit_:
        return None, f"its parser exits {exit_.code}: {last_line(err)}"
    finally:
        argparse.ArgumentParser.parse_args = real
    return None, f"{main.__module__}.{main.__name__} returned without parsing its arguments"


HYDRA_MAIN = re.compile(r'@hydra\.main\(\s*config_path="(?P<path>[^"]+)",\s*config_name="(?P<name>[^"]+)"')


def hydra_app(module: str) -> tuple[Path, str] | None:
    """(config folder, config name) of ``module`` when it is a Hydra app (``@hydra.main``), else None;
    read from its source, not imported."""
    spec = importlib.util.find_spec(module)
    found = HYDRA_MAIN.search(Path(spec.origin).read_text()) if spec and spec.origin else None
    return (Path(spec.origin).parent / found["path"], found["name"]) if found else None


def hydra_problems(config_dir: Path, config_name: str, args: list[str]) -> list[str]:
    """Hydra's command line parsed by Hydra's own parser, then the named config composed with its
    overrides: the one run, or the jobs of a ``-m`` sweep (its values parsed by Hydra's override
    parser and expanded as its basic sweeper expands them), each value of each sweep in one job."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    options, problem = parse_with(get_args_parser(), args)
    if problem:
        return [problem]
    if options.config_dir or options.config_path:
        return ["--config-dir / --config-path: not checked here"]
    try:
        overrides = OverridesParser.create().parse_overrides(options.overrides)
    except HydraException as error:
        return [f"Hydra cannot parse the overrides: {error}"]
    sweeps = [o for o in overrides if o.is_sweep_override()]
    if sweeps and not options.multirun:
        return [f"{sweeps[0].input_line}: a sweep needs -m (--multirun)"]
    choices = [
        [f"{o.get_key_element()}={value}" for value in o.sweep_string_iterator()]
        if o.is_sweep_override()
        else [o.input_line]
        for o in overrides
    ]
    problems = []
    with initialize_config_dir(str(config_dir), version_base="1.3"):
        # Every value of every sweep, the other sweeps at their first value: each value of a sweep is
        # composed once (the whole product, 48 jobs for the paper's retrieval sweep, composes the same values again).
        first = [values[0] for values in choices]
        jobs = [first] + [
            first[:i] + [value] + first[i + 1 :] for i, values in enumerate(choices) for value in values[1:]
        ]
        for job in jobs:
            try:
                compose(options.config_name or config_name, overrides=list(job), return_hydra_config=True)
            except (HydraException, OmegaConfBaseException) as error:
                problems.append(f"Hydra cannot compose {' '.join(job)}: {str(error).splitlines()[0]}")
                break
    return problems


def parse_with(parser: argparse.ArgumentParser, args: list[str]) -> tuple[argparse.Namespace | None, str | None]:
    """(the namespace, None) or (None, the parser's message)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return parser.parse_args(args), None
    except SystemExit as exit_:
        return None, f"its parser exits {exit_.code}: {last_line(err)}"


def set_profile_problems(args: list[str]) -> list[str]:
    """``python -m rambo.ablations.set_profile PROFILE [--force]`` (it reads ``sys.argv`` itself)."""
    from rambo.ablations.set_profile import PROFILES

    names = [a for a in args if a != "--force"]
    if len(names) != 1:
        return ["usage: python -m rambo.ablations.set_profile PROFILE [--force]"]
    return [] if (PROFILES / f"{names[0]}.yaml").is_file() else [f"no profile {names[0]!r} in {PROFILES}"]


# Modules whose own command line is not argparse's: the check of it.
OTHER_PARSERS = {"rambo.ablations.set_profile": set_profile_problems}


def module_problems(module: str, args: list[str]) -> list[str]:
    """``python -m module args``: a Hydra app's composition, or the module's argparse parser (a data
    stage's ``-- overrides`` then composed as its ``compose_data`` composes them)."""
    if importlib.util.find_spec(module) is None:
        return [f"no module {module}"]
    app = hydra_app(module)
    if app is not None:
        return hydra_problems(*app, args)
    if module in OTHER_PARSERS:
        return OTHER_PARSERS[module](args)
    imported = importlib.import_module(module)
    if not hasattr(imported, "main"):
        return [f"{module} has no main(argv): add a check for its command line here"]
    options, problem = parsed_by_main(imported.main, args)
    if problem:
        return [problem]
    stage = getattr(imported, "STAGE", None)
    if stage is not None and hasattr(stage, "config_dir"):  # a data stage: its datasets as the runs compose them
        from rambo.harness.data_stage import compose_data

        for name in options.data:
            try:
                compose_data(stage.config_dir, name, options.data_dir, options.overrides)
            except Exception as error:  # noqa: BLE001 (Hydra's and OmegaConf's errors alike)
                return [f"Hydra cannot compose data={name} with {options.overrides}: {str(error).splitlines()[0]}"]
    return []


def script_problems(script: str, args: list[str]) -> list[str]:
    """``python path/to/script.py args``: the file exists and its ``main(argv)`` parses ``args``."""
    path = REPO / script
    if not path.is_file():
        return [f"no file {script}"]
    sys.path.insert(0, str(path.parent))  # as python puts the script's folder first
    try:
        namespace = runpy.run_path(str(path), run_name="__docs__")
    finally:
        sys.path.remove(str(path.parent))
    if "main" not in namespace:
        return [f"{script} has no main(argv): add a check for its command line here"]
    return [problem for problem in [parsed_by_main(namespace["main"], args)[1]] if problem]


def python_problems(args: list[str]) -> list[str]:
    if args[:1] == ["-m"] and len(args) > 1:
        return module_problems(args[1], args[2:])
    if args and args[0].endswith(".py"):
        return script_problems(args[0], args[1:])
    return [f"python {' '.join(args[:1])}: only `python -m module` and `python script.py` are checked"]


def torchrun_problems(args: list[str]) -> list[str]:
    from torch.distributed.run import get_args_parser

    options, problem = parse_with(get_args_parser(), args)
    if problem:
        return [problem]
    rest = [options.training_script, *options.training_script_args]
    return python_problems(["-m", *rest] if options.module else rest)


def console_script_problems(name: str, args: list[str]) -> list[str] | None:
    """An installed console script's command line, or None when ``name`` is none of them."""
    found = importlib.metadata.entry_points(group="console_scripts", name=name)
    if not found:
        return None
    entry = next(iter(found))
    function = entry.load()
    app = re.search(r'run_hydra_app\("([\w.]+)"\)', inspect.getsource(function))  # rambo.harness.console
    if app:
        return module_problems(app[1], args)
    return [problem for problem in [parsed_by_main(function, args)[1]] if problem]


def makefile() -> tuple[set[str], set[str]]:
    """(the Makefile's targets, the variables it reads)."""
    text = (REPO / "Makefile").read_text()
    targets = set()
    for line in text.splitlines():
        rule = re.match(r"^([^\t#\s:=][^:=]*?)\s*::?(?!=)", line)
        if rule:
            targets |= set(rule[1].split())
    return targets, set(re.findall(r"\$[({](\w+)[)}]", text))


def make_problems(args: list[str]) -> list[str]:
    targets, variables = makefile()
    problems = []
    for arg in args:
        if "=" in arg:
            name = arg.split("=", 1)[0]
            if name not in variables:
                problems.append(f"the Makefile reads no variable {name}")
        elif arg.startswith("-"):
            problems.append(f"make {arg}: not checked here")
        elif arg not in targets:
            problems.append(f"the Makefile has no target {arg}")
    return problems


def dvc_problems(args: list[str]) -> list[str]:
    import logging

    from dvc.cli import DvcParserError, parse_args

    said = []  # DVC's parser logs its message, then raises

    class Said(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())

    logger, handler = logging.getLogger("dvc"), Said()
    logger.addHandler(handler)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            options = parse_args(args)
    except (DvcParserError, SystemExit):
        return [f"dvc's parser: {'; '.join(said) or 'rejects the arguments'}"]
    finally:
        logger.removeHandler(handler)
    if options.cmd != "repro":
        return []
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    return [f"dvc.yaml has no stage {t}" for t in options.targets or () if t.split("@")[0] not in stages]


def wandb_problems(args: list[str]) -> list[str]:
    import click
    from wandb.cli.cli import cli

    if not args or args[0].startswith("-"):
        return ["wandb: only `wandb COMMAND ...` is checked"]
    # A glob stands for the files runs write (the shell expands it once they exist): a path that exists here.
    args = [str(REPO) if re.search(r"[*?[]", arg) else arg for arg in args]
    group = click.Context(cli, info_name="wandb")
    command = cli.get_command(group, args[0])
    if command is None:
        return [f"wandb has no command {args[0]}"]
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            command.make_context(args[0], list(args[1:]), parent=group)
    except click.ClickException as error:
        return [f"wandb's parser: {error.format_message()}"]
    return []


def pip_problems(args: list[str]) -> list[str]:
    from pip._internal.commands import create_command

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the copy pip carries
        from pip._vendor import tomli as tomllib

    if args[:1] != ["install"]:
        return [f"pip {' '.join(args[:1])}: only pip install is checked"]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            _, requirements = create_command("install").parse_args(args[1:])
    except SystemExit as exit_:
        return [f"pip's parser exits {exit_.code}: {last_line(err)}"]
    problems = []
    for requirement in requirements:
        local = re.fullmatch(r"(?P<path>\.{1,2}/[^\[]*)(?:\[(?P<extras>[^\]]*)\])?", requirement)
        if not local:
            continue
        project = REPO / local["path"] / "pyproject.toml"
        if not project.is_file():
            problems.append(f"{local['path']} is no project of the repository")
            continue
        extras = tomllib.loads(project.read_text())["project"].get("optional-dependencies", {})
        problems += [
            f"{local['path']} has no extra [{e}]" for e in (local["extras"] or "").split(",") if e and e not in extras
        ]
    return problems


# The repository's own folders: a path under one of them a command names must exist (what the
# command writes aside, OUTPUTS below); results/, build/, outputs/ and data/ are written by runs.
SOURCE_TOP = ("core", "harness", "retrieval", "detection", "ablations", "figures", "benchmarks", "examples")
SOURCE_TOP += ("environments", "tests", "docs")


def path_problems(words: list[str]) -> list[str]:
    problems = []
    for word in words:
        value = word.split("=", 1)[-1]
        if re.fullmatch(rf"(?:\./)?(?:{'|'.join(SOURCE_TOP)})/[^\s*?$<>{{}}]*", value):
            path = value.removeprefix("./")
            if path not in OUTPUTS and not (REPO / path).exists():
                problems.append(f"no path {path} in the repository")
    return problems


SHELL_BUILTINS = {"cd", "source", ".", "export", "time"}
OPERATORS = {"&&", "||", ";", "|"}


def command_problems(command: str) -> list[str]:
    """What the program of each simple command of ``command`` (a line of ``commands``) says is wrong
    with its arguments, parsed as the program parses them and not run; [] when nothing is."""
    words = shlex.split(command)
    simple, problems = [], []
    for word in [*words, ";"]:
        if word not in OPERATORS:
            simple.append(word)
            continue
        while simple and re.fullmatch(r"[A-Za-z_]\w*=.*", simple[0]):  # NAME=value before the program
            simple.pop(0)
        if simple[:1] == ["time"]:
            simple.pop(0)
        if simple:
            problems += [f"`{' '.join(simple)}`: {p}" for p in simple_command_problems(simple[0], simple[1:])]
        simple = []
    return problems


def simple_command_problems(program: str, args: list[str]) -> list[str]:
    problems = path_problems(args)
    if program in ("python", "python3"):
        return problems + python_problems(args)
    if program == "torchrun":
        return problems + torchrun_problems(args)
    if program == "make":
        return problems + make_problems(args)
    if program == "dvc":
        return problems + dvc_problems(args)
    if program == "wandb":
        return problems + wandb_problems(args)
    if program in ("pip", "pip3"):
        return problems + pip_problems(args)
    if program == "git":
        return problems + ([] if args[:1] == ["clone"] else [f"git {' '.join(args[:1])}: only git clone is checked"])
    if program in SHELL_BUILTINS:
        return problems
    found = console_script_problems(program, args)
    if found is not None:
        return problems + found
    return problems + [f"no check for the program {program}: add one to tests/test_docs_blocks.py"]


# ---------------------------------------------------------------------------------------------------


BOOKKEEPING_TITLE = re.compile(r'^[ \t]*```[^\n`]*title="[^"]*\b(?:[Nn]ot run|the tests)\b', re.M)


def bookkeeping_titles(text: str, name: str) -> list[str]:
    """The blocks of ``text`` whose title (shown above the block on the site) speaks of the tests."""
    return [f"{name}:{text[: m.start()].count(chr(10)) + 1}" for m in BOOKKEEPING_TITLE.finditer(text)]


def test_no_block_title_is_the_tests_bookkeeping_and_every_marker_says_why():
    """A title is shown to readers: a block that is not run is marked by <!-- not-run: why --> before it,
    and the prose says what it needs."""
    assert [w for page in PAGES for w in bookkeeping_titles(page.read_text(), str(page.relative_to(REPO)))] == []
    assert [where for where, _, reason, _ in PYTHON_BLOCKS + SHELL_BLOCKS if reason == ""] == []


def test_the_pages_have_blocks_to_run():
    assert len(PYTHON_BLOCKS) >= 5 and len(SHELL_BLOCKS) >= 10
    assert any(reason is None for _, _, reason, _ in SHELL_BLOCKS)
    assert any(reason is not None for _, _, reason, _ in SHELL_BLOCKS)


@pytest.mark.parametrize("where, language, reason, code", PYTHON_BLOCKS, ids=[b[0] for b in PYTHON_BLOCKS])
def test_python_block_runs(where, language, reason, code, tmp_path, monkeypatch):
    compiled = compile(code, where, "exec")
    if reason is not None:
        pytest.skip(f"compiled, not run: {reason}")
    monkeypatch.chdir(tmp_path)
    exec(compiled, {"__name__": "__docs__"})


# What a command writes, as its page says: checked after it runs (Getting started's first run; a
# standalone tiny run does not log to W&B, so WANDB_MODE is not set for the commands).
WRITES = {
    "python -m rambo.retrieval.train profile=tiny": (
        "outputs/synthetic_rambo_log/seed0/train.log",
        "outputs/synthetic_rambo_log/seed0/metrics.json",
        "outputs/synthetic_rambo_log/seed0/curve.json",
        "outputs/synthetic_rambo_log/seed0/checkpoint.pt",
        "data/synthetic_tiny",
    ),
}


@pytest.mark.parametrize("where, language, reason, code", SHELL_BLOCKS, ids=[b[0] for b in SHELL_BLOCKS])
def test_shell_block_runs_or_its_commands_parse(where, language, reason, code, tmp_path):
    if reason is not None:
        problems = [f"{where}: {p}" for command in commands(code) for p in command_problems(command)]
        assert problems == []
        pytest.skip(f"every command parsed, none run: {reason}")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("WANDB_MODE", None)
    for command in commands(code):
        cwd = REPO if command in IN_REPO else tmp_path
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (
            f"{where}: `{command}` exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
        for path in WRITES.get(command, ()):
            assert (cwd / path).exists(), f"{where}: `{command}` did not write {path}"
        if command in WRITES:
            assert not list(cwd.rglob("wandb")), f"{where}: `{command}` logged to W&B"


# A page of wrong commands, each what a reader could have been shown; every one must be caught.
WRONG = {
    "rambo-eval --checkpoint x.pt --dataset imagefolder --root DIR": "unrecognized arguments",
    "python -m rambo.retrieval.evaluate --checkpoint x.pt --dataset imagefolder": "required",
    "python -m rambo.retrieval.evaluate --checkpoint x.pt --dataset flowers --root DIR": "invalid choice",
    "python -m rambo.retrieval.train experiment=sop_log profile=papr": "papr",
    "python -m rambo.retrieval.train experiment=sop_log profil=paper": "profil",
    "python -m rambo.retrieval.train experiment=no_such_row": "no_such_row",
    "python -m rambo.retrieval.train loss.no_such_key=1": "no_such_key",
    "python -m rambo.retrieval.train experiment=sop_log,cub_log": "--multirun",
    "python -m rambo.detection.train -m experiment=table5_r50_voc07_rambo,table5_no_such_row seed=0,1": "table5_no_such_row",
    "torchrun --nproc_per_node=4 -m rambo.retrieval.train experiment=sop_recall_at_k": "sop_recall_at_k",
    "torchrun --no-such-flag -m rambo.retrieval.train": "unrecognized arguments",
    "python -m rambo.retrieval.prepare --data-dir data --check --data flowers": "invalid choice",
    "python -m rambo.retrieval.prepare --data-dir data --data sop -- profile=no_such_profile": "no_such_profile",
    "python -m rambo.ablations.set_profile no_such_profile": "no profile",
    "python -m rambo.no_such_module --help": "no module",
    "make reproduce PROFILES=paper": "no variable PROFILES",
    "make no-such-target": "no target",
    "dvc repro no_such_stage": "no stage",
    "dvc plots shw": "invalid choice",
    "wandb sync --no-such-flag x": "no-such-flag",
    'pip install "./core[no_such_extra]"': "no extra",
    "pip install ./no_such_project": "no project",
    "python examples/train_digits.py --no-such-flag": "unrecognized arguments",
    "python examples/no_such_example.py": "no file",
    "python -m rambo.detection.variance_study --work build/x --seeds four": "invalid int",
    "python -m rambo.retrieval.prepare --data-dir d --rows-from ablations/profiles/no.yaml --data sop": "no path",
    "no-such-program --flag": "no check for the program",
}


def test_the_command_check_finds_a_wrong_command(tmp_path):
    page = "A page.\n\n" + "".join(
        f"<!-- not-run: wrong on purpose -->\n\n```bash\n{command}\n```\n\n" for command in WRONG
    )
    found = blocks_of(page, "fixture.md", lambda language: language in SHELLS)
    assert [reason for _, _, reason, _ in found] == ["wrong on purpose"] * len(WRONG)
    for (_, _, _, code), (command, says) in zip(found, WRONG.items(), strict=True):
        problems = [p for line in commands(code) for p in command_problems(line)]
        assert problems and says in " ".join(problems), f"{command}: {problems}"


def test_the_command_check_passes_right_commands():
    right = [
        "python -m rambo.retrieval.evaluate --checkpoint x.pt --dataset imagefolder --root DIR",
        "rambo-eval --embeddings e.npy --labels l.npy --ks 1 10",
        "python -m rambo.detection.train -m experiment=table5_r50_voc07_rambo,table5_r50_voc07_ce seed=0,1",
        "RAMBO_NUMERICS=native make reproduce PROFILE=paper",
        "git clone URL rambo && cd rambo && source .venv/bin/activate",
        "dvc repro detection_warm_start",
    ]
    assert [p for command in right for p in command_problems(shlex.join(shlex.split(command)))] == []


def test_the_marker_is_found_only_right_before_its_block_and_a_title_is_no_marker():
    page = '<!-- not-run: a GPU -->\n```python\nimport torch\n```\n\n```bash title="Not run by the tests: x"\nls\n```\n'
    found = blocks_of(page, "fixture.md", lambda _: True)
    assert [reason for _, _, reason, _ in found] == ["a GPU", None]
    assert bookkeeping_titles(page, "fixture.md") == ["fixture.md:6"]
    unmarked = blocks_of("<!-- not-run: x -->\n\nprose between\n\n```bash\nls\n```\n", "f.md", lambda _: True)
    assert [reason for _, _, reason, _ in unmarked] == [None]


def test_readme_claims_table_is_the_pipelines():
    claims = json.loads((REPO / "results" / "mini" / "tables" / "claims.json").read_text())["claims"]
    readme = (REPO / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| ") and "|---" not in line][1:]

    def signed(x: float) -> str:
        return f"{x:+.1f}"

    expected = []
    for claim in claims:
        low, high = claim["interval"]
        paper = "-" if claim["paper_difference"] is None else signed(claim["paper_difference"])
        expected.append(
            f"| {claim['claim']} | {paper} | {signed(claim['difference'])} [{signed(low)}, {signed(high)}] "
            f"| {claim['verdict']} | {claim['second_draw']['verdict']} |"
        )
    assert rows[: len(expected)] == expected


def test_every_included_file_exists():
    for page in PAGES:
        for path in SNIPPET.findall(page.read_text()):
            assert (REPO / path).is_file(), f"{page.relative_to(REPO)} includes {path}, which does not exist"


def test_the_included_gpu_budget_is_the_scripts_output(tmp_path):
    out = tmp_path / "gpu_budget.md"
    subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_budget.py"), "--markdown", str(out)],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    assert out.read_text() == (REPO / "benchmarks" / "gpu_budget.md").read_text(), "run make gpu-budget"


# Paths a page names in backticks, under the repository's own folders (placeholders such as <profile> aside).
TOP = "core|harness|retrieval|detection|ablations|figures|results|benchmarks|examples|environments|tests|docs|\\.ci"
NAMED_PATH = re.compile(rf"`((?:{TOP})/[^`\s<>*{{}}$]*)`")


# What a command writes when it is run, named by a page but not committed.
OUTPUTS = {"benchmarks/two_pass_memory_cpu.json", "benchmarks/recall_at_k_sop_scale.json"}


def test_every_repository_path_a_page_names_exists():
    missing = []
    for page in PAGES:
        for path in NAMED_PATH.findall(page.read_text()):
            if path not in OUTPUTS and not (REPO / path).exists():
                missing.append(f"{page.relative_to(REPO)}: {path}")
    assert missing == []


ISSUE_REF = re.compile(r"\b[Ii]ssues? \d+|(?<![\w&/])#\d+\b")


def test_no_page_names_an_issue_number():
    found = []
    for page in [*PAGES, REPO / "CHANGELOG.md"]:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            found += [f"{page.relative_to(REPO)}:{number}: {m}" for m in ISSUE_REF.findall(line)]
    assert found == []


def test_the_link_check_finds_a_broken_link_and_anchor(tmp_path):
    site = tmp_path / "site"
    (site / "a").mkdir(parents=True)
    (site / "index.html").write_text('<h2 id="top">x</h2><a href="a/">a</a><a href="#top">t</a><img src="x.png">')
    (site / "x.png").write_bytes(b"")
    (site / "a" / "index.html").write_text(
        '<a href="../index.html#top">ok</a><a href="../b/">b</a><a href="../#gone">g</a>'
    )
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "check_site_links.py"), str(site)], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "a/index.html: ../b/ names no file of the site",
        "a/index.html: ../#gone names no anchor of index.html",
    ]
    (site / "a" / "index.html").write_text('<a href="../index.html#top">ok</a>')
    assert subprocess.run([sys.executable, str(REPO / "tests" / "check_site_links.py"), str(site)]).returncode == 0
