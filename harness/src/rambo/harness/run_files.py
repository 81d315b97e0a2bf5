"""Read the files a command takes from earlier stages, and say in one line what is wrong with a bad one.

The tables and figures read what runs and other stages wrote: a run's `metrics.json` and
`curve.json`, a figure's numbers, a params file, a benchmark, a score dump, a checkpoint. Each
reader goes through [`read_json`][rambo.harness.run_files.read_json], [`read_yaml`][rambo.harness.run_files.read_yaml],
[`read_npz`][rambo.harness.run_files.read_npz] or [`read_torch`][rambo.harness.run_files.read_torch], giving `fix`: what
to do about that file (rerun the stage that writes it). A file that is missing, cannot be read, is not valid JSON (a
copy cut short, a writer killed mid-write), YAML, `.npz` or torch data, or lacks a value of the kind its reader needs
(the `schema`) is a [`RunFileError`][rambo.harness.run_files.RunFileError], `<file>: <what is wrong>; <fix>`, and so is
what a reader finds wrong in the values themselves ([`bad_file`][rambo.harness.run_files.bad_file]). A command's
`__main__` runs under [`one_line_errors`][rambo.harness.run_files.one_line_errors], which turns it into one `error:`
line on stderr and exit code 2.

A schema says what a reader needs of the data:

* `float` a number (an integer too, never `true`/`false`), `int` an integer, `str`,
  `bool`, `dict` (any object), `list` (any list), `None` (`null`), `object` (anything);
* a tuple: any one of its schemas, e.g. `(float, None)`;
* a dict `{key: schema}`: an object holding each key (`"key?"`: when present), the key `"*"`
  for every other key;
* a list `[schema]` or [`ListOf`][rambo.harness.run_files.ListOf]: a list whose every item fits `schema`.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config_check import InputError, stop

_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_SHOWN_KEYS = 12  # the keys a message lists beside a missing one


class RunFileError(InputError, ValueError):
    """A file a command reads is missing, unreadable, or not what its writer writes; the message
    names the file, what is wrong, and what to do."""


class MissingRunFileError(RunFileError, FileNotFoundError):
    """A file a command reads is not there."""


@dataclass(frozen=True)
class ListOf:
    """A list of at least `least` items, each fitting `item`."""

    item: Any
    least: int = 0


def bad_file(path: str | os.PathLike, problem: str, fix: str) -> RunFileError:
    """The error of file `path`: `<path>: <problem>; <fix>`."""
    return RunFileError(f"{path}: {problem}; {fix}")


@contextlib.contextmanager
def one_line_errors():
    """A command's `main` under this ends a [`RunFileError`][rambo.harness.run_files.RunFileError] as one `error:` line
    on stderr and exit code 2 ([`rambo.harness.config_check.stop`][rambo.harness.config_check.stop])."""
    try:
        yield
    except RunFileError as error:
        stop([error.line()])


def _present(path: Path, fix: str) -> None:
    """Raise the error of `path` when it is not there, not a file, or empty."""
    if not path.exists():
        raise MissingRunFileError(f"{path}: not found; {fix}")
    if not path.is_file():
        raise bad_file(path, "not a file", fix)
    if path.stat().st_size == 0:
        raise bad_file(path, "empty", fix)


def _read_bytes(path: Path, fix: str) -> bytes:
    _present(path, fix)
    try:
        return path.read_bytes()
    except OSError as error:
        raise bad_file(path, f"cannot be read ({error.strerror or error})", fix) from None


def _text(path: Path, fix: str) -> str:
    data = _read_bytes(path, fix)
    if not data.strip():
        raise bad_file(path, "holds only whitespace", fix)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise bad_file(path, f"not UTF-8 text (byte {error.start})", fix) from None


def _json_problem(text: str, size: int, error: json.JSONDecodeError) -> str:
    rest = text[error.pos :].rstrip()
    cut = (
        error.pos >= len(text.rstrip())
        or error.msg.startswith("Unterminated string")
        or (bool(rest) and any(literal.startswith(rest) for literal in _LITERALS))
    )
    if cut:
        return f"not valid JSON (truncated at byte {size})"
    return f"not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"


def read_json(path: str | os.PathLike, fix: str, schema: Any = object) -> Any:
    """The JSON in `path`, checked against `schema` (module docstring); a
    [`RunFileError`][rambo.harness.run_files.RunFileError] naming the file, what is wrong and `fix` when it is missing,
    unreadable, not valid JSON or does not fit the schema."""
    path = Path(path)
    text = _text(path, fix)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise bad_file(path, _json_problem(text, len(text.encode()), error), fix) from None
    check(data, schema, path, fix)
    return data


def read_yaml(path: str | os.PathLike, fix: str, schema: Any = object) -> Any:
    """The YAML in `path` (`yaml.safe_load`), checked as [`read_json`][rambo.harness.run_files.read_json] checks
    JSON."""
    import yaml

    path = Path(path)
    text = _text(path, fix)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise bad_file(path, f"not valid YAML ({where}{problem})", fix) from None
    if data is None and schema is not object and schema is not None:
        raise bad_file(path, "holds no YAML value (only comments or blank lines)", fix)
    check(data, schema, path, fix)
    return data


def read_npz(path: str | os.PathLike, fix: str, arrays: tuple[str, ...]) -> dict:
    """`{name: array}` of the arrays `arrays` in the `.npz` archive `path` (`numpy.savez`;
    no pickled objects); a [`RunFileError`][rambo.harness.run_files.RunFileError] when it is missing, not such an
    archive, damaged or lacks one of them."""
    import numpy as np

    path = Path(path)
    _present(path, fix)
    try:
        archive = np.load(path, allow_pickle=False)
    except Exception as error:  # noqa: BLE001 (zipfile, numpy and EOF errors of a damaged archive)
        raise bad_file(path, f"not a readable .npz archive ({_first_line(error)})", fix) from None
    if not hasattr(archive, "files"):  # a .npy file: one array
        raise bad_file(path, "holds one array, not an .npz archive of named arrays", fix)
    with archive:
        missing = sorted(set(arrays) - set(archive.files))
        if missing:
            raise bad_file(
                path, f"lacks the array(s) {missing} (it has {sorted(archive.files)}); it needs {list(arrays)}", fix
            )
        try:
            return {name: archive[name] for name in arrays}
        except Exception as error:  # noqa: BLE001 (zlib, CRC and EOF errors of a damaged member)
            raise bad_file(path, f"not a readable .npz archive ({_first_line(error)})", fix) from None


def read_torch(path: str | os.PathLike, fix: str, schema: Any = object) -> Any:
    """What `torch.save` wrote to `path` (`weights_only`: tensors and plain containers),
    checked against `schema`; a [`RunFileError`][rambo.harness.run_files.RunFileError] when it is missing, damaged, not
    torch data or does not fit."""
    import torch

    path = Path(path)
    _present(path, fix)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 (zip, pickle and EOF errors of a damaged file)
        raise bad_file(path, f"not a readable torch file ({_first_line(error)})", fix) from None
    check(data, schema, path, fix)
    return data


def _first_line(error: BaseException) -> str:
    """`<type>: <first sentence of the message>`: libraries' messages run to paragraphs."""
    text = str(error).strip()
    if not text:
        return type(error).__name__
    return f"{type(error).__name__}: {text.splitlines()[0].split('. ')[0].rstrip('.')}"


