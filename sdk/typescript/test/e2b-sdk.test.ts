/**
 * The official `e2b` SDK (npm `e2b`) against a real daemon's E2B-compatible API under /e2b: sandbox lifecycle
 * (create with metadata, getInfo, list with a query and pages, setTimeout, pause and connect-to-resume, kill),
 * commands (foreground, failing, background with stdin, kill, list, connect, output callbacks), a PTY, the
 * filesystem (write/read in every form, list, exists, makeDir, rename, remove, getInfo, watchDir) and signed
 * file URLs. Every effect is checked through IronClaw's native API too, and the commands through its audit log.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { TestContext } from 'node:test';
import { CommandExitError, FileType, FilesystemEventType, Sandbox, SandboxNotFoundError } from 'e2b';
import type { ConnectionOpts, FilesystemEvent } from 'e2b';
import { IronClawSandbox } from '../src/index.js';
import { daemonPerFile, eventually } from './helpers/daemon.js';

const srv = daemonPerFile();

/** How a client reaches IronClaw's E2B API: the /e2b prefix for both the API and envd, and the daemon's e2b.key. */
function e2bOpts(): Pick<ConnectionOpts, 'apiUrl' | 'sandboxUrl' | 'apiKey'> {
  const apiKey = readFileSync(join(srv.d.dataDir, 'e2b.key'), 'utf8').trim();
  return { apiUrl: `${srv.d.addr}/e2b`, sandboxUrl: `${srv.d.addr}/e2b`, apiKey };
}

/** A new E2B sandbox (options style), killed after the test. */
async function create(t: TestContext, metadata: Record<string, string> = {}): Promise<Sandbox> {
  const sb = await Sandbox.create({ ...e2bOpts(), metadata });
  t.after(() => Sandbox.kill(sb.sandboxId, e2bOpts()).catch(() => undefined));
  return sb;
}

/** The same sandbox through IronClaw's own SDK (the E2B sandbox id is the native id). */
function native(sb: Sandbox): IronClawSandbox {
  return new IronClawSandbox({ ...srv.conn, id: sb.sandboxId });
}

const enc = new TextEncoder();
const dec = new TextDecoder();

