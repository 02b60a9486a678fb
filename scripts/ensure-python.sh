#!/usr/bin/env bash
# Makes sure python3 is installed (Debian's python3 package; minimal images lack it): the shim
# tests run the package's main.py with `python3 -m main` as the Dify daemon does, and
# `make marketplace-check` runs scripts/marketplace_check.py.
set -euo pipefail
if command -v python3 >/dev/null 2>&1; then
  exit 0
fi
"$(dirname "$0")/apt-install.sh" "python3 (the shim tests run main.py like the daemon does)" python3
python3 --version
