"""A worker's background duties, each a thread of its own (``worker/service.py``) beside the claiming loop."""
