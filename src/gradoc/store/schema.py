"""The run log's tables (schema version 9).

Readable with the ``sqlite3`` tool::

    sqlite3 runs/x/run.db "select step, loss, grad_norm from steps order by step"

Conventions:
- ``step`` counts optimizer steps from 0.
- NaN cannot be stored as a SQLite REAL (it becomes NULL), so statistics that were NaN
  are stored as the text ``'NaN'``; NULL means "not collected at this step". ±Inf is
  stored as a REAL (``Inf`` / ``-Inf`` in the sqlite3 tool).
- ``layers`` lists parameters (``kind='param'``) and module outputs (``kind='module'``);
  the statistics tables refer to it by ``layer_id``.
- Per-parameter statistics are one ``param_arrays`` row per step (and optimizer): packed
  little-endian arrays, so that a step of a 5,000-tensor model is one insert, not 5,000
  (12 bytes per tensor on a gradient-norm step, 36 on a weight step). Reading them::

      import sqlite3, numpy as np
      db = sqlite3.connect("runs/quickstart/run.db")
      for step, ids, norms in db.execute("select step, layer_ids, grad_norm from param_arrays"):
          ids, norms = np.frombuffer(ids, "<i4"), np.frombuffer(norms or b"", "<f8")

  (``gradoc.open_run(...).param(name, stat)`` returns one parameter's series.)
- Per-layer rows of old steps are thinned as the run grows (see ``RunWriter``); the
  ``steps`` table keeps every step.
"""

from __future__ import annotations

from .._util.text import StrEnum

SCHEMA_VERSION = 9


class EventKind(StrEnum):
    """The ``events`` table's kinds (a ``str``: ``EventKind.CRASH == "crash"``)."""

    NONFINITE_LOSS = "nonfinite_loss"
    NONFINITE_GRAD = "nonfinite_grad"
    NONFINITE_ORIGIN = "nonfinite_origin"
    LENGTH_ANOMALY = "length_anomaly"
    PADDING_AUDIT = "padding_audit"
    SKIPPED_UPDATE = "skipped_update"
    CLIPPED = "clipped"
    ROLLBACK = "rollback"
    GUARD_GAVE_UP = "guard_gave_up"
    SCALER_SKIPPED = "scaler_skipped"
    LR_SCALED = "lr_scaled"
    STEPS_COUNTED = "steps_counted"
    LOCATE_FAILED = "locate_failed"
    INTERNAL_ERROR = "internal_error"
    INTERRUPTED = "interrupted"
    TERMINATED = "terminated"
    RESUMED = "resumed"
    CRASH = "crash"


class Source(StrEnum):
    """Where a measure in the ``metrics`` table was read (``collect.attach.logged``)."""

    TENSORBOARD = "tensorboard"
    LIGHTNING = "lightning"
    HF = "hf"
    WANDB = "wandb"
    MLFLOW = "mlflow"
    SB3 = "sb3"
    GYM = "gym"


RAW_SOURCES = frozenset({Source.GYM})
"""Sources whose every value is one draw (an episode's return), not an average a logger made."""


