"""Imported by ``--pool processes``'s fork server alone: importing it prepares that process.

See ``preload.py``.
"""

from .preload import prepare_fork_server

prepare_fork_server()
