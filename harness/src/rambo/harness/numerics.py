"""The numerics mode: whether a CPU run's floating-point results depend on the CPU model.

`portable` (the default of every CPU run, however launched): every computation that touches a
result goes through code paths that do not dispatch by instruction set, so the same run gives the
same bytes on any x86-64 CPU (Intel or AMD, SSE4.2 to AVX-512 and AMX):

- torch's portable kernels (`ATEN_CPU_CAPABILITY=default`), read once, when torch first
  dispatches a CPU kernel;
- MKL's `COMPATIBLE` branch (`MKL_CBWR=COMPATIBLE`), the one branch Intel documents as giving
  the same results on Intel and compatible processors (`AVX2` and the other named branches fall
  back to the CPU's own code on processors of other vendors); MKL reads it at its first call;
- no oneDNN (`torch.backends.mkldnn.enabled = False`) and no NNPACK
  (`torch.backends.nnpack.set_flags(False)`): their convolutions choose kernels and blockings by
  ISA and cache sizes; torch's own convolutions run instead, on MKL's branch above;
- glibc's maths library without its FMA variants (`GLIBC_TUNABLES=glibc.cpu.hwcaps=-FMA,-FMA4`):
  libm picks FMA code for `exp`, `pow`, `sin` ... on CPUs that have it (`0.9 ** 348` differs
  in its last bit), and Python's floats, numpy and torch's float64 kernels call it. The dynamic
  loader reads the variable only when a process starts: a `python -m rambo.<app>...` command (or
  a `rambo-*` script) that finds it missing sets it and restarts itself at once, before any work,
  with the same arguments and process id;
- numpy's baseline loops (`NPY_DISABLE_CPU_FEATURES`: every optimisation numpy dispatches at run
  time, read once, when numpy loads);
- a fixed thread count (MKL's reproducibility holds for a fixed number of threads, and torch's
  parallel reductions split their work by it): `threads` of the run, 1 when it says 0;
- the exact k-NN search of the retrieval evaluation in torch, not faiss (which picks AVX2,
  AVX-512 or AVX-512 SPR code at run time).

`native`: each library's fastest code for this CPU (what torch, MKL, oneDNN and faiss choose).
Faster (about 2x on the mini profile's runs), but the results are then another draw: they move
from one CPU model to another.

The mode is chosen by the environment variable `RAMBO_NUMERICS` (`portable` or `native`).
[`set_environment`][rambo.harness.numerics.set_environment] writes the variables before the libraries load
(`import rambo.harness` calls it, and every app package imports `rambo.harness` before torch);
[`require`][rambo.harness.numerics.require], at the start of each run, sets what is set at run time (oneDNN, threads),
reads every setting back from the libraries themselves and stops, naming what is missing, when the mode was asked for
and not got; [`facts`][rambo.harness.numerics.facts] is what a run's provenance records: the mode and its settings,
never the CPU model or its instruction set.

On a GPU the mode does not apply to the GPU's arithmetic (CUDA results depend on the GPU model);
this module only concerns the CPU's.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import re
import sys
import tempfile

MODE_VARIABLE = "RAMBO_NUMERICS"
MODES = ("portable", "native")
DEFAULT_MODE = "portable"

# numpy 2.4's run-time dispatch targets on x86-64 (numpy.__cpu_dispatch__); its baseline
# (X86_V2: SSE4.2, POPCNT) is compiled in and is the same code on every CPU that runs numpy.
NUMPY_DISPATCH_TARGETS = ("X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR")

GLIBC_TUNABLE = "glibc.cpu.hwcaps=-FMA,-FMA4"
# What the dynamic loader of this process read (rambo.harness imports this module first).
_TUNABLES_AT_START = os.environ.get("GLIBC_TUNABLES", "")
_RESTARTED = "RAMBO_NUMERICS_RESTARTED"  # set across the one restart, so that there is never a second

PORTABLE_ENVIRONMENT = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "NPY_DISABLE_CPU_FEATURES": " ".join(NUMPY_DISPATCH_TARGETS),
}


class NumericsError(RuntimeError):
    """The numerics mode asked for is not what the libraries run."""


def mode(env: dict | None = None) -> str:
    """The mode asked for: `RAMBO_NUMERICS`, `portable` when unset. `NumericsError` naming the
    valid values for anything else."""
    env = os.environ if env is None else env
    value = env.get(MODE_VARIABLE, "").strip().lower() or DEFAULT_MODE
    if value not in MODES:
        raise NumericsError(
            f"{MODE_VARIABLE}={env.get(MODE_VARIABLE)!r} is not a numerics mode: use one of {', '.join(MODES)}"
        )
    return value


def set_environment(env: dict | None = None) -> str:
    """Write the portable mode's variables into `env` (`os.environ`) unless the mode is
    `native`; returns the mode. Values already there are replaced (an `MKL_CBWR=AVX2` of the
    shell would make the results follow the CPU). Call it before torch and numpy load; a library
    already loaded keeps what it read, which [`require`][rambo.harness.numerics.require] then reports."""
    in_process = env is None
    env = os.environ if env is None else env
    try:
        chosen = mode(env)
    except NumericsError:
        return "invalid"  # require() names the problem at the run's start, as one line
    if chosen == "portable":
        env.update(PORTABLE_ENVIRONMENT)
        tunables = env.get("GLIBC_TUNABLES", "")
        if GLIBC_TUNABLE not in tunables.split(":"):
            env["GLIBC_TUNABLES"] = f"{tunables}:{GLIBC_TUNABLE}" if tunables else GLIBC_TUNABLE
        if in_process and _uses_glibc() and GLIBC_TUNABLE not in _TUNABLES_AT_START.split(":") and _is_rambo_command():
            _restart()
    return chosen


def _uses_glibc() -> bool:
    return sys.platform == "linux" and platform.libc_ver()[0] == "glibc"


def _is_rambo_command() -> bool:
    """Whether this process is a project command that has done nothing yet: `python -m rambo.<...>`
    or a `rambo-*` console script (their first import is the app package, which imports this
    module first). Never an interactive session, a test runner or another program."""
    if os.environ.get(_RESTARTED) or sys.flags.interactive or not getattr(sys, "orig_argv", None):
        return False
    argv = sys.orig_argv
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1].startswith("rambo.")
    return os.path.basename(sys.argv[0]).startswith("rambo-")


def _restart() -> None:
    """Start this command again with the environment as it is now (`os.execve`: the same process
    id, arguments and standard streams), so that the dynamic loader reads `GLIBC_TUNABLES`."""
    os.environ[_RESTARTED] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], os.environ)


@contextlib.contextmanager
def _captured_stdout():
    """What C code writes to file descriptor 1 inside the block (MKL's verbose lines)."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 1)
        captured: list[str] = []
        try:
            yield captured
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read().decode(errors="replace"))


