"""Node agents: per-node tokens (stored hashed), the agent websocket ingest and the latest
slice status per pod, published to the project's channel group."""
