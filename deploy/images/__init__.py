"""Container images built without a container daemon (`make images`); see build.py."""
