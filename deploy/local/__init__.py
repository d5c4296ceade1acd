"""Project-owned PostgreSQL and Redis on loopback, and the local process supervisor for `make run`.

Nothing here touches a server the machine already runs: instances live under `.state/`, listen on
127.0.0.1 on their own ports, and are password-protected with secrets kept in `.state/secrets/`.
Set TRANCHE_DB_HOST (and friends) or TRANCHE_REDIS_URL to use existing servers instead.
"""
