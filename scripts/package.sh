#!/usr/bin/env bash
# `make package`: builds the release binaries (amd64 natively; arm64 through Debian's cross
# toolchain unless ARM64=0), writes dist/stateful_tool-<version>.difypkg, and with
# SIGNING_KEY=path/to/private.pem also the signed package next to it, verified.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/stateful-tool
[ -x "$bin" ] || { echo "build first: cargo build --release" >&2; exit 1; }
# The README written for Dify's plugin panel, not the repository's (docs/dify-panel-readme.md says why).
args=(--out dist --bin "amd64=$bin" --readme docs/dify-panel-readme.md)
if [ "${ARM64:-1}" != 0 ]; then
  arm=$(./scripts/build-arm64.sh | tail -n1)
  args+=(--bin "arm64=$arm")
fi
"$bin" package "${args[@]}"
version=$(sed -n 's/^version: *\([0-9][0-9.]*\).*/\1/p' manifest.yaml | head -n1)
pkg="dist/stateful_tool-$version.difypkg"
if [ -n "${SIGNING_KEY:-}" ]; then
  public="${PUBLIC_KEY:-${SIGNING_KEY%.private.pem}.public.pem}"
  "$bin" sign "$pkg" --key "$SIGNING_KEY" --category community
  signed="dist/stateful_tool-$version.signed.difypkg"
  if [ -f "$public" ]; then
    "$bin" verify "$signed" --key "$public"
  else
    echo "note: no public key at $public; skipped verification" >&2
  fi
  cat <<MSG

Signed package: $signed
Unsigned package: $pkg

To let a Dify plugin daemon trust it (Community Edition, docker compose):
  1. copy the PUBLIC key to docker/volumes/plugin_daemon/public_keys/stateful_tool.public.pem
  2. on the plugin_daemon service set
       THIRD_PARTY_SIGNATURE_VERIFICATION_ENABLED=true
       THIRD_PARTY_SIGNATURE_VERIFICATION_PUBLIC_KEYS=/app/storage/public_keys/stateful_tool.public.pem
  3. docker compose down && docker compose up -d   (restart alone does not reload env)
  4. Plugins -> Install plugin -> Local package file -> $signed
MSG
else
  cat <<MSG

Unsigned package: $pkg
Sign it with: make package SIGNING_KEY=path/to/private.pem   (make a key pair: $bin keygen)
MSG
fi
