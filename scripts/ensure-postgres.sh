#!/usr/bin/env bash
# Makes sure PostgreSQL's server binaries (Debian's postgresql package: initdb, postgres,
# pg_basebackup, pg_ctl in /usr/lib/postgresql/<version>/bin) and psql are installed: the
# PostgreSQL tests start their own clusters in temporary directories on ephemeral loopback
# ports. The package's own cluster (port 5432) is stopped; the tests never use it.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && command -v psql >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "PostgreSQL is missing: run 'sudo apt-get install -y postgresql postgresql-client' (the tests start their own clusters)" >&2
  exit 1
fi
echo "installing PostgreSQL from Debian's packages..." >&2
export DEBIAN_FRONTEND=noninteractive
here=$(dirname "$0")
"$here/wait-apt-lock.sh"
apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" update -qq
"$here/wait-apt-lock.sh"
apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" install -y -qq postgresql postgresql-client >/dev/null
(service postgresql stop || systemctl stop postgresql || true) >/dev/null 2>&1
ls -d /usr/lib/postgresql/*/bin
