from __future__ import annotations

import warnings

import pytest
import torch

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
