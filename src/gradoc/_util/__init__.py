"""The small helpers every layer shares: numbers and safe text (``text``), pytrees
(``tree``), compiled and DDP wrappers (``wrappers``), patches of library functions
(``patch``), the RNG and anomaly state gradoc leaves as it found it (``state``), output
paths (``paths``) and how gradoc's objects show in Jupyter (``display``). Nothing here
imports the rest of gradoc but ``errors``."""
