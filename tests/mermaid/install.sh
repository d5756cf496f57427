#!/usr/bin/env bash
# Installs what tests/test_mermaid_render.py needs to render Mermaid for real: Debian's chromium (puppeteer's
# own browser download is not used: puppeteer-core drives /usr/bin/chromium) and the npm packages of
# tests/mermaid/package.json (mermaid 11, puppeteer-core) into tests/mermaid/node_modules (git-ignored).
# Without them the test skips and says which is missing. Needs root for apt-get, and node/npm.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x /usr/bin/chromium ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi
command -v npm >/dev/null || { echo "npm not found: apt-get install -y nodejs npm" >&2; exit 1; }
PUPPETEER_SKIP_DOWNLOAD=1 npm install --no-audit --no-fund