describe('e2b SDK: sandbox lifecycle', () => {
  test('create with metadata; getInfo; the sandbox is a native IronClaw sandbox; env-style configuration', async (t) => {
    const before = Date.now();
    const sb = await create(t, { suite: 'lifecycle', who: 'e2b-sdk' });
    assert.match(sb.sandboxId, /^sbx-/);
    const info = await sb.getInfo();
    assert.equal(info.sandboxId, sb.sandboxId);
    assert.equal(info.state, 'running');
    assert.deepEqual(info.metadata, { suite: 'lifecycle', who: 'e2b-sdk' });
    assert.match(info.envdVersion, /^\d+\.\d+\.\d+/);
    assert.ok(info.startedAt.getTime() >= before - 5_000 && info.startedAt.getTime() <= Date.now() + 5_000, `startedAt ${info.startedAt.toISOString()}`);
    assert.ok(info.endAt.getTime() > info.startedAt.getTime());
    assert.ok(typeof info.cpuCount === 'number' && typeof info.memoryMB === 'number', JSON.stringify(info));

    const n = await srv.d.agent('GET', `/v1/sandboxes/${sb.sandboxId}`);
    assert.equal(n.status, 200, JSON.stringify(n.body));
    assert.equal(await sb.isRunning(), true);

    // The same, configured by the environment alone (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY).
    const saved = { ...process.env };
    try {
      const o = e2bOpts();
      process.env['E2B_API_URL'] = o.apiUrl;
      process.env['E2B_SANDBOX_URL'] = o.sandboxUrl;
      process.env['E2B_API_KEY'] = o.apiKey;
      const env = await Sandbox.create();
      try {
        const r = await env.commands.run('echo from-env; pwd; id -u');
        assert.equal(r.stdout, 'from-env\n/workspace\n65532\n');
        assert.equal((await Sandbox.getInfo(env.sandboxId)).templateId.length > 0, true);
      } finally {
        assert.equal(await env.kill(), true);
      }
    } finally {
      for (const k of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
        if (saved[k] === undefined) delete process.env[k];
        else process.env[k] = saved[k];
      }
    }
  });

  test('list: a metadata and state query, one sandbox a page through the paginator', async (t) => {
    const tag = `list-${process.pid}`;
    const a = await create(t, { tag });
    const b = await create(t, { tag });
    await create(t, { tag: 'someone-else' });
    const pager = Sandbox.list({ ...e2bOpts(), query: { metadata: { tag }, state: ['running'] }, limit: 1 });
    const seen: string[] = [];
    for (let pages = 0; pager.hasNext; pages++) {
      assert.ok(pages < 5, 'the paginator ends');
      const items = await pager.nextItems();
      assert.ok(items.length <= 1, `limit 1, got ${items.length}`);
      for (const it of items) {
        assert.deepEqual(it.metadata, { tag });
        assert.equal(it.state, 'running');
        seen.push(it.sandboxId);
      }
    }
    assert.deepEqual(seen.sort(), [a.sandboxId, b.sandboxId].sort());

    const paused = await Sandbox.list({ ...e2bOpts(), query: { metadata: { tag }, state: ['paused'] } }).nextItems();
    assert.deepEqual(paused, []);
  });

  test('create: envs reach every command, timeoutMs sets endAt, an unknown template is refused', async (t) => {
    const sb = await Sandbox.create('base', { ...e2bOpts(), envs: { FROM_CREATE: 'create-env' }, timeoutMs: 30_000 });
    t.after(() => Sandbox.kill(sb.sandboxId, e2bOpts()).catch(() => undefined));
    assert.equal((await sb.commands.run('echo "$FROM_CREATE"')).stdout, 'create-env\n');
    const bg = await sb.commands.run('echo "bg $FROM_CREATE"', { background: true });
    assert.equal((await bg.wait()).stdout, 'bg create-env\n');
    assert.equal((await sb.commands.run('echo "$FROM_CREATE"', { envs: { FROM_CREATE: 'per-command' } })).stdout, 'per-command\n');
    const end = (await sb.getInfo()).endAt.getTime() - Date.now();
    assert.ok(end > 20_000 && end <= 35_000, `endAt in ${end} ms`);
    await assert.rejects(Sandbox.create('no-such-template', e2bOpts()));
  });

  test('setTimeout moves endAt; getMetrics answers', async (t) => {
    const sb = await create(t);
    await sb.setTimeout(120_000);
    const end = (await sb.getInfo()).endAt.getTime() - Date.now();
    assert.ok(end > 90_000 && end <= 125_000, `endAt in ${end} ms`);
    await sb.setTimeout(600_000);
    const later = (await sb.getInfo()).endAt.getTime() - Date.now();
    assert.ok(later > 500_000 && later <= 605_000, `endAt in ${later} ms`);

    const metrics = await sb.getMetrics();
    assert.ok(Array.isArray(metrics));
    for (const m of metrics) assert.ok(m.timestamp instanceof Date && typeof m.cpuCount === 'number', JSON.stringify(m));
  });

  test('pause, then Sandbox.connect resumes it with its files', async (t) => {
    const sb = await create(t, { suite: 'pause' });
    await sb.files.write('kept.txt', 'across the pause');
    assert.equal(await sb.pause(), true);
    assert.equal((await Sandbox.getInfo(sb.sandboxId, e2bOpts())).state, 'paused');
    const listed = await Sandbox.list({ ...e2bOpts(), query: { metadata: { suite: 'pause' }, state: ['paused'] } }).nextItems();
    assert.deepEqual(listed.map((s) => s.sandboxId), [sb.sandboxId]);
    assert.equal((await native(sb).getInfo()).state, 'paused');

    const back = await Sandbox.connect(sb.sandboxId, e2bOpts());
    assert.equal(back.sandboxId, sb.sandboxId);
    assert.equal((await back.getInfo()).state, 'running');
    assert.equal(await back.files.read('kept.txt'), 'across the pause');
    assert.equal((await back.commands.run('cat /workspace/kept.txt')).stdout, 'across the pause');
  });

  test('kill: true, then false; a killed sandbox is not found', async () => {
    const sb = await Sandbox.create({ ...e2bOpts() });
    assert.equal(await sb.kill(), true);
    assert.equal(await Sandbox.kill(sb.sandboxId, e2bOpts()), false);
    await assert.rejects(Sandbox.connect(sb.sandboxId, e2bOpts()), SandboxNotFoundError);
    await assert.rejects(Sandbox.getInfo(sb.sandboxId, e2bOpts()), SandboxNotFoundError);
    const n = await srv.d.agent('GET', `/v1/sandboxes/${sb.sandboxId}`);
    assert.notEqual(n.body?.state, 'running', JSON.stringify(n.body));
  });

  test('a wrong API key is refused', async () => {
    const bad = { ...e2bOpts(), apiKey: 'e2b_' + '0'.repeat(40) };
    await assert.rejects(Sandbox.create(bad), (err: unknown) => err instanceof Error && /401|unauthori|invalid/i.test(String(err)));
  });
});

