"""The ``runworker`` process, over ``QueueClient``: nothing here runs SQL of its own.

- ``supervisor.py``: the claiming loop, its start and its drain; with the
  worker's config, row, acks (``completer.py``), claims held and queue weights;
- ``pools/``: where jobs run, behind the one ``Pool`` interface (threads, processes);
- ``run/``: the run of one job, and the writing of its outcome;
- ``services/``: the background threads (heartbeat, ticker, scheduler, wake-up,
  signals, metrics and health).

docs/workers.md draws the parts; docs/development.md says what each may import.
"""
