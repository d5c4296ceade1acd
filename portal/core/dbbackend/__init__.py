"""Django's PostgreSQL backend with a bounded, fail-fast connection wait (`base.py`)."""
