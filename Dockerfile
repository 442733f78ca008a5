# syntax=docker/dockerfile:1
#
# The egress proxy and the hook runner in one image (`egress-proxy`, `hookrunner`),
# plus two helpers built from the same base: the transparent profile's iptables
# one-shot and the compose stack's Prometheus.
#
#   docker build -t sandbox-egress:0.1.0 .                              # the runtime (last stage)
#   docker build --target netinit -t sandbox-egress-netinit:0.1.0 .     # iptables, for transparent mode
#   docker build --target prometheus -t sandbox-egress-prometheus:0.1.0 .
#   docker build --target redis -t sandbox-egress-redis:0.1.0 .        # the fleet profile's state
#
# Without a registry (docs/operations.md, "Containers without a registry"):
#   scripts/base-image && scripts/wheelhouse
#   docker build --build-arg PYTHON_IMAGE=sandbox-egress-base:trixie-2 -t sandbox-egress:0.1.0 .
# The base then already holds iptables, prometheus and redis-server, and pip installs from
# build/wheelhouse only (--no-index); no stage needs the network.
#
# Nothing secret is built in: the interception CA is generated when a container
# starts (`egress-proxy ca`, into a volume), credentials arrive at run time as
# files or environment variables, and .dockerignore admits only the sources, the
# default configuration and the wheelhouse (never certs/, .venv/ or .git/).
# Every stage runs with the classic builder as well as BuildKit (docker-compose
# 1.29 builds with the classic one): no --mount, no stage skipped by design.

ARG PYTHON_IMAGE=python:3.13-slim

FROM ${PYTHON_IMAGE} AS base
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="sandbox-egress" \
      org.opencontainers.image.description="Egress proxy with allowlist and token transformation, and a hook runner, for AI-agent sandboxes" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
# Two unprivileged users with fixed ids: the transparent-mode firewall rules
# exempt the proxy by uid (10001), so a sandbox must never run as that uid.
RUN groupadd --gid 10001 egress \
    && useradd --uid 10001 --gid egress --no-create-home --home-dir /var/lib/egress \
        --shell /usr/sbin/nologin egress \
    && groupadd --gid 10002 sandbox \
    && useradd --uid 10002 --gid sandbox --create-home --home-dir /home/sandbox \
        --shell /bin/bash sandbox

# One-shot helper for transparent mode: applies the iptables rules that send a
# sandbox's TCP to the proxy (compose profile "transparent", the Kubernetes sidecar).
FROM base AS netinit
RUN command -v iptables >/dev/null 2>&1 || { apt-get update \
    && apt-get install -y --no-install-recommends iptables \
    && rm -rf /var/lib/apt/lists/*; }

# Prometheus from Debian's package (the compose stack's scraper), as its own user.
FROM base AS prometheus
RUN command -v prometheus >/dev/null 2>&1 || { apt-get update \
    && apt-get install -y --no-install-recommends prometheus \
    && rm -rf /var/lib/apt/lists/*; } \
    && install -d -o prometheus -g prometheus -m 0755 /prometheus
USER prometheus
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]

# Debian's redis-server: the store the compose profile `fleet`'s replicas share their
# budgets in (docs/operations.md, "From one node to a fleet"), as its own user.
FROM base AS redis
RUN command -v redis-server >/dev/null 2>&1 || { apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/*; }
USER redis
WORKDIR /tmp
EXPOSE 6379
ENTRYPOINT ["redis-server"]

FROM base AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/egress/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# A virtualenv, so that the base's own Python packages are never touched (Debian
# marks its interpreter externally managed). With wheels in build/wheelhouse
# (scripts/wheelhouse) pip installs from them alone; without, from the index.
# (`wheelhous[e]` matches nothing when the directory is absent; pyproject.toml
# keeps the COPY from being empty.)
WORKDIR /src
COPY pyproject.toml build/wheelhous[e] /wheels/
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY addons ./addons
COPY common ./common
COPY hookrunner ./hookrunner
COPY runtime ./runtime
COPY sandbox_egress ./sandbox_egress
COPY scripts/hookrunner ./scripts/hookrunner
RUN python3 -m venv /opt/egress \
    && if ls /wheels/*.whl >/dev/null 2>&1; then \
        pip install --no-index --find-links /wheels . ; \
    else \
        pip install . ; \
    fi \
    && python -m compileall -q -j 0 -o 1 /opt/egress/lib \
    && rm -rf /src /wheels
# `egress-proxy run` re-executes itself under `python -O` (D75: mitmproxy's debug-only
# checks off): the optimized bytecode (.opt-1.pyc) is compiled above, at build time,
# because the egress user cannot write it into /opt/egress at start.

# The embedded default environment (config/default.yaml, as for `make run`):
# the image runs without a mounted configuration. Mount your own over
# /etc/egress/env.yaml. Its example transform reads DEMO_API_TOKEN, which the image
# does not carry (no credential, even a fake one, is baked into an image, D139):
# `docker run -e DEMO_API_TOKEN=demo-not-a-real-token sandbox-egress:0.1.0`.
COPY config/default.yaml /etc/egress/env.yaml

# Mount points, owned by the user that writes them. A named volume mounted on
# one of them starts with this ownership, so the non-root proxy can write it.
#   certs        the interception CA, private key included (the proxy only)
#   ca-public    the exported public CA certificate (mounted read-only by sandboxes)
#   upstream-ca  an internal CA that upstream servers are verified against
#   telemetry-tls the example telemetry server's certificate and key
RUN install -d -o egress -g egress -m 0755 /var/lib/egress /var/lib/egress/ca-public \
        /var/lib/egress/upstream-ca \
    && install -d -o egress -g egress -m 0700 /var/lib/egress/certs /var/lib/egress/telemetry-tls \
    && install -d -o sandbox -g sandbox -m 0755 /workspace

USER egress
WORKDIR /var/lib/egress
EXPOSE 8080 9464
# Probes the metrics address of the default command; a container that runs the
# proxy elsewhere (compose, Kubernetes) passes its own `--metrics`, and one that
# runs something else (the sandbox, the one-shots) disables the check.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["egress-proxy", "health", "--metrics", "127.0.0.1:9464"]
CMD ["egress-proxy", "run", "--config", "/etc/egress/env.yaml", "--listen", "0.0.0.0:8080", \
     "--metrics", "0.0.0.0:9464", "--certs", "/var/lib/egress/certs"]
