"""The numerics mode (rambo.harness.numerics): asked for by RAMBO_NUMERICS, set before the libraries
load, read back from them at a run's start, refused in one line when it is not in force. Each case
runs a real Python process: what the libraries read when they load cannot be undone in this one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rambo.harness import numerics

# The variables a test process starts from: none of the mode's own, none that another CPU would change.
CLEAN = {
    k: v
    for k, v in os.environ.items()
    if k
    not in (
        numerics.MODE_VARIABLE,
        *numerics.PORTABLE_ENVIRONMENT,
        "GLIBC_TUNABLES",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    )
}

READ_BACK = """
import json, sys
import rambo.harness
from rambo.harness import numerics
print(json.dumps(numerics.require(int(sys.argv[1]) if len(sys.argv) > 1 else None)))
"""


def python(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], env={**CLEAN, **env}, capture_output=True, text=True, timeout=120
    )


def command(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``python -m rambo.harness.check_numerics``: a project command, as a pipeline stage starts."""
    return subprocess.run(
        [sys.executable, "-m", "rambo.harness.check_numerics", *args],
        env={**CLEAN, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_portable_is_the_default_and_every_setting_is_read_back_from_the_libraries():
    done = command()  # it restarts itself once, so that glibc's loader reads GLIBC_TUNABLES
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "mode": "portable",
        "threads": 1,  # no thread count given: 1, whatever the machine's cores
        "torch_kernels": "default",
        "mkl_branch": "COMPATIBLE",
        "onednn": False,
        "nnpack": False,
        "libm": "without FMA variants",
        "numpy_dispatch": "baseline",
        "knn_search": "torch",
    }
    two = python(READ_BACK, "2", GLIBC_TUNABLES=numerics.GLIBC_TUNABLE)  # set at the start by its parent
    assert json.loads(two.stdout)["threads"] == 2  # a run's own count is kept, and fixed


def test_the_glibc_tunable_is_set_for_every_process_and_a_users_own_tunables_are_kept():
    code = "import os; import rambo.harness; print(os.environ['GLIBC_TUNABLES'])"
    assert python(code).stdout.split()[-1] == numerics.GLIBC_TUNABLE  # not a command: set, no restart
    done = command(GLIBC_TUNABLES="glibc.malloc.check=0")  # a user's own tunables are kept beside it
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["libm"] == "without FMA variants"
    assert float(python("print(0.9 ** 348)", GLIBC_TUNABLES=numerics.GLIBC_TUNABLE).stdout) == float.fromhex(
        "0x1.12ee395586fb6p-53"
    )  # libm's portable pow: the same last bit on every CPU


def test_mkl_reports_its_compatible_branch_and_numpy_no_dispatch_in_the_portable_mode():
    code = "import rambo.harness, json; from rambo.harness import numerics; print(json.dumps([numerics.mkl_state(), numerics.numpy_dispatch()]))"
    portable = json.loads(python(code).stdout)
    native = json.loads(python(code, RAMBO_NUMERICS="native").stdout)
    assert portable == [{"branch": "COMPATIBLE", "threads": portable[0]["threads"]}, []]
    assert native[0]["branch"] == "OFF"  # MKL's own choice for this CPU


def test_native_mode_leaves_the_libraries_as_they_are():
    done = python(READ_BACK, RAMBO_NUMERICS="native")
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) == {"mode", "threads"} and json.loads(done.stdout)["mode"] == "native"
    env = python(
        "import rambo.harness, os; print(os.environ.get('ATEN_CPU_CAPABILITY'), os.environ.get('MKL_CBWR'))",
        RAMBO_NUMERICS="native",
    )
    assert env.stdout.split() == ["None", "None"]


def test_a_portable_run_after_torch_loaded_on_its_own_kernels_stops_naming_what_is_missing():
    # torch (and numpy with it) imported before rambo.harness could set the environment: too late for
    # torch's kernels and numpy's dispatch; MKL has not been called yet and still takes its branch.
    code = "import torch; torch.ones(2) + 1\n" + READ_BACK
    done = python(code)
    native_kernels = python("import torch; print(torch.backends.cpu.get_cpu_capability())").stdout.strip()
    if native_kernels == "DEFAULT":
        pytest.skip("this CPU's own torch kernels are the portable ones: nothing to miss")
    assert done.returncode != 0
    message = done.stderr.strip().splitlines()[-1]
    assert "RAMBO_NUMERICS=portable was asked for and is not in force" in message
    assert f"torch runs its {native_kernels} kernels" in message and "ATEN_CPU_CAPABILITY=default" in message
    assert "MKL runs branch" not in message


def test_a_mode_that_does_not_exist_is_one_line_and_exit_2():
    code = "import rambo.harness\nfrom rambo.harness.numerics import start_command\nstart_command()"
    done = python(code, RAMBO_NUMERICS="fast")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: RAMBO_NUMERICS='fast' is not a numerics mode: use one of portable, native"


def test_a_shell_setting_that_would_follow_the_cpu_is_replaced():
    code = "import rambo.harness, os; print(os.environ['MKL_CBWR'], os.environ['ATEN_CPU_CAPABILITY'])"
    assert python(code, MKL_CBWR="AVX2", ATEN_CPU_CAPABILITY="avx512").stdout.split() == ["COMPATIBLE", "default"]


def test_labels_name_the_mode_never_the_cpu():
    assert (
        numerics.label({"mode": "portable", "threads": 1})
        == "portable numerics (the same on every x86-64 CPU), 1 thread"
    )
    assert numerics.label({"mode": "native", "threads": 2}).startswith("native numerics (this CPU's own kernels")
    assert numerics.label(None) == "numerics not recorded"
    assert numerics.fixed_threads(0) == numerics.fixed_threads(None) == 1 and numerics.fixed_threads(3) == 3
