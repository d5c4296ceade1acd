"""Cross-cutting pieces of the portal: health endpoints, the worker heartbeat, the layer ping."""
