#!/usr/bin/env bash
# Regenerates docs/screenshots/: the README the package ships as Dify's plugin panel shows it
# (580 px, single line breaks as breaks) and the icons on light and dark tiles beside Dify's
# "installed" check, both rendered by headless Chromium in tests/it/dify_screens.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/ensure-ui-tools.sh
STATEFUL_TOOL_SCREENSHOTS_DIR=docs/screenshots cargo test --locked --test it dify_screens:: -- --test-threads=1
ls -l docs/screenshots
