"""``--pool processes``: ``pool.py`` is the pool; the rest is its children's life (see ``children.py``).

Imported by the fork server before Django is set up: no model at import time here.
"""
