"""Django settings for the Tranche portal: the one place configuration is read.

Everything comes from the environment through the typed helpers in `portal.env`. Development is
opt-in (`TRANCHE_DEBUG=1`, set by `make run` and the tests); a production process refuses to start
without a real secret key and explicit allowed hosts.
"""

from __future__ import annotations

from pathlib import Path

from portal.env import (
    ConfigError,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_secret,
    env_str,
)
from tranche import quota, tasknames

BASE_DIR = Path(__file__).resolve().parent.parent
STATE_DIR = Path(env_str("TRANCHE_STATE_DIR", str(BASE_DIR / ".state")))

DEBUG = env_bool("TRANCHE_DEBUG", default=False)
_DEV_SECRET = "dev-only-insecure-secret-key-do-not-use-in-production"  # noqa: S105
SECRET_KEY = env_secret("TRANCHE_SECRET_KEY", _DEV_SECRET if DEBUG else "")
ALLOWED_HOSTS = env_list("TRANCHE_ALLOWED_HOSTS", ["localhost", "127.0.0.1"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("TRANCHE_CSRF_TRUSTED_ORIGINS")


def check_production_config(debug: bool, secret_key: str, allowed_hosts: list[str]) -> None:
    """Refuse an insecure production configuration with a message saying what to set."""
    if debug:
        return
    problems = []
    if not secret_key or secret_key == _DEV_SECRET or len(secret_key) < 32:
        problems.append("TRANCHE_SECRET_KEY (or TRANCHE_SECRET_KEY_FILE) must be 32+ random chars")
    if not allowed_hosts or "*" in allowed_hosts:
        problems.append("TRANCHE_ALLOWED_HOSTS must list the portal's host names (not '*')")
    if problems:
        raise ConfigError(
            "Refusing to start in production (TRANCHE_DEBUG is off): " + "; ".join(problems)
        )


check_production_config(DEBUG, SECRET_KEY, ALLOWED_HOSTS)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "portal.core",
    "portal.audit",
    "portal.tenants",
    "portal.catalog",
    "portal.cluster",
    "portal.orders",
    "portal.billing",
    "portal.agents",
    "portal.status",
    "portal.access",
    "portal.preflight",
]

MIDDLEWARE = [
    # Outermost: every answer is timed by its view's name (/metrics, docs/metrics.md).
    "portal.core.request_metrics.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Innermost, so it sees the view's exception first: database/Redis down -> 503 page.
    "portal.core.outage.OutageMiddleware",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "portal" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.core.links.links",
            ],
            # human_time/human_date on every page without a {% load %} (one way to say a time)
            "builtins": ["portal.core.templatetags.human"],
        },
    },
]


def _local_secret(name: str) -> str:
    """Secrets of the project-owned dev services (`deploy.local`), when they exist."""
    path = STATE_DIR / "secrets" / name
    return path.read_text().strip() if path.is_file() else ""


# Database connections: one psycopg pool per process (threads of a process share it), so a
# process never holds more than DB_POOL_MAX_SIZE connections and PostgreSQL never more than
#
#   total = portal_processes * portal_size
#         + worker_processes * (concurrency + 1) * worker_size   (prefork: a pool per child)
#         + beat_size + watcher_size + bench_size
#         + a few for manage.py commands
#
# Each process reads its size from TRANCHE_DB_POOL_MAX_SIZE; `deploy.local` (make run) sets it per
# role (deploy/local/platform.py: POOL_SIZES, 20 + 3*2 + 2 + 2 = 30 with the defaults) and the
# chart per Deployment. Keep `total` below PostgreSQL's max_connections (100 by default) minus
# its reserved slots; a request that finds the pool busy waits up to TRANCHE_DB_POOL_TIMEOUT.
DB_POOL_MAX_SIZE = env_int("TRANCHE_DB_POOL_MAX_SIZE", 10, minimum=1)
DB_POOL_MIN_SIZE = min(env_int("TRANCHE_DB_POOL_MIN_SIZE", 1, minimum=0), DB_POOL_MAX_SIZE)

