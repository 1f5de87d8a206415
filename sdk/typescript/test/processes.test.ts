import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AbortError, InvalidArgumentError, IronClawSandbox, LimitExceededError, NotFoundError } from '../src/index.js';
import { daemonPerFile } from './helpers/daemon.js';

let sbx: IronClawSandbox;
const srv = daemonPerFile({}, async (s) => {
  sbx = await IronClawSandbox.create({ ...s.conn, labels: { suite: 'processes' } });
  s.cleanup.push(() => sbx.destroy());
});

async function until<T>(what: string, f: () => Promise<T | undefined>): Promise<T> {
  const end = Date.now() + 10_000;
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('processes', () => {
  test('spawn, output without follow, list by tag, reattach from another client, kill', async () => {
    const h = await sbx.processes.spawn('echo a; echo b >&2; sleep 30', { tag: 'srv' });
    assert.ok(h.pid >= 1);
    assert.equal(h.tag, 'srv');
    assert.equal(h.state, 'running');
    assert.ok(h.osPid > 1);
    const first = await until('output', async () => {
      const o = await sbx.processes.output(h.pid);
      return o.stdout === 'a\n' && o.stderr === 'b\n' ? o : undefined;
    });
    assert.equal(first.offset, 4);
    assert.equal(first.state, 'running');
    assert.equal(first.exitCode, undefined);

    const listed = await sbx.processes.list({ tag: 'srv' });
    assert.deepEqual(
      listed.map((p) => p.pid),
      [h.pid],
    );
    assert.deepEqual(await sbx.processes.list({ tag: 'nope' }), []);

    // Another client (a restart) reattaches by id and follows from where the first stopped.
    const again = await IronClawSandbox.connect(sbx.id!, srv.conn);
    const seen: string[] = [];
    const follow = again.processes.output(h.pid, { offset: first.offset, follow: true, onStdout: (t) => seen.push(t) });
    await new Promise((r) => setTimeout(r, 100));
    // KILL keeps it listed (exited), so the follower ends with its exit however late it attached.
    await sbx.processes.signal(h.pid, 'KILL');
    const end = await follow;
    assert.equal(end.state, 'exited');
    assert.equal(end.exitCode, 137);
    assert.equal(end.offset, 4);
    assert.equal(end.stdout, '');
    assert.deepEqual(seen, []);
    const killed = await sbx.processes.kill(h.pid);
    assert.equal(killed.exitCode, 137);
    await assert.rejects(sbx.processes.get(h.pid), NotFoundError);
  });

  test('stdin round trip with cat, closeStdin ends it', async () => {
    const h = await sbx.processes.spawn(['cat'], { stdin: true });
    assert.equal(h.stdin, true);
    await sbx.processes.sendStdin(h.pid, 'hello\n');
    await until('the echo', async () => ((await sbx.processes.output(h.pid)).stdout === 'hello\n' ? true : undefined));
    await sbx.processes.sendStdin(h.pid, new TextEncoder().encode('bytes\n'));
    await sbx.processes.closeStdin(h.pid);
    const done = await sbx.processes.wait(h.pid);
    assert.equal(done.exitCode, 0);
    assert.equal(done.stdin, false);
    assert.equal((await sbx.processes.output(h.pid)).stdout, 'hello\nbytes\n');
  });

  test('signal TERM gives 143; a bad signal is refused here', async () => {
    const h = await sbx.processes.spawn('sleep 30');
    await assert.rejects(sbx.processes.signal(h.pid, 'STOP' as never), InvalidArgumentError);
    await sbx.processes.signal(h.pid, 'TERM');
    const done = await sbx.processes.wait(h.pid);
    assert.equal(done.state, 'exited');
    assert.equal(done.exitCode, 143);
    assert.ok(done.endedAt instanceof Date);
  });

  test('a follow is aborted by its signal; the process goes on', async () => {
    const h = await sbx.processes.spawn('sleep 30');
    const ctl = new AbortController();
    const p = sbx.processes.output(h.pid, { follow: true, signal: ctl.signal });
    setTimeout(() => ctl.abort(), 100);
    await assert.rejects(p, AbortError);
    assert.equal((await sbx.processes.get(h.pid)).state, 'running');
    await sbx.processes.kill(h.pid);
  });

  test('the ring keeps the newest output and says how much it dropped', async () => {
    const h = await sbx.processes.spawn("head -c 1100000 /dev/zero | tr '\\0' x; echo; echo tail");
    const done = await sbx.processes.wait(h.pid);
    assert.equal(done.offset, 1100006);
    assert.ok(done.dropped > 1100006 - (1 << 20));
    let told = 0;
    const o = await sbx.processes.output(h.pid, { onDropped: (n) => (told += n) });
    assert.equal(o.dropped, done.dropped);
    assert.equal(told, done.dropped);
    assert.ok(o.stdout.endsWith('x\ntail\n'));
    assert.equal(o.stdout.length, 1100006 - done.dropped);
    assert.equal(o.exitCode, 0);
    const rest = await sbx.processes.output(h.pid, { offset: 1100001 });
    assert.equal(rest.stdout, 'tail\n');
  });

  test('the per-sandbox cap is a LimitExceededError', async () => {
    const other = await IronClawSandbox.create(srv.conn);
    try {
      const started = [];
      for (let i = 0; i < 32; i++) started.push(await other.processes.spawn('sleep 30'));
      await assert.rejects(other.processes.spawn('sleep 30'), (err: unknown) => {
        assert.ok(err instanceof LimitExceededError);
        assert.match((err as Error).message, /32 processes/);
        return true;
      });
      await other.processes.kill(started[0]!.pid);
      await other.processes.spawn('true');
    } finally {
      await other.destroy();
    }
  });

  test('timeoutMs: the daemon ends the process (137), with no client watching', async () => {
    const started = Date.now();
    const h = await sbx.processes.spawn('sleep 30', { timeoutMs: 300 });
    const done = await sbx.processes.wait(h.pid);
    assert.equal(done.exitCode, 137);
    assert.ok(Date.now() - started < 15_000);
    await assert.rejects(sbx.processes.spawn('true', { timeoutMs: -1 }), InvalidArgumentError);
  });

  test('bad handles are refused before any call', async () => {
    await assert.rejects(sbx.processes.get(0), InvalidArgumentError);
    await assert.rejects(sbx.processes.output(1, { offset: -1 }), InvalidArgumentError);
    await assert.rejects(sbx.processes.get(99999), NotFoundError);
  });
});
