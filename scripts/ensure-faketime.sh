#!/usr/bin/env bash
# Makes sure libfaketime is installed (Debian's faketime package): the clock-skew tests run
# the real plugin binary with its wall clock an hour ahead or behind through LD_PRELOAD, as a
# badly set host would, so the product itself has no clock setting for tests.
set -euo pipefail
if ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "libfaketime is missing: run 'sudo apt-get install -y faketime' (the clock-skew tests need it)" >&2
  exit 1
fi
echo "installing faketime (libfaketime) from Debian's packages..." >&2
export DEBIAN_FRONTEND=noninteractive
here=$(dirname "$0")
"$here/wait-apt-lock.sh"
apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" update -qq
"$here/wait-apt-lock.sh"
apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" install -y -qq faketime >/dev/null
ls /usr/lib/*/faketime/libfaketimeMT.so.1
