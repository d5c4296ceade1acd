"""Operator tools built from the Go module proxy into the version cache (helm)."""
