"""Run a pipeline command and time each DVC stage it runs: `python -m rambo.ablations.stage_times
[--record FILE] -- dvc repro [ARGS]` (`make reproduce` runs `dvc repro` this way).

The command's output passes through unchanged, line by line; each `Running stage '<name>':` line
DVC prints starts that stage's clock, which stops at the next stage's start or at the command's
end. At the end it prints one line per stage run (seconds, slowest first) and the total, and with
`--record` writes them as JSON (`{"command", "exit", "seconds", "stages": {name: seconds}}`)
to FILE, which nothing tracked is (a measurement, not a result). Exits with the command's code.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import time
from pathlib import Path

from rambo.harness.atomic import write_json

STAGE_LINE = re.compile(r"^Running stage '([^']+)'")


def timed(command: list[str], echo=print) -> tuple[int, float, dict[str, float]]:
    """Run `command`; its exit code, total seconds and the seconds of each stage it ran, in order."""
    stages: dict[str, float] = {}
    started = time.monotonic()
    current, since = None, started
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    for line in process.stdout:
        echo(line.rstrip("\n"))
        found = STAGE_LINE.match(line)
        if found:
            now = time.monotonic()
            if current is not None:
                stages[current] = round(stages.get(current, 0.0) + now - since, 1)
            current, since = found.group(1), now
    code = process.wait()
    end = time.monotonic()
    if current is not None:
        stages[current] = round(stages.get(current, 0.0) + end - since, 1)
    return code, round(end - started, 1), stages


def summary(seconds: float, stages: dict[str, float]) -> list[str]:
    """The lines printed at the end: each stage, slowest first, then the total."""
    width = max((len(name) for name in stages), default=0)
    lines = [f"  {name:<{width}}  {value:7.1f} s" for name, value in sorted(stages.items(), key=lambda kv: -kv[1])]
    return [f"stage times ({len(stages)} stages run):", *lines, f"  {'total':<{width}}  {seconds:7.1f} s"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--record", type=Path, help="write the times as JSON to this file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command, e.g. -- dvc repro")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the command to run after --, e.g. -- dvc repro")
    code, seconds, stages = timed(command, echo=lambda line: print(line, flush=True))
    if stages:
        print("\n".join(summary(seconds, stages)), flush=True)
    if args.record:
        write_json(args.record, {"command": command, "exit": code, "seconds": seconds, "stages": stages})
    return code


if __name__ == "__main__":
    raise SystemExit(main())
