"""A small text for a character-level model: a few repeated English sentences."""

TEXT = (
    "the quick brown fox jumps over the lazy dog. "
    "a stitch in time saves nine. "
    "all that glitters is not gold. "
    "the early bird catches the worm. "
) * 40


def load() -> tuple[str, list[str]]:
    chars = sorted(set(TEXT))
    return TEXT, chars
