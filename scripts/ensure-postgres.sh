#!/usr/bin/env bash
# Makes sure PostgreSQL's server binaries (Debian's postgresql package: initdb, postgres,
# pg_basebackup, pg_ctl in /usr/lib/postgresql/<version>/bin) and psql are installed: the
# PostgreSQL tests start their own clusters in temporary directories on ephemeral loopback
# ports. The package's own cluster (port 5432) is stopped; the tests never use it.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && command -v psql >/dev/null 2>&1; then
  exit 0
fi
"$(dirname "$0")/apt-install.sh" "PostgreSQL's server and psql (the tests start their own clusters)" postgresql postgresql-client
(service postgresql stop || systemctl stop postgresql || true) >/dev/null 2>&1
ls -d /usr/lib/postgresql/*/bin
