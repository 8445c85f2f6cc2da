from __future__ import annotations

import os
import warnings

import pytest
import torch

# One torch thread per test process, in the tests and the programs they start: the suite
# runs one process per core (-n auto), and torch's default of a thread per core in each of
# them oversubscribes the cores (the demo, 14 s alone, ran past its 300 s limit in CI).
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