# PostgreSQL is the truth. `make run`/`make test` start a project-owned instance on loopback and
# export these; point them at an existing server to use that instead.
# Bounded waits: a request waits at most TRANCHE_DB_POOL_TIMEOUT (1 s) for a
# connection, and not at all while PostgreSQL is known down (portal.core.dbbackend); workers and
# the watcher, which retry anyway, are started with a longer wait (deploy/local/platform.py,
# the chart). Every statement has a server-side timeout, every socket TCP keepalives and a
# user timeout, so a hung database or a lost peer ends in an error instead of a hang.
DB_STATEMENT_TIMEOUT_MS = env_int("TRANCHE_DB_STATEMENT_TIMEOUT_MS", 30000, minimum=0)
DATABASES = {
    "default": {
        "ENGINE": "portal.core.dbbackend",
        "NAME": env_str("TRANCHE_DB_NAME", "tranche"),
        "USER": env_str("TRANCHE_DB_USER", "tranche"),
        "PASSWORD": env_secret("TRANCHE_DB_PASSWORD", _local_secret("db-password")),
        "HOST": env_str("TRANCHE_DB_HOST", "127.0.0.1"),
        "PORT": env_int("TRANCHE_DB_PORT", 15432, minimum=1),
        # The pool owns connection reuse; Django requires CONN_MAX_AGE 0 with it.
        "CONN_MAX_AGE": 0,
        # A pooled connection is checked (an empty query) before it is given: one that died
        # with a PostgreSQL restart is replaced instead of failing the request.
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": {
            # libpq's minimum is 2 s; the pool connects in its own threads, so a request never
            # waits on it (it waits on the pool, above).
            "connect_timeout": env_int("TRANCHE_DB_CONNECT_TIMEOUT", 3, minimum=2),
            "options": f"-c statement_timeout={DB_STATEMENT_TIMEOUT_MS}",
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 3,
            "keepalives_count": 3,
            "tcp_user_timeout": 10000,
            "pool": {
                "min_size": DB_POOL_MIN_SIZE,
                "max_size": DB_POOL_MAX_SIZE,
                # A request waits this long for a free connection before it fails (503 page);
                # float seconds. Workers and the watcher are started with a longer one.
                "timeout": env_float("TRANCHE_DB_POOL_TIMEOUT", 1.0, minimum=0.1),
                # The pool's reconnect back-off (1, 2, 4 s...) gives up after this long; the
                # next request that needs a connection starts a fresh attempt at once, so the
                # back-off never outlives an outage by more than this.
                "reconnect_timeout": env_float("TRANCHE_DB_RECONNECT_TIMEOUT", 2.0, minimum=0.5),
                # Connections idle this long are closed, down to min_size.
                "max_idle": env_int("TRANCHE_DB_POOL_MAX_IDLE", 60, minimum=10),
            },
        },
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_REDIS_PORT = env_int("TRANCHE_REDIS_PORT", 16379, minimum=1)
REDIS_URL = env_secret(
    "TRANCHE_REDIS_URL", f"redis://:{_local_secret('redis-password')}@127.0.0.1:{_REDIS_PORT}/0"
)

CHANNEL_LAYERS = {
    "default": {
        # Redis pub/sub: one PUBLISH per group_send, and each portal process fans a message out
        # to its own sockets in memory. The list-based RedisChannelLayer pops every delivery
        # off Redis one by one (200 viewers x 10 msg/s = 2,000 round trips a second), which
        # on 2 cores delivered ~1,000/s with lag p99 5-7 s; this one ~1,800-2,000/s (bench/load.py).
        # Live status needs no buffering: a page that reconnects gets a fresh snapshot.
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {
            # redis-py 8 times reads out at 5 s by default, which dropped idle websockets with
            # "1011 internal error"; group_add/discard touch Redis only for a project's first
            # and last socket of a process, so closing many sockets needs no connection each.
            "hosts": [
                {
                    "address": REDIS_URL,
                    "socket_timeout": 30,
                    "socket_connect_timeout": 5,
                    "max_connections": env_int("TRANCHE_REDIS_MAX_CONNECTIONS", 100, minimum=4),
                }
            ],
            "prefix": env_str("TRANCHE_CHANNELS_PREFIX", "tranche"),
        },
    }
}

CELERY_BROKER_URL = env_str("TRANCHE_CELERY_BROKER_URL", REDIS_URL)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The Redis transport with a restore that cannot kill the worker (portal/core/broker.py).
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT = "portal.core.broker:Transport"
# A message a killed worker held is redelivered this long after its delivery: longer than the
# longest task (a resync of every project: ~1 min at 1,000 projects; reconciles take seconds),
# short enough that nothing waits an hour. A task still running when it expires may run twice
# at once; every task is idempotent and reconciles take a per-project lock.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("TRANCHE_BROKER_VISIBILITY_TIMEOUT", 300, minimum=30)
}
CELERY_TASK_DEFAULT_QUEUE = env_str("TRANCHE_CELERY_QUEUE", "tranche")
# Worker, beat and watcher prove they are alive this often; /readyz calls one stale after 3 periods.
TRANCHE_HEARTBEAT_SECONDS = env_int("TRANCHE_HEARTBEAT_SECONDS", 30, minimum=1)
CELERY_BEAT_SCHEDULE = {
    "worker-heartbeat": {
        "task": tasknames.RECORD_HEARTBEAT,
        "schedule": TRANCHE_HEARTBEAT_SECONDS,
    },
    "billing-invoice-last-month": {
        # hourly: idempotent, so the first run after a month ends invoices it and later runs
        # (or a beat that was down at midnight) create nothing more
        "task": tasknames.INVOICE_MONTH,
        "schedule": env_int("TRANCHE_INVOICE_RUN_SECONDS", 3600, minimum=60),
    },
    "controller-resync": {
        "task": tasknames.RESYNC_ALL,
        "schedule": env_int("TRANCHE_RESYNC_SECONDS", 60, minimum=5),
        "options": {"expires": env_int("TRANCHE_RESYNC_SECONDS", 60, minimum=5)},
    },
}
# The controller is not a Django app: its tasks module is imported by name.
CELERY_IMPORTS = ("controller.tasks",)
# Printed on every invoice and credit note as the seller. An invoice needs the seller's address
# and VAT id: without them (production leaves them unset until configured) none is issued, and
# the refusal names these settings; a development instance prints visibly fake ones.
BILLING_SELLER = {
    "name": env_str("TRANCHE_SELLER_NAME", "Tranche GPU Cloud"),
    "address": env_str(
        "TRANCHE_SELLER_ADDRESS", "Development instance, no postal address" if DEBUG else ""
    ),
    "vat_id": env_str("TRANCHE_SELLER_VAT_ID", "XX-DEVELOPMENT" if DEBUG else ""),
    "email": env_str("TRANCHE_SELLER_EMAIL", "billing@tranche.invalid"),
}
# An order pending or provisioning longer than this is a stalled reconcile: controller readiness
# fails and the tenant's order page says provisioning is delayed (portal/orders/backlog.py).
PROVISIONING_DELAYED_SECONDS = env_int("TRANCHE_PROVISIONING_DELAYED_SECONDS", 60, minimum=1)
# /metrics (the readiness outcome for monitoring) answers loopback, staff, and a scraper sending
# this as its bearer token; empty: no token is accepted.
METRICS_TOKEN = env_str("TRANCHE_METRICS_TOKEN", "")
# Node agents report every TRANCHE_AGENT_REPORT_SECONDS (their --interval); a node is late after
# two missed reports (plus one period of slack for scheduling): its rows on the live page are
# marked stale and the support console names it (portal/status/fleet.py).
AGENT_REPORT_SECONDS = env_float("TRANCHE_AGENT_REPORT_SECONDS", 1.0, minimum=0.1)
# A slice under 1 % kernel-busy this long is idle: the live page and the support console say
# what it costs (portal/status/idle.py); the TrancheSliceIdle alert uses the same window.
IDLE_SLICE_SECONDS = env_int("TRANCHE_IDLE_SLICE_SECONDS", 6 * 3600, minimum=1)
AGENT_LATE_SECONDS = env_float(
    "TRANCHE_AGENT_LATE_SECONDS", 3 * AGENT_REPORT_SECONDS, minimum=AGENT_REPORT_SECONDS
)
# A GPU health finding older or newer than this against the portal's clock is refused
# (portal/agents/health_admission.py): the agent sends a finding with its next frame, and keeps
# unacknowledged ones across a portal outage of a few hours; a month-old failure is a forgery.
HEALTH_REPORT_PAST_SECONDS = env_int(
    "TRANCHE_HEALTH_REPORT_PAST_SECONDS", 6 * 3600, minimum=60, maximum=7 * 86400
)
HEALTH_REPORT_FUTURE_SECONDS = env_int(
    "TRANCHE_HEALTH_REPORT_FUTURE_SECONDS", 300, minimum=0, maximum=3600
)
# After a cancel or decrease, claims beyond the new quantity may run this long unbilled; slices
# still held after it are billed per started hour (docs/billing.md, "After a cancel"). At most a
# day, so a misconfiguration cannot leave slices running unbilled for weeks.
CONTROLLER_CANCEL_GRACE_SECONDS = env_int(
    "TRANCHE_CANCEL_GRACE_SECONDS", 3600, minimum=0, maximum=86400
)
# What the controller renders into every project namespace besides the GPU quota: the pod-count
# quota and the LimitRange defaults a container without requests gets (tranche.quota's defaults).
CONTROLLER_POD_QUOTA = env_int("TRANCHE_POD_QUOTA", quota.PODS, minimum=1)
CONTROLLER_DEFAULT_CPU_REQUEST_MILLICORES = env_int(
    "TRANCHE_DEFAULT_CPU_REQUEST_MILLICORES", quota.DEFAULT_CPU_REQUEST_MILLICORES, minimum=1
)
CONTROLLER_DEFAULT_MEMORY_REQUEST_MIB = env_int(
    "TRANCHE_DEFAULT_MEMORY_REQUEST_MIB", quota.DEFAULT_MEMORY_REQUEST_MIB, minimum=1
)
CONTROLLER_DEFAULT_MEMORY_LIMIT_MIB = env_int(
    "TRANCHE_DEFAULT_MEMORY_LIMIT_MIB", quota.DEFAULT_MEMORY_LIMIT_MIB, minimum=1
)
# Identities the admission policies treat as the platform besides the controller's own (e.g. a
# GitOps operator that applies platform objects in project namespaces); usernames as the API
# server names them.
CONTROLLER_PLATFORM_USERS = env_list("TRANCHE_PLATFORM_USERS", [])
# The controller's and portal's cluster identity outside a cluster (a kubeconfig path); empty:
# KUBECONFIG, then the pod's ServiceAccount (controller.apply.kube_api_client).
CONTROLLER_KUBECONFIG = env_str("TRANCHE_CONTROLLER_KUBECONFIG", "")
# Tenants' network (docs/security.md): Services of type NodePort/LoadBalancer open a port on
# every node, so they are refused unless the product offers them; each project namespace accepts
# connections only from itself and from these namespaces (the platform's ingress controller).
ALLOW_NODE_PORT_SERVICES = env_bool("TRANCHE_ALLOW_NODE_PORT_SERVICES", False)
TENANT_INGRESS_NAMESPACES = env_list("TRANCHE_TENANT_INGRESS_NAMESPACES", ["ingress-nginx"])
# Sign-up makes a user, an organization and a namespace for anyone: per client address and in
# all, at most this many an hour (docs/security.md).
SIGNUP_PER_ADDRESS_PER_HOUR = env_int("TRANCHE_SIGNUP_PER_ADDRESS_PER_HOUR", 5, minimum=1)
SIGNUP_PER_HOUR = env_int("TRANCHE_SIGNUP_PER_HOUR", 200, minimum=1)
# How long a personal API token lives unless its maker chooses otherwise (at most 365 days).
API_TOKEN_DAYS = env_int("TRANCHE_API_TOKEN_DAYS", 90, minimum=1)
# How long an invitation link works (bearer links must expire).
TRANCHE_INVITATION_DAYS = env_int("TRANCHE_INVITATION_DAYS", 7, minimum=1)

