"""Cross-cutting pieces of the portal every app may use: health endpoints and heartbeats, the
queue to the controller, database/Redis outage handling, rate limits, tokens, websocket
plumbing and channel group names, and the admin base classes."""
