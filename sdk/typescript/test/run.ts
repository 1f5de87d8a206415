/**
 * `npm test`: builds the ironclaw binary once (unless $IRONCLAW_BIN is set), then runs every
 * dist/test/*.test.js with node's test runner, each file against its own `ironclaw serve`.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ironclawBin } from './helpers/daemon.js';

const here = dirname(fileURLToPath(import.meta.url));
const started = Date.now();
const bin = ironclawBin();
console.log(`# ironclaw binary: ${bin} (${Date.now() - started} ms)`);
const only = process.argv.slice(2);
const files = readdirSync(here)
  .filter((f) => f.endsWith('.test.js'))
  .filter((f) => only.length === 0 || only.some((o) => f.includes(o)))
  .sort()
  .map((f) => join(here, f));
const r = spawnSync(process.execPath, ['--test', '--test-concurrency=4', '--test-timeout=60000', ...files], {
  stdio: 'inherit',
  env: { ...process.env, IRONCLAW_BIN: bin, MASTRA_TELEMETRY_DISABLED: '1' },
});
process.exit(r.status ?? 1);
