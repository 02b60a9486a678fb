#!/usr/bin/env bash
# Makes sure redis-server (Redis >= 7, from Debian's packages; its Cluster and Sentinel modes
# included), redis-cli (builds the test Cluster) and openssl (makes the TLS tests' CA) are
# installed: the test suite starts its own servers on ephemeral loopback ports. Also strace:
# kv_fsync:: traces the KV container to prove it fsyncs directories.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 \
  && command -v openssl >/dev/null 2>&1 && command -v strace >/dev/null 2>&1; then
  exit 0
fi
"$(dirname "$0")/apt-install.sh" "redis-server, redis-cli, openssl or strace (the tests need Redis >= 7)" redis-server redis-tools openssl strace
# The package starts a system service on 6379; the tests never use it.
(service redis-server stop || systemctl stop redis-server || true) >/dev/null 2>&1
redis-server --version
