"""tools: for stable, efficient training — the gradient-checkpointing planner."""

from .checkpointing import (
    CheckpointPlan,
    apply_checkpointing,
    find_blocks,
    plan_checkpointing,
    remove_checkpointing,
)

__all__ = [
    "CheckpointPlan",
    "apply_checkpointing",
    "find_blocks",
    "plan_checkpointing",
    "remove_checkpointing",
]