def mkl_state() -> dict:
    """MKL's own report of its code path, read back from `MKL_VERBOSE` of one small SGEMM:
    `{"branch": "COMPATIBLE" | "OFF" | ..., "threads": n}`, or `{"branch": None}` for a torch
    built without MKL."""
    import torch

    if not torch.backends.mkl.is_available():
        return {"branch": None, "threads": None}
    a = torch.ones(8, 8)
    with _captured_stdout() as captured:
        with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
            torch.mm(a, a)
    text = "".join(captured)
    branch = re.search(r"CNR:(\S+)", text)
    threads = re.search(r"NThr:(\d+)", text)
    return {"branch": branch.group(1) if branch else None, "threads": int(threads.group(1)) if threads else None}


def numpy_dispatch() -> list[str]:
    """numpy's run-time dispatch targets that are active in this process (none in portable mode)."""
    import numpy as np

    features = np._core._multiarray_umath.__cpu_features__
    return [name for name in np._core._multiarray_umath.__cpu_dispatch__ if features.get(name)]


def fixed_threads(threads: int | None) -> int:
    """The thread count a portable run computes with: `threads`, or 1 when it is 0 or `None`
    (torch's default counts the machine's cores, which would make the result follow the machine)."""
    return int(threads) if threads else 1


def require(threads: int | None = None, device=None) -> dict:
    """Start a run in the mode asked for, and prove it: in `portable` mode turn oneDNN off, fix
    the thread count ([`fixed_threads`][rambo.harness.numerics.fixed_threads]), then read back torch's kernel
    capability, MKL's branch and thread count, oneDNN's flag and numpy's dispatch; `NumericsError` naming each setting
    that is not in force (and how to get it). `native`: only `threads` (when given) is set.
    Returns [`facts`][rambo.harness.numerics.facts]. On a CUDA `device` only the threads are set: the GPU's arithmetic
    follows the GPU model whatever the CPU does."""
    import torch

    chosen = mode()
    if chosen == "native" or (device is not None and torch.device(device).type == "cuda"):
        if threads:
            torch.set_num_threads(int(threads))
        return facts()
    if sys.platform != "linux" or os.uname().machine not in ("x86_64", "AMD64"):
        raise NumericsError(
            f"the portable numerics mode is defined for x86-64 Linux, not {sys.platform} {os.uname().machine}: "
            f"set {MODE_VARIABLE}=native (results are then this machine's draw)"
        )
    torch.backends.mkldnn.enabled = False
    torch.backends.nnpack.set_flags(False)
    torch.set_num_threads(fixed_threads(threads))
    missing = []
    if _uses_glibc() and GLIBC_TUNABLE not in _TUNABLES_AT_START.split(":"):
        missing.append(
            f"glibc's maths library runs its FMA variants (GLIBC_TUNABLES={GLIBC_TUNABLE} must be set when the "
            "process starts: a `python -m rambo...` command sets it and restarts itself; export it for any other)"
        )
    capability = torch.backends.cpu.get_cpu_capability()
    if capability != "DEFAULT":
        missing.append(
            f"torch runs its {capability} kernels, not the portable ones (ATEN_CPU_CAPABILITY=default must be set "
            "before torch is imported: import rambo.harness first, or export it)"
        )
    mkl = mkl_state()
    if mkl["branch"] is None:
        missing.append("this torch has no MKL whose COMPATIBLE branch the portable mode relies on")
    elif mkl["branch"] != "COMPATIBLE":
        missing.append(
            f"MKL runs branch {mkl['branch']}, not COMPATIBLE (MKL_CBWR=COMPATIBLE must be set before MKL's first call)"
        )
    if mkl["threads"] is not None and mkl["threads"] != fixed_threads(threads):
        missing.append(f"MKL computes on {mkl['threads']} threads, not {fixed_threads(threads)}")
    if torch.get_num_threads() != fixed_threads(threads):
        missing.append(f"torch computes on {torch.get_num_threads()} threads, not {fixed_threads(threads)}")
    if torch.backends.mkldnn.enabled:
        missing.append("oneDNN is enabled")
    if torch._C._get_nnpack_enabled():
        missing.append("NNPACK is enabled")
    active = numpy_dispatch()
    if active:
        missing.append(
            f"numpy dispatches to {', '.join(active)} (NPY_DISABLE_CPU_FEATURES must be set before numpy is imported)"
        )
    if missing:
        raise NumericsError(
            f"{MODE_VARIABLE}=portable was asked for and is not in force: {'; '.join(missing)}. "
            f"Run the command in a fresh process, or set {MODE_VARIABLE}=native for this CPU's own kernels"
        )
    return facts()


