# syntax=docker/dockerfile:1
#
# The egress proxy and the hook runner in one image (`egress-proxy`, `hookrunner`).
#
#   docker build -t sandbox-egress:0.1.0 .                           # the runtime (default target)
#   docker build --target netinit -t sandbox-egress-netinit:0.1.0 .  # iptables, for transparent mode
#
# Nothing secret is built in: the interception CA is generated when a container
# starts (`egress-proxy ca`, into a volume), credentials arrive at run time as
# files or environment variables, and .dockerignore admits only the sources
# (never certs/, .venv/ or .git/).

ARG PYTHON_IMAGE=python:3.12-slim

# One-shot helper for transparent mode: applies the iptables rules that send a
# sandbox's TCP to the proxy (compose profile "transparent", the Kubernetes sidecar).
FROM ${PYTHON_IMAGE} AS netinit
RUN apt-get update \
    && apt-get install -y --no-install-recommends iptables \
    && rm -rf /var/lib/apt/lists/*

FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Two unprivileged users with fixed ids: the transparent-mode firewall rules
# exempt the proxy by uid (10001), so a sandbox must never run as that uid.
RUN groupadd --gid 10001 egress \
    && useradd --uid 10001 --gid egress --no-create-home --home-dir /var/lib/egress \
        --shell /usr/sbin/nologin egress \
    && groupadd --gid 10002 sandbox \
    && useradd --uid 10002 --gid sandbox --create-home --home-dir /home/sandbox \
        --shell /bin/bash sandbox

WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY addons ./addons
COPY hookrunner ./hookrunner
RUN pip install . && rm -rf /src

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
CMD ["egress-proxy", "run", "--config", "/etc/egress/env.yaml", "--listen", "0.0.0.0:8080", \
     "--metrics", "0.0.0.0:9464", "--certs", "/var/lib/egress/certs"]
