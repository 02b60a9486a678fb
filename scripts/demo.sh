#!/usr/bin/env bash
# `make run`: the main job on the default store. Starts our KV container with on-disk data,
# sends the same event twice through the plugin (as the Dify daemon would), shows
# "accepted" then "duplicate", and stops the container.
#   BIN       the stateful-tool binary (default target/release/stateful-tool)
#   DATA_DIR  the container's data directory (default ./data)
set -euo pipefail
bin=${BIN:-target/release/stateful-tool}
data=${DATA_DIR:-./data}
work=$(mktemp -d)
kv=""
trap '[ -z "$kv" ] || kill "$kv" 2>/dev/null || true; rm -rf "$work"' EXIT

# The pid of the process holding a lock on $1 (from /proc/locks), if any. A KV container
# holds its database file locked for as long as it runs.
lock_holder() {
  local ino
  ino=$(stat -L -c %i "$1" 2>/dev/null) || return 0
  [ -r /proc/locks ] || return 0
  awk -v ino="$ino" '{ n = split($6, d, ":"); if (d[n] == ino) { print $5; exit } }' /proc/locks
}

# A container started by hand (`kv serve --data ./data &`) keeps the database open; a second
# one cannot open it. Say so at once and use a directory of our own instead.
holder=$(lock_holder "$data/kv.redb")
if [ -n "$holder" ]; then
  what=$(tr '\0' ' ' <"/proc/$holder/cmdline" 2>/dev/null || true)
  echo "$data is in use by another KV container (pid $holder: ${what:-unknown command})."
  echo "This run uses a data directory of its own instead; stop that server with: kill $holder"
  data="$work/data"
fi

# The background job opens its redirections itself, maybe after the loop below first reads:
# create the file first.
: >"$work/out"
"$bin" kv serve --listen 127.0.0.1:0 --data "$data" >"$work/out" 2>"$work/log" &
kv=$!
url=""
while [ -z "$url" ]; do
  if ! kill -0 "$kv" 2>/dev/null; then
    # It exited before listening: show why now instead of waiting.
    wait "$kv" || true
    kv=""
    echo "the KV container did not start:" >&2
    cat "$work/log" >&2
    exit 1
  fi
  url=$(sed -n 's/^listening on //p' "$work/out" | head -n1)
  [ -n "$url" ] || sleep 0.05
done
id="EVT-$(date +%Y%m%d)-001"
echo "KV container: $url (data in $data)"
echo
echo "== first delivery of $id (called as a workflow tool node would: text, json, one variable per output)"
KV_URL=$url "$bin" call event_ingest --param "event_id=$id" --param event_type=created --param 'payload={"order":42}' || true
echo
echo "== the sender retries the same event (called as an agent app would: no variables)"
KV_URL=$url "$bin" call event_ingest --caller agent --param "event_id=$id" --param event_type=created --param 'payload={ "order": 42 }' || true
echo
if [ "$data" = "$work/data" ]; then
  echo "(this run's data was temporary; stop the other container to keep records in ${DATA_DIR:-./data})"
else
  echo "(the record persists in $data: run 'make run' again and the first delivery is a duplicate too)"
fi
