import sys
from pathlib import Path

import pytest
import torch

# Tests import the brute-force definitions from core_brute_force.py beside this file.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    torch.set_num_threads(1)
