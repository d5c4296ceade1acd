"""Parts the scale benchmark (`bench/scale.py`) measures with: each module one figure, called in a
process that has run `django.setup()` against the configured database and cluster."""