# Cluster access (docs/cluster-access.md): how long a downloaded kubeconfig works (the
# TokenRequest API refuses less than 10 minutes), the identity the portal mints tokens with
# (empty: the controller's kubeconfig, KUBECONFIG, in-cluster, else the dev cluster), and the
# API server URL and CA written into tenants' kubeconfigs (empty: those of that identity).
CLUSTER_ACCESS_TTL_SECONDS = env_int("TRANCHE_CLUSTER_ACCESS_TTL_SECONDS", 8 * 3600, minimum=600)
CLUSTER_ACCESS_KUBECONFIG = env_str("TRANCHE_CLUSTER_ACCESS_KUBECONFIG", "")
CLUSTER_API_SERVER = env_str("TRANCHE_CLUSTER_API_SERVER", "")
CLUSTER_CA_FILE = env_str("TRANCHE_CLUSTER_CA_FILE", "")
CLUSTER_NAME = env_str("TRANCHE_CLUSTER_NAME", "tranche")

# Pre-flight (docs/preflight.md): untrusted work a tenant starts. Image reads: a docker
# config.json with registry logins; registries spoken to over plain HTTP; hosts whose addresses
# may be non-public (an internal registry; `make run` lists its sample registry); token services
# besides a registry's own host; the cluster's service and pod ranges (refused like private
# ones); bounds per layer and image; the wall-clock deadlines of one image (worker) and of one
# call (what the web waits); limits per user and organisation; the worker's queue.
PREFLIGHT_PULL_SECRET = env_str("TRANCHE_PREFLIGHT_PULL_SECRET", "")
PREFLIGHT_PLAIN_HTTP_REGISTRIES = env_list("TRANCHE_PREFLIGHT_PLAIN_HTTP_REGISTRIES", [])
PREFLIGHT_ALLOWED_REGISTRIES = env_list("TRANCHE_PREFLIGHT_ALLOWED_REGISTRIES", [])
PREFLIGHT_TOKEN_REALMS = env_list("TRANCHE_PREFLIGHT_TOKEN_REALMS", ["auth.docker.io"])
PREFLIGHT_BLOCKED_NETWORKS = env_list("TRANCHE_PREFLIGHT_BLOCKED_NETWORKS", [])
PREFLIGHT_IMAGE_MAX_BYTES = env_int("TRANCHE_PREFLIGHT_IMAGE_MAX_BYTES", 4 * 1024**3, minimum=1)
PREFLIGHT_LAYER_MAX_BYTES = env_int("TRANCHE_PREFLIGHT_LAYER_MAX_BYTES", 2 * 1024**3, minimum=1)
PREFLIGHT_REGISTRY_TIMEOUT_SECONDS = env_int("TRANCHE_PREFLIGHT_REGISTRY_TIMEOUT", 10, minimum=1)
PREFLIGHT_IMAGE_DEADLINE_SECONDS = env_int("TRANCHE_PREFLIGHT_IMAGE_DEADLINE", 120, minimum=1)
PREFLIGHT_CALL_DEADLINE_SECONDS = env_int("TRANCHE_PREFLIGHT_CALL_DEADLINE", 20, minimum=1)
PREFLIGHT_MAX_IMAGES = env_int("TRANCHE_PREFLIGHT_MAX_IMAGES", 10, minimum=1)
PREFLIGHT_USER_CONCURRENCY = env_int("TRANCHE_PREFLIGHT_USER_CONCURRENCY", 2, minimum=1)
PREFLIGHT_ORG_CONCURRENCY = env_int("TRANCHE_PREFLIGHT_ORG_CONCURRENCY", 4, minimum=1)
PREFLIGHT_USER_PER_MINUTE = env_int("TRANCHE_PREFLIGHT_USER_PER_MINUTE", 20, minimum=1)
PREFLIGHT_ORG_PER_MINUTE = env_int("TRANCHE_PREFLIGHT_ORG_PER_MINUTE", 60, minimum=1)
# Pre-flight calls of one portal process in their database phase at once (portal/preflight/
# dbphase.py): the others wait without a connection, so pages keep the rest of the pool.
PREFLIGHT_DB_CONCURRENCY = env_int("TRANCHE_PREFLIGHT_DB_CONCURRENCY", 4, minimum=1)
PREFLIGHT_QUEUE = env_str("TRANCHE_PREFLIGHT_QUEUE", "tranche-preflight")
PREFLIGHT_KEY_PREFIX = env_str("TRANCHE_PREFLIGHT_KEY_PREFIX", "") or (
    env_str("TRANCHE_CHANNELS_PREFIX", "tranche") + ":preflight"
)
PREFLIGHT_SCAN_IMAGES = env_bool("TRANCHE_PREFLIGHT_SCAN_IMAGES", True)
# Images the pre-flight page offers to try, with a manifest each (`make run` serves three).
PREFLIGHT_SAMPLE_IMAGES = env_list("TRANCHE_PREFLIGHT_SAMPLE_IMAGES", [])

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Development serves straight from the apps' static folders; production runs collectstatic and
# serves compressed, content-hashed files.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
if not DEBUG:
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
STATICFILES_DIRS = [BASE_DIR / "portal" / "static"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "/"

SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# -- Security (docs/security.md says what an operator sets) -------------------------
# Transport: production is HTTPS only. Behind a TLS-terminating proxy, name the header it sets
# (TRANCHE_PROXY_SSL_HEADER=X-Forwarded-Proto) and make sure the proxy overwrites it.
SECURE_SSL_REDIRECT = env_bool("TRANCHE_SSL_REDIRECT", default=not DEBUG)
SECURE_REDIRECT_EXEMPT = [  # /healthz never reaches Django (portal/core/liveness.py)
    r"^readyz$",
    r"^metrics$",
]  # probes speak plain HTTP inside the pod
SECURE_HSTS_SECONDS = env_int("TRANCHE_HSTS_SECONDS", 0 if DEBUG else 31_536_000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("TRANCHE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env_bool("TRANCHE_HSTS_PRELOAD", default=False)
if not SECURE_HSTS_PRELOAD:
    # Preloading is a commitment of the whole domain that only its operator can make.
    SILENCED_SYSTEM_CHECKS = ["security.W021"]
_PROXY_SSL_HEADER = env_str("TRANCHE_PROXY_SSL_HEADER", "")
if _PROXY_SSL_HEADER:
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _PROXY_SSL_HEADER.upper().replace("-", "_"), "https")
# Content-Security-Policy: the portal loads only its own scripts and styles, no inline code.
# 'self' covers same-origin ws:/wss: for the live status page.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
# Login throttling (django-axes) on every authenticate(): /login/ and /admin/login/. After
# AXES_FAILURE_LIMIT wrong passwords for one username from one address, that pair is refused
# for the cool-off; after TRANCHE_LOGIN_USERNAME_FAILURE_LIMIT for one username from all
# addresses together, the username is (portal.core.lockout_handler says why it is higher).
# Staff unlock early by deleting the "Access attempts" in the admin.
AXES_FAILURE_LIMIT = env_int("TRANCHE_LOGIN_FAILURE_LIMIT", 5, minimum=1)
TRANCHE_LOGIN_USERNAME_FAILURE_LIMIT = env_int(
    "TRANCHE_LOGIN_USERNAME_FAILURE_LIMIT", 20, minimum=AXES_FAILURE_LIMIT
)
AXES_COOLOFF_TIME = env_int("TRANCHE_LOGIN_COOLOFF_MINUTES", 15, minimum=1) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_HANDLER = "portal.core.lockout_handler.LockoutHandler"
AXES_LOCKOUT_CALLABLE = "portal.core.lockout.locked_out"
# The client's address: the socket's peer, or behind TRANCHE_TRUSTED_PROXY_HOPS proxies (the
# chart's portal.proxy.trustedHops) the right-most X-Forwarded-For entry they did not write
# (portal.core.client_address). Set it to exactly the number of proxies in front of the portal:
# one too many and clients choose their address, one too few and every client is the proxy.
TRANCHE_TRUSTED_PROXY_HOPS = env_int("TRANCHE_TRUSTED_PROXY_HOPS", 0, minimum=0)
AXES_CLIENT_IP_CALLABLE = "portal.core.client_address.client_address"
AXES_RESET_ON_SUCCESS = True
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
INSTALLED_APPS += ["axes", "csp"]
MIDDLEWARE += ["csp.middleware.CSPMiddleware", "axes.middleware.AxesMiddleware"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("TRANCHE_LOG_LEVEL", "INFO")},
}
