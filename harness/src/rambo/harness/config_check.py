"""The composed run config checked before anything is created, the same for both training apps.

An app describes its options ([`Bound`][rambo.harness.config_check.Bound]: a numeric option and its range) and the paths
that must exist, and returns [`Problem`][rambo.harness.config_check.Problem] s from one function, `problems(cfg)`. Hydra
runs that function through [`CheckConfig`][rambo.harness.config_check.CheckConfig], a Hydra callback the apps'
`train.yaml` names under `hydra.callbacks`: for a single run it is called with the composed config *before* Hydra makes
the output folder, so a bad option stops the run with one line per problem (`error: ...` on
stderr) and exit code 2, and nothing is written. For a multirun (`--multirun`, the pipeline's
seed sweeps) the options shared by every job are checked before the sweep folder is made; options
the sweep changes (and values that refer to them, such as a path holding `${seed}`) are checked
by each job before it trains ([`stop_on_problems`][rambo.harness.config_check.stop_on_problems] in the app's entry
point).

[`stop`][rambo.harness.config_check.stop] is the apps' way out for bad input found later (an unreadable image, a sampler
that cannot fill a batch): the same `error:` line, written to the run's log file too, and exit code 2.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from omegaconf import DictConfig, ListConfig, OmegaConf

from .job_files import restore_job_files

try:  # Hydra is a dependency of the apps; the checks themselves need only OmegaConf
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover
    Callback = object  # type: ignore[misc,assignment]

USAGE_ERROR = 2  # the apps' exit code for bad input

log = logging.getLogger(__name__)


class InputError(Exception):
    """Bad input found while a run sets up or trains (an unreadable image, a batch the data cannot
    fill): the apps' entry points turn it into one `error:` line and exit code 2
    ([`stop`][rambo.harness.config_check.stop])."""

    def line(self) -> str:
        """The message in one line. Raised in a DataLoader worker, the error reaches the training
        process with the worker's traceback in its message (torch's `ExceptionWrapper`): the
        original message is its last line."""
        text = str(self).strip()
        last = text.splitlines()[-1] if text else type(self).__name__
        marker = f"{type(self).__name__}: "
        return last.split(marker, 1)[1] if marker in last and "\n" in text else last


@dataclass(frozen=True)
class Problem:
    """One problem of a config: the option (dotted key) it is about and the line that says it."""

    key: str
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Bound:
    """A numeric option and its range: `low <= value` (`low < value` with `low_open`),
    `value <= high` (`value < high` with `high_open`), an integer with `integer`, `null`
    allowed with `optional`. A key absent from the config is not checked. `meaning` says what
    the option is, in the message."""

    key: str
    low: float | None = None
    high: float | None = None
    integer: bool = False
    optional: bool = False
    low_open: bool = False
    high_open: bool = False
    meaning: str = ""

    def requirement(self) -> str:
        kind = "an integer" if self.integer else "a number"
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {_number(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {_number(self.high)}")
        text = f"{kind} {' and '.join(parts)}".strip()
        if self.optional:
            text += " (or null)"
        return text

    def problem(self, value: Any) -> Problem | None:
        """The problem of `value` for this option, or None."""
        if value is None and self.optional:
            return None
        if not _fits(value, self):
            meaning = f" ({self.meaning})" if self.meaning else ""
            return Problem(self.key, f"{self.key}={_shown(value)}: must be {self.requirement()}{meaning}")
        return None


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _shown(value: Any) -> str:
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value)
    return "null" if value is None else str(value)


def _fits(value: Any, bound: Bound) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if bound.integer and not float(value).is_integer():
        return False
    if not math.isfinite(value):
        return False
    if bound.low is not None and (value <= bound.low if bound.low_open else value < bound.low):
        return False
    return bound.high is None or (value < bound.high if bound.high_open else value <= bound.high)


MISSING = object()


def select(cfg: DictConfig, key: str, default: Any = MISSING) -> Any:
    """`cfg`'s value at dotted `key` (resolved), or `default` when the key is absent."""
    value = OmegaConf.select(cfg, key, default=default, throw_on_missing=False)
    return value


def bound_problems(cfg: DictConfig, bounds: Iterable[Bound]) -> list[Problem]:
    """The problems of every [`Bound`][rambo.harness.config_check.Bound] whose key is in `cfg`; a list value (e.g. a
    list of epochs) is checked item by item."""
    problems = []
    for bound in bounds:
        value = select(cfg, bound.key)
        if value is MISSING:
            continue
        values = list(value) if isinstance(value, ListConfig) else [value]
        for item in values:
            if (problem := bound.problem(item)) is not None:
                if isinstance(value, ListConfig):
                    problem = Problem(
                        bound.key, f"{bound.key}={_shown(value)}: every item must be {bound.requirement()}"
                    )
                problems.append(problem)
                break
    return problems


def without_derived(cfg: DictConfig, problems: Sequence[Problem]) -> list[Problem]:
    """`problems` less those of options whose value interpolates another problem's option
    (`eval_batch_size: ${batch_size}`): one line for one mistake."""
    keys = {problem.key for problem in problems}
    return [problem for problem in problems if not refers_to(cfg, problem.key, keys - {problem.key})]


