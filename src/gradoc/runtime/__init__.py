"""``gradoc run``'s runtime: running a script in-process (``runner``), the session around
it (``session``: attach, diagnose, re-run, fix), what the script did outside its run
directory (``effects``), re-running it to locate a NaN (``replay``), torchrun's ranks
(``distributed``), and what a closed run leaves besides its log (``finish``: the report
and the sinks, also for ``gradoc.watch`` and the integrations)."""
