"""The zoo's one concession to ``gradoc.watch``: ``watching(model, optimizer)`` is
``gradoc.watch(model, optimizer, out=$ZOO_WATCH)`` when that variable names a run
directory, and nothing otherwise (a plain run, or ``gradoc run``)."""

import contextlib
import os


def watching(model, optimizer=None):
    out = os.environ.get("ZOO_WATCH")
    if not out:
        return contextlib.nullcontext()
    import gradoc

    return gradoc.watch(model, optimizer, out=out)


def seed(n=0):
    """Every generator the zoo's programs draw from (``gradoc run`` seeds them too)."""
    import random

    import numpy as np
    import torch

    random.seed(n)
    np.random.seed(n)
    torch.manual_seed(n)
