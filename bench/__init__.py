"""The benchmark: our figures against a raw-driver baseline, measured in one run (``python -m bench``)."""
