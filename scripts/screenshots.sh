#!/usr/bin/env bash
# Regenerates docs/screenshots/: both packages' READMEs as Dify's plugin drawer shows them
# (600 px, single line breaks as breaks, its markdown rules), both packages' icons on light and
# dark tiles beside Dify's "installed" check, and the trigger's subscription form, node and
# output variables, all rendered by headless Chromium in tests/it/dify_screens*.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/ensure-ui-tools.sh
STATEFUL_TOOL_SCREENSHOTS_DIR=docs/screenshots cargo test --locked --test it dify_screens:: -- --test-threads=1
ls -l docs/screenshots
