"""``--pool asyncio``: coroutine jobs as tasks of one event loop, plain functions in a few threads.

- ``pool.py``: the pool, as the claiming loop sees it (``Pool``).
- ``target.py``: how a coroutine job is told to stop: its task is cancelled.
- ``lanes.py``: the threads that coroutine jobs' thread-sensitive calls (the
  async ORM's) run in, a few for all of them.
- ``watch.py``: a loop blocked by a job's synchronous code, found and logged.
"""
