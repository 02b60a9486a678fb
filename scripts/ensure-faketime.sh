#!/usr/bin/env bash
# Makes sure libfaketime is installed (Debian's faketime package): the clock-skew tests run
# the real plugin binary with its wall clock an hour ahead or behind through LD_PRELOAD, as a
# badly set host would, so the product itself has no clock setting for tests.
set -euo pipefail
if ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; then
  exit 0
fi
"$(dirname "$0")/apt-install.sh" "libfaketime (the clock-skew tests need it)" faketime
ls /usr/lib/*/faketime/libfaketimeMT.so.1
