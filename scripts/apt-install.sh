#!/usr/bin/env bash
# Installs Debian packages for the setup scripts (ensure-*.sh): as root, after any other
# apt/dpkg run has let go of its lock (wait-apt-lock.sh; apt itself also waits for the moment
# between our look and its own locking). Not root: says which command to run, and fails.
#   apt-install.sh "<why, for the message>" [--no-install-recommends] package...
set -euo pipefail
why=$1
shift
packages=()
for arg in "$@"; do [ "$arg" = --no-install-recommends ] || packages+=("$arg"); done
if [ "$(id -u)" != 0 ]; then
  echo "$why is missing: run 'sudo apt-get install -y ${packages[*]}'" >&2
  exit 1
fi
echo "$why is missing: installing ${packages[*]} from Debian's packages..." >&2
export DEBIAN_FRONTEND=noninteractive
here=$(dirname "$0")
"$here/wait-apt-lock.sh"
apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" update -qq
"$here/wait-apt-lock.sh"
apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" install -y -qq "$@" >/dev/null
