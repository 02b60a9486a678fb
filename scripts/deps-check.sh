#!/usr/bin/env bash
# Dependency check. With cargo-audit AND a local RustSec advisory-db checkout
# (ADVISORY_DB=/path/to/advisory-db), runs a real advisory audit of Cargo.lock. Otherwise it
# says so and only lists crates present in several versions (`cargo tree -d`): that is NOT an
# advisory audit, just a look at duplication. Exit status: non-zero only when the audit
# finds a vulnerability that is not accepted below.
#
# Accepted, with reasons:
#   RUSTSEC-2023-0071 (rsa, Marvin timing side channel, no fixed release): rsa is only used by
#   `stateful-tool sign`, which signs a package once, offline, on the build machine; no
#   attacker can time that private-key operation.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
if cargo audit --version >/dev/null 2>&1 && [ -n "${ADVISORY_DB:-}" ] && [ -d "${ADVISORY_DB}/crates" ]; then
  echo "== cargo audit against ${ADVISORY_DB} ($(git -C "$ADVISORY_DB" log -1 --format=%cs 2>/dev/null || echo 'date unknown'))"
  cargo audit --no-fetch --db "$ADVISORY_DB" --ignore RUSTSEC-2023-0071 || status=$?
else
  echo "== no advisory audit: needs cargo-audit (cargo install cargo-audit --locked) and ADVISORY_DB=<advisory-db checkout>;"
  echo "   the advisory database is fetched from GitHub, which this machine cannot reach"
fi
echo "== crates present in more than one version (cargo tree -d; not an advisory audit)"
cargo tree --duplicates --depth 0 --locked --edges normal,build | grep -v '^$' || true
exit $status
