import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { IronClawSandbox } from '../src/index.js';
import { startDaemon } from './helpers/daemon.js';
import type { Daemon } from './helpers/daemon.js';

let d: Daemon;
let sbx: IronClawSandbox;

before(async () => {
  d = await startDaemon();
  sbx = new IronClawSandbox({ addr: d.addr, token: d.agentToken, labels: { suite: 'pause' } });
});
after(async () => {
  await sbx?.destroy().catch(() => undefined);
  await d?.stop();
});

test('pause freezes, the next command resumes, resume thaws', async () => {
  await sbx.writeFile('kept.txt', 'kept');
  assert.equal((await sbx.pause()).state, 'paused');
  assert.equal((await sbx.getInfo()).state, 'paused');
  const again = await IronClawSandbox.connect(sbx.id!, { addr: d.addr, token: d.agentToken });
  assert.equal((await again.run('cat kept.txt')).stdout, 'kept');
  assert.equal((await sbx.getInfo()).state, 'running');
  assert.equal((await sbx.pause()).state, 'paused');
  assert.equal((await sbx.resume()).state, 'running');
});

test('snapshot and fork', async () => {
  await sbx.writeFile('dir/forked.txt', 'from the snapshot');
  const snap = await sbx.snapshot();
  assert.match(snap.id, /^snap-[0-9a-f]+$/);
  assert.equal(snap.sandbox, sbx.id);
  assert.ok(snap.files >= 2);
  const fork = new IronClawSandbox({ addr: d.addr, token: d.agentToken, snapshot: snap.id });
  try {
    assert.equal(await fork.readTextFile('/workspace/dir/forked.txt'), 'from the snapshot');
  } finally {
    await fork.destroy();
  }
});
