#!/usr/bin/env bash
# `make bump VERSION=x.y.z`: sets the version everywhere it lives — Cargo.toml (and
# Cargo.lock), manifest.yaml's top-level `version` (meta.version is the manifest schema
# version and stays) — so the package name dist/stateful_tool-<version>.difypkg follows.
set -euo pipefail
cd "$(dirname "$0")/.."
new=${1:-${VERSION:-}}
if ! [[ "$new" =~ ^[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}$ ]]; then
  echo "usage: make bump VERSION=x.y.z (three numbers of 1-4 digits: the daemon's and PEP 440's common ground)" >&2
  exit 2
fi
old=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
sed -i "0,/^version = \".*\"/s//version = \"$new\"/" Cargo.toml
sed -i "s/^version: [0-9][0-9.]*/version: $new/" manifest.yaml trigger/manifest.yaml
cargo update -w --offline >/dev/null 2>&1 || cargo update -w >/dev/null
grep -q "^version = \"$new\"" Cargo.toml
grep -q "^version: $new\\b" manifest.yaml
grep -q "^version: $new\\b" trigger/manifest.yaml
echo "version $old -> $new (Cargo.toml, Cargo.lock, manifest.yaml, trigger/manifest.yaml); the package will be dist/stateful_tool-$new.difypkg"
