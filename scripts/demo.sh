#!/usr/bin/env bash
# `make run`: the main job on the default store. Starts our KV container with on-disk data,
# sends the same event twice through the plugin (as the Dify daemon would), shows
# "accepted" then "duplicate", and stops the container.
set -euo pipefail
bin=${BIN:-target/release/stateful-tool}
data=${DATA_DIR:-./data}
out=$(mktemp)
"$bin" kv serve --listen 127.0.0.1:0 --data "$data" >"$out" &
kv=$!
trap 'kill $kv 2>/dev/null || true; rm -f "$out"' EXIT
for _ in $(seq 100); do grep -q '^listening on ' "$out" && break; sleep 0.05; done
url=$(sed -n 's/^listening on //p' "$out" | head -n1)
[ -n "$url" ] || { echo "the KV container did not start" >&2; exit 1; }
id="EVT-$(date +%Y%m%d)-001"
echo "KV container: $url (data in $data)"
echo
echo "== first delivery of $id (called as a workflow tool node would: text, json, one variable per output)"
KV_URL=$url "$bin" call event_ingest --param "event_id=$id" --param event_type=created --param 'payload={"order":42}' || true
echo
echo "== the sender retries the same event (called as an agent app would: no variables)"
KV_URL=$url "$bin" call event_ingest --caller agent --param "event_id=$id" --param event_type=created --param 'payload={ "order": 42 }' || true
echo
echo "(the record persists in $data: run 'make run' again and the first delivery is a duplicate too)"
