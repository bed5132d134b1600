"""The run of one claimed job: ``executor.py`` runs it and writes its outcome.

It runs in the calling slot's thread, or through the pool's ``Runner`` (a
child process). Nothing here knows of pools or of the worker's services.
"""
