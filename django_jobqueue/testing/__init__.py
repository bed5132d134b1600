"""Test your own code with the real queue: no eager mode; ``enqueue`` writes its row, the test runs the rows.

See docs/testing.md.
"""

from .runner import RunReport, TooManyJobs, run_jobs, run_schedule

__all__ = ["RunReport", "TooManyJobs", "run_jobs", "run_schedule"]
