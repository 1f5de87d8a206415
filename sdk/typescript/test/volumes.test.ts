import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConflictError, InvalidArgumentError, IronClawSandbox, NotFoundError, Volumes } from '../src/index.js';
import { daemonPerFile } from './helpers/daemon.js';

const srv = daemonPerFile();

const root = process.getuid?.() === 0;

test('a volume keeps its files across sandboxes, one sandbox at a time', { skip: !root && 'volumes need a daemon running as root' }, async () => {
  const conn = srv.conn;
  const v = await Volumes.create('sdk-notes', { ...conn, size: '32M' });
  assert.equal(v.name, 'sdk-notes');
  assert.equal(v.sizeBytes, 32 << 20);
  await assert.rejects(Volumes.create('Bad Name', { ...conn, size: '32M' }), InvalidArgumentError);

  const volumes = [{ name: 'sdk-notes', path: '/workspace/notes' }];
  const first = await IronClawSandbox.create({ ...conn, volumes });
  await first.writeFile('/workspace/notes/a.txt', 'kept');
  assert.equal((await Volumes.get('sdk-notes', conn)).sandbox, first.id);
  await assert.rejects(IronClawSandbox.create({ ...conn, volumes }), ConflictError);
  await assert.rejects(Volumes.delete('sdk-notes', conn), ConflictError);
  await first.destroy();

  const second = await IronClawSandbox.create({ ...conn, volumes });
  assert.equal(await second.readTextFile('/workspace/notes/a.txt'), 'kept');
  await second.destroy();

  assert.deepEqual(
    (await Volumes.list(conn)).map((x) => [x.name, x.sandbox]),
    [['sdk-notes', undefined]],
  );
  await Volumes.delete('sdk-notes', conn);
  await assert.rejects(Volumes.get('sdk-notes', conn), NotFoundError);
});
