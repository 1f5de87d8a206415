import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ForbiddenError, InvalidArgumentError, IronClawSandbox } from '../src/index.js';
import { startDaemon } from './helpers/daemon.js';
import type { Daemon } from './helpers/daemon.js';

let d: Daemon;
before(async () => {
  d = await startDaemon(); // the default policy: ports.inbound off
});
after(async () => {
  await d?.stop();
});

test('getPortUrl: refused while the policy keeps inbound ports off; a bad port never leaves the client', async () => {
  const conn = { addr: d.addr, token: d.agentToken };
  const sbx = new IronClawSandbox({ ...conn, ports: [3000] });
  try {
    await assert.rejects(sbx.getPortUrl(0), InvalidArgumentError);
    await assert.rejects(sbx.getPortUrl(3000), (e: unknown) => e instanceof ForbiddenError && /ports.inbound/.test(e.message));
  } finally {
    await sbx.destroy().catch(() => undefined);
  }
});
