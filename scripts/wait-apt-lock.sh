#!/usr/bin/env bash
# Waits (bounded) until no process holds the apt/dpkg lock files, saying what it waits for,
# so that an install started while another apt-get/dpkg/unattended-upgrade runs waits its
# turn instead of dying with "Could not get lock".
#
# A held lock is read from /proc/locks (dpkg and apt take fcntl locks, `flock` takes flock
# locks; both are listed there), so waiting never takes or disturbs a lock itself.
#   APT_LOCK_FILES    the lock files to watch (space-separated; default: dpkg's and apt's)
#   APT_LOCK_TIMEOUT  seconds to wait at most (default 600)
#   APT_LOCK_POLL     seconds between looks (default 1)
# Exit status: 0 once no lock is held, 1 when the timeout ran out (naming the holder).
set -euo pipefail
files=${APT_LOCK_FILES:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}
timeout=${APT_LOCK_TIMEOUT:-600}
poll=${APT_LOCK_POLL:-1}

# Prints "<file> (pid N, <command>)" for the first watched file some process holds a lock on.
held() {
  local f ino pid comm
  [ -r /proc/locks ] || return 1
  for f in $files; do
    ino=$(stat -L -c %i "$f" 2>/dev/null) || continue
    # /proc/locks: "N: FLOCK|POSIX ADVISORY WRITE <pid> <maj>:<min>:<inode> <start> <end>".
    pid=$(awk -v ino="$ino" '{ n = split($6, d, ":"); if (d[n] == ino) { print $5; exit } }' /proc/locks)
    if [ -n "$pid" ]; then
      comm=$(cat "/proc/$pid/comm" 2>/dev/null || echo "unknown")
      echo "$f (pid $pid, $comm)"
      return 0
    fi
  done
  return 1
}

start=$(date +%s)
said=""
while holder=$(held); do
  waited=$(( $(date +%s) - start ))
  if [ "$waited" -ge "$timeout" ]; then
    echo "gave up after ${waited}s: $holder still holds the package manager's lock;" \
      "let that install finish (or stop it), then run this again" >&2
    exit 1
  fi
  if [ "$holder" != "$said" ]; then
    echo "waiting for $holder to release the package manager's lock" \
      "(another install is running; waiting up to ${timeout}s)..." >&2
    said=$holder
  fi
  sleep "$poll"
done
if [ -n "$said" ]; then
  echo "the package manager's lock is free; going on" >&2
fi
exit 0
