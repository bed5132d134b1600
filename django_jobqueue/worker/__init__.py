"""The ``runworker`` process: threads, heartbeats, timers and signals, over ``QueueClient``.

Nothing here runs SQL of its own; every statement is in ``queue/ops/``.
"""
