import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IronClawSandbox } from '../src/index.js';
import { daemonPerFile } from './helpers/daemon.js';

let sbx: IronClawSandbox;
const srv = daemonPerFile({}, (s) => {
  sbx = new IronClawSandbox({ ...s.conn, labels: { suite: 'pause' } });
  s.cleanup.push(() => sbx.destroy());
});

test('pause freezes, the next command resumes, resume thaws', async () => {
  await sbx.writeFile('kept.txt', 'kept');
  assert.equal((await sbx.pause()).state, 'paused');
  assert.equal((await sbx.getInfo()).state, 'paused');
  const again = await IronClawSandbox.connect(sbx.id!, srv.conn);
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
  const fork = new IronClawSandbox({ ...srv.conn, snapshot: snap.id });
  try {
    assert.equal(await fork.readTextFile('/workspace/dir/forked.txt'), 'from the snapshot');
  } finally {
    await fork.destroy();
  }
});