def choice_problems(cfg: DictConfig, choices: dict[str, Sequence[Any]]) -> list[Problem]:
    """A problem for each `key` of `choices` whose value is not one of its choices."""
    problems = []
    for key, allowed in choices.items():
        value = select(cfg, key)
        if value is not MISSING and value not in allowed:
            listed = ", ".join(_shown(option) for option in allowed)
            problems.append(Problem(key, f"{key}={_shown(value)}: must be one of {listed}"))
    return problems


#: The run options both apps have, checked the same way in each: what the harness's run plumbing reads
#: (DataLoader workers, torch's threads, the seed, the epochs of one invocation, resuming, precision).
RUN_BOUNDS = (
    Bound("num_workers", 0, integer=True, meaning="DataLoader worker processes; 0 loads in the training process"),
    Bound("threads", 0, integer=True, meaning="torch CPU threads; 0 keeps torch's default"),
    Bound("seed", 0, integer=True),
    Bound("max_epochs_this_run", 1, integer=True, optional=True, meaning="epochs of this invocation"),
)
RUN_CHOICES = {"resume": (False, True, "auto"), "precision": ("float32", "bfloat16")}


def option_problems(cfg: DictConfig, bounds: Iterable[Bound], choices: dict[str, Sequence[Any]]) -> list[Problem]:
    """The problems of an app's options: its `bounds` and the run options
    ([`RUN_BOUNDS`][rambo.harness.config_check.RUN_BOUNDS]) out of range, its `choices` and
    [`RUN_CHOICES`][rambo.harness.config_check.RUN_CHOICES] not among theirs, less those that
    only follow another problem ([`without_derived`][rambo.harness.config_check.without_derived])."""
    found = bound_problems(cfg, (*RUN_BOUNDS, *bounds)) + choice_problems(cfg, {**RUN_CHOICES, **choices})
    return without_derived(cfg, found)


def task_overrides(cfg: DictConfig | None = None) -> list[str]:
    """The command line's overrides of the running Hydra app (`hydra.overrides.task`): from
    `cfg` when it holds the `hydra` node, else from the running app; `[]` outside one."""
    if cfg is not None and OmegaConf.select(cfg, "hydra.overrides.task") is not None:
        return list(cfg.hydra.overrides.task)
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def override_key(override: str) -> str:
    """The key an override sets: `data.root` for `data.root=x`, `+data.root=x` or `++data.root=x`."""
    return override.split("=", 1)[0].lstrip("+~")


def named_on_command_line(key: str, overrides: Sequence[str]) -> bool:
    """True when one of `overrides` (the command line's) sets `key`."""
    return any("=" in item and override_key(item) == key for item in overrides)


def swept_keys(overrides: Sequence[str]) -> set[str]:
    """The keys a multirun's overrides sweep over (`seed=0,1,2`, `lr=range(...)`, ...)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    return {override.key_or_group for override in parsed if override.is_sweep_override()}


def refers_to(cfg: DictConfig, key: str, names: set[str]) -> bool:
    """True when the raw (unresolved) value at `key` interpolates one of `names` (`${seed}`)."""
    node: Any = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    raw = str(node)
    return any("${" + name + "}" in raw or "${" + name + "." in raw for name in names)


def stop(problems: Sequence[Problem | str], code: int = USAGE_ERROR, log_files: bool = True) -> NoReturn:
    """Print each problem as one `error: ...` line on stderr, add them to the run's log file
    (when logging writes one, and `log_files`), and exit with `code`."""
    lines = [str(problem) for problem in problems]
    for line in lines:
        print(f"error: {line}", file=sys.stderr, flush=True)
    files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)] if log_files else []
    for handler in files:
        for line in lines:
            handler.emit(logging.LogRecord("rambo", logging.ERROR, __file__, 0, "error: %s", (line,), None))
    restore_job_files()  # refused before it started: the earlier run's .hydra/*.yaml and log, as they were
    if os.environ.get("SUBMITIT_EXECUTOR") == "slurm":
        # a SLURM job of submitit records an exception as the job's result, which its launcher reads
        # back (without sacct, a job that exits by SystemExit leaves no result and the launcher waits)
        raise InputError("; ".join(lines))
    raise SystemExit(code)


def stop_on_problems(problems: Sequence[Problem | str]) -> None:
    """[`stop`][rambo.harness.config_check.stop] when there are `problems`; else nothing."""
    if problems:
        stop(problems)


def load_checker(path: str) -> Callable[[DictConfig], list[Problem]]:
    """The function named by `path` (`package.module:function`)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class CheckConfig(Callback):
    """The Hydra callback that checks a run's config before Hydra creates anything (module
    docstring). `checker`: `package.module:function`, the app's `problems(cfg)`."""

    def __init__(self, checker: str):
        self.checker = checker

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        stop_on_problems(load_checker(self.checker)(config))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        overrides = task_overrides(config)
        swept = swept_keys(overrides)
        choices = OmegaConf.select(config, "hydra.runtime.choices") or {}
        if any(key in choices for key in swept):  # a group swept: each job composes another config
            return
        problems = [
            problem
            for problem in load_checker(self.checker)(config)
            if not any(problem.key == key or problem.key.startswith(key + ".") for key in swept)
            and not refers_to(config, problem.key, swept)
        ]
        stop_on_problems(problems)
