"""`python -m rambo.harness.check_numerics`: the numerics a run started now would compute with, as
JSON (the mode and its settings, read back from the libraries: [`numerics`][rambo.harness.numerics]); one `error:`
line and exit code 2 when the mode asked for is not in force."""

from __future__ import annotations

import json

from .numerics import start_command


def main() -> int:
    print(json.dumps(start_command(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
