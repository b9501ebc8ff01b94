"""What the agent may touch, in one folder: everything that keeps a session's agent side apart.

``accounts`` (the agent accounts and their leases), ``homes`` (the agent's home and its snapshots),
``processes`` (process groups started as the agent, and their supervisor), ``watchdog`` (the server's link
to the watchdog process) and ``watchdog_process`` (the process that outlives a killed server and ends what it
guarded), ``interpreter`` and ``interpreter_worker`` (python and CodeAct, run as the agent), ``pipes`` (a
command's output read to its last byte).
"""
