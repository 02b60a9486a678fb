#!/usr/bin/env bash
# `make run`: the main job on the default store. Starts our KV container with on-disk data,
# sends the same event twice through the plugin (as the Dify daemon would), shows
# "accepted" then "duplicate", completes the run as a workflow would, and stops the container.
# Completed, the record stays a duplicate for every later delivery (until its retention ends),
# so the closing promise holds: a record left `processing` would be taken over once its lease
# ran out.
#   BIN       the stateful-tool binary (default target/release/stateful-tool)
#   DATA_DIR  the container's data directory (default ./data)
#   EVENT_ID  the event's id (default EVT-<today>-001: a new event each day)
set -euo pipefail
bin=${BIN:-target/release/stateful-tool}
data=${DATA_DIR:-./data}
work=$(mktemp -d)
kv=""
# Waits for the container to exit: it holds the data directory's lock until then, and a
# `make run` right after this one must find the directory free.
trap '[ -z "$kv" ] || { kill "$kv" 2>/dev/null; wait "$kv" 2>/dev/null; } || true; rm -rf "$work"' EXIT

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
id=${EVENT_ID:-EVT-$(date +%Y%m%d)-001}
echo "KV container: $url (data in $data)"
echo
echo "== first delivery of $id (called as a workflow tool node would: text, json, one variable per output)"
KV_URL=$url "$bin" call event_ingest --param "event_id=$id" --param event_type=created --param 'payload={"order":42}' \
  | tee "$work/first" || true
echo
echo "== the sender retries the same event (called as an agent app would: no variables)"
KV_URL=$url "$bin" call event_ingest --caller agent --param "event_id=$id" --param event_type=created --param 'payload={ "order": 42 }' || true
echo
# The first delivery's own variables say what this run owns: an accepted claim (its attempt)
# or a duplicate of an earlier run's record (its status).
outcome=$(sed -n 's/^variable outcome = "\(.*\)"$/\1/p' "$work/first")
attempt=$(sed -n 's/^variable attempt = \([0-9]*\)$/\1/p' "$work/first")
status=$(sed -n 's/^variable status = "\(.*\)"$/\1/p' "$work/first")
lease=$(sed -n 's/^variable lease_until = "\(.*\)"$/\1/p' "$work/first")
if [ "$outcome" = accepted ] && [ -n "$attempt" ]; then
  echo "== the workflow did the work: it completes attempt $attempt"
  if KV_URL=$url "$bin" call event_complete --caller agent --param "event_id=$id" --param "attempt=$attempt" \
    --param status=completed --param result=shipped; then
    status=completed
  fi
  echo
fi
if [ "$data" = "$work/data" ]; then
  echo "(this run's data was temporary; stop the other container to keep records in ${DATA_DIR:-./data})"
elif [ "$status" = completed ]; then
  echo "(the record persists in $data, completed: run 'make run' again today and its first delivery is a duplicate too; tomorrow's event id is a new event)"
else
  echo "($id is ${status:-not completed} in $data, not completed: until its lease ends (${lease:-20 minutes after the claim, by default}) deliveries are duplicates; after that, the next one takes the event over as a new attempt)"
fi
