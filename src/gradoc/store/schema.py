"""The run log's tables (schema version 2).

Readable with the ``sqlite3`` tool::

    sqlite3 runs/x/run.db "select step, loss, grad_norm from steps order by step"

Conventions:
- ``step`` counts optimizer steps from 0.
- NaN cannot be stored as a SQLite REAL (it becomes NULL), so statistics that were NaN
  are stored as the text ``'NaN'``; NULL means "not collected at this step". ±Inf is
  stored as a REAL (``Inf`` / ``-Inf`` in the sqlite3 tool).
- ``layers`` lists parameters (``kind='param'``) and module outputs (``kind='module'``);
  the statistics tables refer to it by ``layer_id``.
- Per-layer rows of old steps are thinned as the run grows (see ``RunWriter``); the
  ``steps`` table keeps every step.
"""

from __future__ import annotations

SCHEMA_VERSION = 2
"""2: ``steps.samples``. Version 1 logs are read too (no samples)."""
READABLE = (1, 2)

DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT                     -- JSON
);
CREATE TABLE IF NOT EXISTS layers (
    id     INTEGER PRIMARY KEY,
    kind   TEXT NOT NULL,          -- 'param' | 'module'
    name   TEXT NOT NULL,          -- parameter or module fully qualified name
    module TEXT NOT NULL,          -- owning module's fully qualified name ('' = the model)
    type   TEXT,                   -- module class name
    shape  TEXT,                   -- JSON list, parameters only
    numel  INTEGER,
    grp    INTEGER,                -- optimizer param group, parameters only
    optimizer INTEGER              -- which watched optimizer (0 = the first)
);
CREATE TABLE IF NOT EXISTS steps (
    step        INTEGER PRIMARY KEY,
    time        REAL NOT NULL,     -- seconds since the run started
    loss        REAL,              -- mean of the losses passed to backward() in this step
    n_backward  INTEGER NOT NULL,  -- backward() calls in this step (gradient accumulation)
    grad_norm   REAL,              -- global L2 norm over all watched gradients
    grad_nonfinite INTEGER,        -- non-finite gradient values, all parameters
    lr          TEXT,              -- JSON list: learning rate of each param group
    samples     INTEGER            -- samples the watched model saw (batch sizes summed)
);
CREATE TABLE IF NOT EXISTS param_stats (
    step           INTEGER NOT NULL,
    layer_id       INTEGER NOT NULL REFERENCES layers(id),
    grad_norm      REAL,
    grad_maxabs    REAL,
    grad_nonfinite INTEGER,
    weight_norm    REAL,           -- before the step's update
    update_norm    REAL,           -- of (weights after - weights before)
    PRIMARY KEY (step, layer_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS act_stats (
    step      INTEGER NOT NULL,
    layer_id  INTEGER NOT NULL REFERENCES layers(id),
    calls     INTEGER NOT NULL,    -- forward calls combined (accumulation, shared modules)
    numel     INTEGER NOT NULL,
    mean      REAL,
    std       REAL,
    zero_frac REAL,                -- fraction of exact zeros
    sat_frac  REAL,                -- fraction saturated (sigmoid/tanh family only)
    nonfinite INTEGER,
    positions INTEGER,             -- positions each unit was seen at
    unit_active BLOB,              -- float32 array: per unit, fraction of positions > 0
    PRIMARY KEY (step, layer_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    id       INTEGER PRIMARY KEY,
    step     INTEGER,
    time     REAL NOT NULL,
    kind     TEXT NOT NULL,        -- e.g. 'nonfinite_loss', 'nonfinite_grad', 'crash'
    message  TEXT NOT NULL,
    data     TEXT                  -- JSON
);
CREATE INDEX IF NOT EXISTS events_step ON events(step);
"""

PER_LAYER_TABLES = ("param_stats", "act_stats")
