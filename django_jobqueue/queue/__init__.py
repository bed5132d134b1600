"""The queue's state machine: every statement that changes a job row lives in ``ops``."""

from .client import QueueClient

__all__ = ["QueueClient"]
