"""Live slice status pages: a server-rendered table per project, updated over a websocket."""
