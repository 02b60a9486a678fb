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
if [ "$(id -u)" != 0 ]; then
  echo "redis-server, redis-cli, openssl or strace is missing: run 'sudo apt-get install -y redis-server redis-tools openssl strace' (the tests need Redis >= 7)" >&2
  exit 1
fi
echo "installing redis-server from Debian's packages..." >&2
export DEBIAN_FRONTEND=noninteractive
here=$(dirname "$0")
# Another install (unattended-upgrades, a second terminal) may hold the lock: wait for it,
# and let apt itself wait too, for the moment between our look and its own locking.
"$here/wait-apt-lock.sh"
apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" update -qq
"$here/wait-apt-lock.sh"
apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" install -y -qq redis-server redis-tools openssl strace >/dev/null
# The package starts a system service on 6379; the tests never use it.
(service redis-server stop || systemctl stop redis-server || true) >/dev/null 2>&1
redis-server --version