"""9: ``metrics`` (the program's own measures, as it logged them: ``collect.attach.logged``);
8: ``output_logits`` (the output layer's log Z, largest logit and spread, read from the
loss's graph);
7: ``attention`` (each attention call's logit gap and entropy, read from the loss's graph);
6: ``policy_entropy`` (a categorical policy's entropy, read from its loss's graph);
5: ``objective_losses`` (a run with several optimizers: each objective's loss);
4: ``steps.clip_norm`` and ``steps.clip_max`` (the program's own gradient clipping), and
``steps.loss`` with gradient accumulation and loss scaling undone;
3: per-parameter statistics as one row of packed arrays per step (``param_arrays``);
2: ``steps.samples``. Versions 1 to 3 (1 and 2: one ``param_stats`` row per parameter and
step) are read too."""
READABLE = (1, 2, 3, 4, 5, 6, 7, 8, 9)

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
    loss        REAL,              -- the step's loss: the losses passed to backward(), loss
                                   -- scaling undone; the sum of micro-batch losses each
                                   -- divided by their count (accumulation), else their mean
    n_backward  INTEGER NOT NULL,  -- backward() calls in this step (gradient accumulation)
    grad_norm   REAL,              -- global L2 norm over all watched gradients, before the
                                   -- program clipped them
    grad_nonfinite INTEGER,        -- non-finite gradient values, all parameters
    lr          TEXT,              -- JSON list: learning rate of each param group
    samples     INTEGER,           -- samples the watched model saw (batch sizes summed)
    clip_norm   REAL,              -- the norm the program's clip_grad_norm_ measured (max
                                   -- |grad| for clip_grad_value_); NULL: no clipping
    clip_max    REAL               -- its threshold (meta 'clipping' says which function)
);
CREATE TABLE IF NOT EXISTS objective_losses (
    step       INTEGER NOT NULL,   -- the steps table's step in progress when it trained
    objective  INTEGER NOT NULL,   -- meta 'objectives' id (0, the first optimizer's, is
                                   -- steps.loss and not repeated here)
    loss       REAL,               -- its loss, as steps.loss is read
    PRIMARY KEY (step, objective)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS policy_entropy (
    step       INTEGER NOT NULL,   -- the steps table's step in progress when it trained
    objective  INTEGER NOT NULL,   -- meta 'objectives' id (0: the first optimizer's)
    entropy    REAL,               -- a categorical policy's mean entropy, a share of its
                                   -- maximum ln(k) (meta 'loss_read' policy.actions: k)
    PRIMARY KEY (step, objective)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS attention (
    step       INTEGER NOT NULL,   -- the steps table's step in progress at its backward()
    site       INTEGER NOT NULL,   -- the attention call, in forward order: meta
                                   -- 'attention' layers[site] names its layer
    logit_gap  REAL,               -- the largest gap between a query row's largest and
                                   -- smallest logit (nats), over the rows and heads read
    entropy    REAL,               -- the rows' mean entropy as a share of ln(keys), the mean
                                   -- over its heads (1: uniform, 0: one key)
    heads      BLOB,               -- float32 pairs per head: (logit gap, entropy share)
    PRIMARY KEY (step, site)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS output_logits (
    step       INTEGER NOT NULL,   -- the steps table's step in progress at its backward()
    site       INTEGER NOT NULL,   -- the loss's log-softmax, nearest the loss first: meta
                                   -- 'output_logits' layers[site] names its output layer
    log_z      REAL,               -- the rows' mean log-sum-exp of the logits (nats); NaN:
                                   -- the logits could not be recomputed from the graph
    top        REAL,               -- the rows' mean largest logit
    spread     REAL,               -- the rows' mean largest less smallest logit
    PRIMARY KEY (step, site)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS metrics (
    name       TEXT NOT NULL,      -- as the program named it ('val_loss', 'rollout/ep_rew_mean')
    source     TEXT NOT NULL,      -- where it was read: 'tensorboard', 'lightning', 'hf',
                                   -- 'wandb', 'mlflow', 'sb3', 'gym' (collect.attach.logged)
    step       INTEGER NOT NULL,   -- the steps table's step in progress when it was logged
    own_step   INTEGER,            -- the step the program gave it (global_step), if any
    value      REAL                -- 'NaN' for NaN, as in the other tables
);
CREATE INDEX IF NOT EXISTS metrics_name ON metrics(name, step);
CREATE TABLE IF NOT EXISTS param_arrays (
    step           INTEGER NOT NULL,
    part           INTEGER NOT NULL, -- the first layer id of the row (one row per optimizer)
    layer_ids      BLOB NOT NULL,  -- int32 array: the parameters the arrays below describe
    -- float64 arrays, one value per layer_ids entry (NaN is NaN); NULL: not collected
    grad_norm      BLOB,
    grad_maxabs    BLOB,
    grad_nonfinite BLOB,           -- non-finite values per gradient; empty: all 0
    weight_norm    BLOB,           -- before the step's update
    update_norm    BLOB,           -- of (weights after - weights before)
    PRIMARY KEY (step, part)
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

PER_LAYER_TABLES = ("param_arrays", "act_stats")

PARAM_STATS = ("grad_norm", "grad_maxabs", "grad_nonfinite", "weight_norm", "update_norm")
"""The per-parameter statistics (``param_arrays``' arrays; v1/v2: ``param_stats`` columns)."""