def check(data: Any, schema: Any, path: str | os.PathLike, fix: str, where: str = "") -> None:
    """Raise the [`RunFileError`][rambo.harness.run_files.RunFileError] of file `path` where `data` (read from it, at
    `where`: `""` the whole file) does not fit `schema` (module docstring)."""
    problem = _problem(data, schema, where)
    if problem is not None:
        raise bad_file(path, problem, fix)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}" + ("..." if len(value) > 40 else "")
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)" if value else "an empty list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def _expected(schema: Any) -> str:
    if isinstance(schema, tuple):
        return " or ".join(_expected(option) for option in schema)
    if isinstance(schema, ListOf):
        return f"a list of at least {schema.least} item(s)" if schema.least else "a list"
    return {
        float: "a number",
        int: "an integer",
        str: "a string",
        bool: "true or false",
        None: "null",
        dict: "an object",
        list: "a list",
    }.get(schema if not isinstance(schema, (dict, list)) else type(schema), "a value")


def _fits_type(value: Any, schema: Any) -> bool:
    if schema is object:
        return True
    if schema is None:
        return value is None
    if schema is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if schema is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(schema, dict):
        return isinstance(value, dict)
    if isinstance(schema, (list, ListOf)):
        return isinstance(value, list)
    return isinstance(value, schema)


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _wrong(value: Any, schema: Any, where: str) -> str:
    if not where:
        return f"it holds {_kind(value)}, not {_expected(schema)}"
    return f"{where} is {_kind(value)}, not {_expected(schema)}"


def _problem(value: Any, schema: Any, where: str) -> str | None:
    """What is wrong with `value` at `where` for `schema`; `None` when it fits."""
    if isinstance(schema, tuple):
        fitting = [option for option in schema if _fits_type(value, option)]
        if not fitting:
            return _wrong(value, schema, where)
        problems = [_problem(value, option, where) for option in fitting]
        return None if None in problems else problems[0]  # the right kind, wrong inside: say what
    if not _fits_type(value, schema):
        return _wrong(value, schema, where)
    if isinstance(schema, dict):
        for key, item in schema.items():
            name, optional = (key[:-1], True) if key.endswith("?") else (key, False)
            if key == "*" or (optional and name not in value):
                continue
            if name not in value:
                keys = sorted(map(str, value))
                shown = ", ".join(keys[:_SHOWN_KEYS]) + (", ..." if len(keys) > _SHOWN_KEYS else "")
                owner = where or "the file"
                return f"{_at(where, name)} is missing ({f'{owner} has {shown}' if keys else f'{owner} has no keys'})"
            found = _problem(value[name], item, _at(where, name))
            if found is not None:
                return found
        if "*" in schema:
            named = {key.rstrip("?") for key in schema}
            for key, item in value.items():
                found = None if key in named else _problem(item, schema["*"], _at(where, str(key)))
                if found is not None:
                    return found
    if isinstance(schema, (list, ListOf)):
        item, least = (schema[0], 0) if isinstance(schema, list) else (schema.item, schema.least)
        if len(value) < least:
            return _wrong(value, schema, where)
        for index, element in enumerate(value):
            found = _problem(element, item, f"{where}[{index}]")
            if found is not None:
                return found
    return None


__all__ = [
    "ListOf",
    "MissingRunFileError",
    "RunFileError",
    "bad_file",
    "check",
    "one_line_errors",
    "read_json",
    "read_npz",
    "read_torch",
    "read_yaml",
]
