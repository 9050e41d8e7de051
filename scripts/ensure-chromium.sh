#!/usr/bin/env bash
# Headless Chromium for the real-browser tests: Debian's package (playwright's own download fails offline).
set -eu
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
    exit 0
fi
if [ "${CI:-}" = "true" ]; then
    echo "ensure-chromium: /usr/bin/chromium is missing and cannot be installed (not root or no apt-get)" >&2
    exit 1
fi
echo "ensure-chromium: /usr/bin/chromium is missing; browser tests will be skipped (install Debian's chromium)" >&2