describe('e2b SDK: commands', () => {
  test('run: stdout, exitCode, cwd /workspace, uid 65532, envs, callbacks; a failing command is a CommandExitError', async (t) => {
    const sb = await create(t);
    const r = await sb.commands.run('echo hi');
    assert.equal(r.stdout, 'hi\n');
    assert.equal(r.stderr, '');
    assert.equal(r.exitCode, 0);

    const who = await sb.commands.run('pwd; id -u; echo "$GREETING"', { envs: { GREETING: 'hello e2b' } });
    assert.equal(who.stdout, '/workspace\n65532\nhello e2b\n');
    // E2B's users: 'root' and 'user' are accepted and both run as the sandbox's uid (IronClaw never grants root)
    assert.equal((await sb.commands.run('id -u', { user: 'root' })).stdout, '65532\n');
    assert.equal((await sb.commands.run('id -u', { user: 'user' })).stdout, '65532\n');
    await sb.commands.run('mkdir -p sub');
    assert.equal((await sb.commands.run('pwd', { cwd: '/workspace/sub' })).stdout, '/workspace/sub\n');

    const out: string[] = [];
    const err: string[] = [];
    const both = await sb.commands.run('echo to-out; echo to-err >&2', { onStdout: (d) => void out.push(d), onStderr: (d) => void err.push(d) });
    assert.equal(out.join(''), 'to-out\n');
    assert.equal(err.join(''), 'to-err\n');
    assert.equal(both.stdout, 'to-out\n');
    assert.equal(both.stderr, 'to-err\n');

    await assert.rejects(sb.commands.run('echo partial; echo oops >&2; exit 3'), (e: unknown) => {
      assert.ok(e instanceof CommandExitError, String(e));
      assert.equal(e.exitCode, 3);
      assert.equal(e.stdout, 'partial\n');
      assert.equal(e.stderr, 'oops\n');
      return true;
    });
  });

  test('background: sendStdin by handle and by pid, closeStdin, wait', async (t) => {
    const sb = await create(t);
    const seen: string[] = [];
    const h = await sb.commands.run('cat; echo done', { background: true, stdin: true, onStdout: (d) => void seen.push(d) });
    assert.ok(h.pid > 0);
    await h.sendStdin('hello\n');
    await eventually(async () => seen.join('').includes('hello\n'));
    await sb.commands.sendStdin(h.pid, enc.encode('world\n'));
    await h.closeStdin();
    const res = await h.wait();
    assert.equal(res.exitCode, 0);
    assert.equal(res.stdout, 'hello\nworld\ndone\n');
    assert.equal(h.exitCode, 0);
  });

  test('background: list, connect, kill by pid and by handle', async (t) => {
    const sb = await create(t);
    const a = await sb.commands.run('sleep 300 # e2b-list-a', { background: true });
    const b = await sb.commands.run('sleep 300 # e2b-list-b', { background: true });
    const procs = await sb.commands.list();
    const pa = procs.find((p) => p.pid === a.pid);
    assert.ok(pa, JSON.stringify(procs));
    assert.ok([pa.cmd, ...pa.args].join(' ').includes('sleep 300 # e2b-list-a'), JSON.stringify(pa));
    assert.ok(procs.some((p) => p.pid === b.pid));

    // connect to a running command from a second handle; both see its end
    const again = await sb.commands.connect(a.pid);
    assert.equal(again.pid, a.pid);
    assert.equal(await sb.commands.kill(a.pid), true);
    await assert.rejects(again.wait(), CommandExitError);
    await assert.rejects(a.wait(), CommandExitError);

    assert.equal(await b.kill(), true);
    await assert.rejects(b.wait(), CommandExitError);
    await eventually(async () => !(await sb.commands.list()).some((p) => p.pid === a.pid || p.pid === b.pid));
    assert.equal(await sb.commands.kill(a.pid), false, 'killing an ended process is false');
    await assert.rejects(sb.commands.connect(999_999));
  });

  test('connect streams output written after it attached', async (t) => {
    const sb = await create(t);
    const h = await sb.commands.run('read line; echo "got $line"', { background: true, stdin: true });
    const seen: string[] = [];
    const c = await sb.commands.connect(h.pid, { onStdout: (d) => void seen.push(d) });
    await sb.commands.sendStdin(h.pid, 'x1\n');
    const r = await c.wait();
    assert.equal(r.exitCode, 0);
    assert.equal(seen.join(''), 'got x1\n');
  });

  test('pty: create, sendInput, resize, kill', async (t) => {
    const sb = await create(t);
    let screen = '';
    const pty = await sb.pty.create({ cols: 80, rows: 24, onData: (d) => void (screen += dec.decode(d, { stream: true })) });
    assert.ok(pty.pid > 0);
    await sb.pty.sendInput(pty.pid, enc.encode('stty size; echo MARK-$((40+2))\n'));
    await eventually(async () => screen.includes('24 80') && screen.includes('MARK-42'));
    await sb.pty.resize(pty.pid, { cols: 100, rows: 30 });
    await sb.pty.sendInput(pty.pid, enc.encode('stty size\n'));
    await eventually(async () => screen.includes('30 100'));
    assert.equal(await sb.pty.kill(pty.pid), true);
    await pty.wait().catch((e: unknown) => assert.ok(e instanceof CommandExitError, String(e)));
  });

  test('the audit log holds the exec records of these commands', async (t) => {
    const sb = await create(t);
    await sb.commands.run('echo e2b-audit-marker-fg');
    const bg = await sb.commands.run('echo e2b-audit-marker-bg', { background: true });
    await bg.wait();
    const records = await eventually(async () => {
      const all = await auditRecords();
      const mine = all.filter((r) => r.session === sb.sandboxId);
      const intents = mine.filter((r) => /^sandbox\.(exec|process\.spawn)\.intent$/.test(r.kind)).map((r) => JSON.stringify(r.data));
      // each started command has its outcome too (written when it exited, maybe after the client saw the end)
      const ends = mine.filter((r) => /^sandbox\.(exec|process\.spawn)$/.test(r.kind));
      const both = intents.some((t) => t.includes('e2b-audit-marker-fg')) && intents.some((t) => t.includes('e2b-audit-marker-bg'));
      return both && ends.length >= 2 ? all : undefined;
    }).catch(async (e: unknown) => {
      const mine = (await auditRecords()).filter((r) => r.session === sb.sandboxId);
      throw new Error(`${String(e)}; this sandbox's records: ${JSON.stringify(mine.map((r) => [r.kind, r.data]))}`);
    });
    const create_ = records.find((r) => r.session === sb.sandboxId && r.kind === 'sandbox.create');
    assert.ok(create_, 'the E2B create is a native sandbox.create');
    const v = await srv.d.operator('GET', '/v1/audit/verify');
    assert.equal(v.status, 200);
    assert.equal(v.body.ok, true, JSON.stringify(v.body));
  });
});

