#!/bin/sh
# The SDK's type check (tsc --noEmit, `npm run typecheck`), for `make lint`.
# Installs sdk/typescript/node_modules with `npm ci` only when they are
# missing or older than package-lock.json, so a second lint costs seconds.
set -eu
cd "$(dirname "$0")/../sdk/typescript"
lock=node_modules/.package-lock.json
if [ ! -f "$lock" ] || [ -z "$(find "$lock" -newer package-lock.json)" ]; then
	npm ci --no-audit --no-fund --loglevel=error
fi
npm run --silent typecheck
