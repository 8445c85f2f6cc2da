"""integrations: thin adapters that feed the same core from where users already train.

Each module imports its framework lazily (only when used): ``lightning``, ``hf``.
"""