interface AuditRecord {
  seq: number;
  session?: string;
  kind: string;
  data?: unknown;
}

/** Every audit record, read page by page with the operator token. */
async function auditRecords(): Promise<AuditRecord[]> {
  const out: AuditRecord[] = [];
  let after = 0;
  for (;;) {
    const r = await srv.d.operator('GET', `/v1/audit?after=${after}&limit=1000`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const page = (r.body.records ?? []) as AuditRecord[];
    out.push(...page);
    if (page.length < 1000) return out;
    after = page[page.length - 1]!.seq;
  }
}

describe('e2b SDK: filesystem', () => {
  test('write (string, ArrayBuffer, Blob, many) and read (text, bytes, blob); seen natively', async (t) => {
    const sb = await create(t);
    const w = await sb.files.write('/workspace/fs/a.txt', 'alpha');
    assert.equal(w.path, '/workspace/fs/a.txt');
    assert.equal(w.name, 'a.txt');
    const bytes = new Uint8Array([0, 1, 2, 250, 255]);
    await sb.files.write('fs/b.bin', bytes.slice().buffer);
    await sb.files.write('fs/c.txt', new Blob(['from a blob']));
    const many = await sb.files.write([
      { path: 'fs/m1.txt', data: 'one' },
      { path: 'fs/m2.txt', data: 'two' },
    ]);
    assert.deepEqual(many.map((m) => m.name).sort(), ['m1.txt', 'm2.txt']);

    assert.equal(await sb.files.read('/workspace/fs/a.txt'), 'alpha');
    assert.equal(await sb.files.read('fs/a.txt', { format: 'text' }), 'alpha', 'relative paths resolve against /workspace');
    assert.deepEqual(await sb.files.read('fs/b.bin', { format: 'bytes' }), bytes);
    assert.equal(await (await sb.files.read('fs/c.txt', { format: 'blob' })).text(), 'from a blob');

    const n = native(sb);
    assert.equal(await n.readTextFile('/workspace/fs/a.txt'), 'alpha');
    assert.deepEqual(await n.readFile('/workspace/fs/b.bin'), bytes);
    assert.equal(await n.readTextFile('/workspace/fs/m2.txt'), 'two');
    await n.writeFile('/workspace/fs/native.txt', 'written natively');
    assert.equal(await sb.files.read('fs/native.txt'), 'written natively');

    await assert.rejects(sb.files.read('fs/missing.txt'), (e: unknown) => e instanceof Error && e.name === 'FileNotFoundError');
  });

  test('list, exists, makeDir, rename, remove, getInfo', async (t) => {
    const sb = await create(t);
    assert.equal(await sb.files.makeDir('tree/deep/er'), true);
    assert.equal(await sb.files.makeDir('tree/deep/er'), false, 'an existing directory is false');
    await sb.files.write('tree/f.txt', '12345');
    await sb.files.write('tree/deep/g.txt', 'g');

    const top = await sb.files.list('tree');
    assert.deepEqual(
      top.map((e) => [e.name, e.type, e.path]).sort(),
      [
        ['deep', FileType.DIR, '/workspace/tree/deep'],
        ['f.txt', FileType.FILE, '/workspace/tree/f.txt'],
      ],
    );
    const deep = await sb.files.list('/workspace/tree', { depth: 3 });
    assert.deepEqual(deep.map((e) => e.path).sort(), [
      '/workspace/tree/deep',
      '/workspace/tree/deep/er',
      '/workspace/tree/deep/g.txt',
      '/workspace/tree/f.txt',
    ]);

    const info = await sb.files.getInfo('tree/f.txt');
    assert.equal(info.name, 'f.txt');
    assert.equal(info.type, FileType.FILE);
    assert.equal(info.path, '/workspace/tree/f.txt');
    assert.equal(info.size, 5);
    assert.ok(info.modifiedTime instanceof Date);
    assert.equal((await sb.files.getInfo('/workspace/tree')).type, FileType.DIR);

    assert.equal(await sb.files.exists('tree/f.txt'), true);
    assert.equal(await sb.files.exists('tree/nope'), false);

    const moved = await sb.files.rename('tree/f.txt', 'tree/deep/moved.txt');
    assert.equal(moved.path, '/workspace/tree/deep/moved.txt');
    assert.equal(await sb.files.exists('tree/f.txt'), false);
    assert.equal(await native(sb).readTextFile('/workspace/tree/deep/moved.txt'), '12345');

    await sb.files.remove('tree/deep');
    assert.equal(await sb.files.exists('tree/deep'), false);
    assert.deepEqual((await sb.files.list('tree')).map((e) => e.name), []);
    assert.equal((await sb.commands.run('ls -A /workspace/tree | wc -l')).stdout.trim(), '0');
  });

  test('watchDir: recursive events for creates, writes, renames and removes', async (t) => {
    const sb = await create(t);
    await sb.files.makeDir('watched/sub');
    await sb.files.write('watched/old.txt', 'old');
    const events: FilesystemEvent[] = [];
    const w = await sb.files.watchDir('watched', (e) => void events.push(e), { recursive: true });
    const has = (name: string, ...types: FilesystemEventType[]) => events.some((e) => e.name === name && types.includes(e.type));
    // One change at a time, each awaited: a watcher that polls may fold changes made within one interval.
    const step = async (what: string, act: () => Promise<unknown>, seen: () => boolean) => {
      await act();
      await eventually(async () => seen(), 10_000).catch((e: unknown) => {
        throw new Error(`${what}: ${String(e)}; events: ${JSON.stringify(events)}`);
      });
    };
    try {
      await step('create', () => sb.files.write('watched/top.txt', 'x'), () => has('top.txt', FilesystemEventType.CREATE));
      await step('create in a subdirectory', () => sb.files.write('watched/sub/inner.txt', 'y'), () =>
        has('sub/inner.txt', FilesystemEventType.CREATE));
      await step('write', () => sb.commands.run('echo more >> watched/old.txt'), () => has('old.txt', FilesystemEventType.WRITE));
      await step('remove', () => sb.files.remove('watched/sub/inner.txt'), () => has('sub/inner.txt', FilesystemEventType.REMOVE));
      await step('rename', () => sb.files.rename('watched/top.txt', 'watched/renamed.txt'), () =>
        has('top.txt', FilesystemEventType.RENAME, FilesystemEventType.REMOVE) && has('renamed.txt', FilesystemEventType.CREATE, FilesystemEventType.RENAME));
    } finally {
      await w.stop();
    }
    const n = events.length;
    await sb.files.write('watched/after-stop.txt', 'z');
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(events.length, n, 'no events after stop');
  });

  test('signed downloadUrl and uploadUrl work with plain fetch (no access token)', async (t) => {
    const sb = await create(t);
    await sb.files.write('signed/hello.txt', 'signed content');
    // The SDK builds these URLs as new URL('/files', sandboxUrl): neither the /e2b prefix nor the sandbox id is
    // in them (E2B's own hosts carry the id in the Host name). A proxy in front of the daemon adds them back,
    // as this fetch does; the signature is all the authentication the request carries.
    const send = (u: URL, init: RequestInit = {}) =>
      fetch(`${srv.d.addr}/e2b${u.pathname}${u.search}`, {
        ...init,
        headers: { 'E2b-Sandbox-Id': sb.sandboxId, 'E2b-Sandbox-Port': '49983' },
      });
    const down = new URL(await sb.downloadUrl('/workspace/signed/hello.txt', { useSignatureExpiration: 60 }));
    assert.equal(down.pathname, '/files');
    assert.ok(down.searchParams.get('signature')?.startsWith('v1_'));
    assert.ok(Number(down.searchParams.get('signature_expiration')) > Date.now() / 1000);
    const got = await send(down);
    assert.equal(got.status, 200, await got.clone().text());
    assert.equal(await got.text(), 'signed content');

    const up = new URL(await sb.uploadUrl('/workspace/signed/up.txt'));
    const form = new FormData();
    form.append('file', new Blob(['uploaded through a signed url']), 'up.txt');
    const put = await send(up, { method: 'POST', body: form });
    assert.equal(put.status, 200, await put.clone().text());
    assert.equal(await native(sb).readTextFile('/workspace/signed/up.txt'), 'uploaded through a signed url');

    // a tampered signature, or a read signature used to write, is refused
    const bad = new URL(down);
    bad.searchParams.set('signature', 'v1_' + 'A'.repeat(43));
    assert.equal((await send(bad)).status, 401);
    const wrongOp = new URL(up);
    wrongOp.searchParams.set('signature', down.searchParams.get('signature')!);
    assert.equal((await send(wrongOp, { method: 'POST', body: form })).status, 401);
  });
});