def facts() -> dict:
    """The numerics a run's provenance records: the mode, and in portable mode the settings that
    make it so. Never the CPU model or its instruction set (those would make the same result look
    different on another machine)."""
    import torch

    chosen = mode()
    if chosen == "native" or not _portable_in_force():
        return {"mode": "native", "threads": torch.get_num_threads()}
    return {
        "mode": "portable",
        "threads": torch.get_num_threads(),
        "torch_kernels": torch.backends.cpu.get_cpu_capability().lower(),
        "mkl_branch": os.environ.get("MKL_CBWR"),
        "onednn": bool(torch.backends.mkldnn.enabled),
        "nnpack": bool(torch._C._get_nnpack_enabled()),
        "libm": "without FMA variants" if GLIBC_TUNABLE in _TUNABLES_AT_START.split(":") else "its own choice",
        "numpy_dispatch": "baseline",
        "knn_search": "torch",
    }


def _portable_in_force() -> bool:
    """Whether the portable settings that [`require`][rambo.harness.numerics.require] sets at run time are in force (a
    GPU run in the portable mode leaves oneDNN and the CPU threads as they are: its CPU numerics are then
    this CPU's own)."""
    import torch

    return torch.backends.cpu.get_cpu_capability() == "DEFAULT" and not torch.backends.mkldnn.enabled


def label(numerics: dict | None) -> str:
    """One line naming a run's numerics, e.g. `portable numerics, 1 thread`: what the tables list."""
    if not numerics:
        return "numerics not recorded"
    threads = numerics.get("threads")
    thread_text = f"{threads} thread{'s' if threads != 1 else ''}" if threads is not None else "threads unknown"
    if numerics.get("mode") == "portable":
        return f"portable numerics (the same on every x86-64 CPU), {thread_text}"
    if numerics.get("torch_kernels") == "default":  # recorded before the mode existed: torch's portable kernels only
        return f"native numerics with torch's portable kernels (MKL and oneDNN follow the CPU), {thread_text}"
    return f"native numerics (this CPU's own kernels: another CPU gives another draw), {thread_text}"


def start_command(threads: int | None = None) -> dict:
    """[`require`][rambo.harness.numerics.require] for a command's `__main__` (a pipeline stage that is not a training
    run: data, exports, figures, tables), or its problem as one `error:` line and exit code 2."""
    try:
        return require(threads)
    except NumericsError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
