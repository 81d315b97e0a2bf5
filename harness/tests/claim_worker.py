"""Run by test_harness_claim.py as a separate process; not a test module.

    python claim_worker.py FOLDER RUN START_AT HOLD RESULT_FILE

Waits until the wall clock reaches START_AT (so that several workers try at the same moment),
claims FOLDER, holds it, gives it back, and writes "claimed" or the error to RESULT_FILE.
HOLD: seconds to hold it; < 0: claim and exit without giving it back (os._exit, as a killed
process would); a path: hold it until that file exists.

With CLAIM_WORKER_GATES=DIR in the environment, the worker stops at each point of a takeover
(rambo.harness.claim._pause): it writes DIR/RUN.POINT and waits until DIR/RUN.POINT.go exists, so
that a test replays a given order of events between processes.
"""

import os
import sys
import time
from pathlib import Path

from rambo.harness import claim as claim_module
from rambo.harness.claim import FolderClaim, FolderClaimedError

folder, run, start_at, hold, result = (
    sys.argv[1],
    sys.argv[2],
    float(sys.argv[3]),
    sys.argv[4],
    Path(sys.argv[5]),
)


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + 120  # a test that never sends the signal fails, not hangs
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{run}: {path} never appeared")
        time.sleep(0.01)


if os.environ.get("CLAIM_WORKER_GATES"):
    gates = Path(os.environ["CLAIM_WORKER_GATES"])

    def gate(point: str) -> None:
        (gates / f"{run}.{point}").write_text("")
        wait_for(gates / f"{run}.{point}.go")

    claim_module._pause = gate

time.sleep(max(0.0, start_at - time.time()))
claim = FolderClaim(folder, run)
try:
    claim.acquire()
except FolderClaimedError as error:
    result.write_text(f"refused: {error}")
    sys.exit(3)
result.write_text("claimed")
if hold.startswith("/"):
    wait_for(Path(hold))
elif float(hold) < 0:
    os._exit(0)
else:
    time.sleep(float(hold))
claim.release()
