"""Test-wide setup, loaded by pytest before any test module.

The tests compute in the numerics mode named by ``RAMBO_NUMERICS``, ``native`` when it is unset:
a test asserts what the code guarantees, not one draw of floating point, and the native kernels
are the fast ones. ``make test-kernels`` runs the outcome tests again with
``RAMBO_NUMERICS=portable``; importing ``rambo.harness`` here sets that mode's environment before
any test imports torch or numpy (:mod:`rambo.harness.numerics`). Tests that run a command in a
subprocess pass the mode they need in its environment (tests/test_portable_numerics.py)."""

import os

os.environ.setdefault("RAMBO_NUMERICS", "native")

import rambo.harness  # noqa: E402,F401  (sets the mode's environment before torch and numpy load)
