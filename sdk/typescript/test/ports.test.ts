import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ForbiddenError, InvalidArgumentError, IronClawSandbox } from '../src/index.js';
import { daemonPerFile } from './helpers/daemon.js';

const srv = daemonPerFile(); // the default policy: ports.inbound off

test('getPortUrl: refused while the policy keeps inbound ports off; a bad port never leaves the client', async () => {
  const conn = srv.conn;
  const sbx = new IronClawSandbox({ ...conn, ports: [3000] });
  try {
    await assert.rejects(sbx.getPortUrl(0), InvalidArgumentError);
    await assert.rejects(sbx.getPortUrl(3000), (e: unknown) => e instanceof ForbiddenError && /ports.inbound/.test(e.message));
  } finally {
    await sbx.destroy().catch(() => undefined);
  }
});
