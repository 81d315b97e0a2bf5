"""Run by test_harness_claim.py as a separate process; not a test module.

    python claim_worker.py FOLDER RUN START_AT HOLD_SECONDS RESULT_FILE

Waits until the wall clock reaches START_AT (so that several workers try at the same moment),
claims FOLDER, holds it HOLD_SECONDS, gives it back, and writes "claimed" or the error to RESULT_FILE.
HOLD_SECONDS < 0: claim and exit without giving it back (os._exit, as a killed process would).
"""

import os
import sys
import time
from pathlib import Path

from rambo.harness.claim import FolderClaim, FolderClaimedError

folder, run, start_at, hold, result = (
    sys.argv[1],
    sys.argv[2],
    float(sys.argv[3]),
    float(sys.argv[4]),
    Path(sys.argv[5]),
)
time.sleep(max(0.0, start_at - time.time()))
claim = FolderClaim(folder, run)
try:
    claim.acquire()
except FolderClaimedError as error:
    result.write_text(f"refused: {error}")
    sys.exit(3)
result.write_text("claimed")
if hold < 0:
    os._exit(0)
time.sleep(hold)
claim.release()
