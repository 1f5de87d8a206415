import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import {
  AbortError,
  ConflictError,
  ExecResult,
  InvalidArgumentError,
  IronClawSandbox,
  NotFoundError,
  SandboxError,
  UnauthorizedError,
  UnavailableError,
} from '../src/index.js';
import { daemonPerFile } from './helpers/daemon.js';

let sbx: IronClawSandbox;
const srv = daemonPerFile({}, (s) => {
  sbx = new IronClawSandbox({ ...s.conn, labels: { suite: 'core' } });
  s.cleanup.push(() => sbx.destroy());
});

describe('engage', () => {
  test('creates a running sandbox once; engage is idempotent', async () => {
    assert.equal(sbx.id, undefined);
    const [a, b] = await Promise.all([sbx.engage(), sbx.engage()]);
    assert.equal(a, sbx);
    assert.equal(b, sbx);
    assert.match(sbx.id!, /^sbx-[0-9a-f]+$/);
    assert.equal(sbx.info?.state, 'running');
    assert.deepEqual(sbx.info?.labels, { suite: 'core' });
    await sbx.engage();
    const listed = await IronClawSandbox.list({ ...srv.conn, labels: { suite: 'core' } });
    assert.deepEqual(
      listed.map((s) => s.id),
      [sbx.id],
    );
    assert.deepEqual(sbx.approvals, []);
  });

  test('reconnects by id and shares the sandbox state', async () => {
    await sbx.writeFile('shared.txt', 'from the first client');
    const again = await IronClawSandbox.connect(sbx.id!, srv.conn);
    assert.equal(again.id, sbx.id);
    assert.equal(await again.readTextFile('/workspace/shared.txt'), 'from the first client');
    assert.equal((await again.run('cat shared.txt')).stdout, 'from the first client');
  });

  test('addr without scheme, token from IRONCLAW_DATA_DIR', async () => {
    const saved = { ...process.env };
    try {
      delete process.env['IRONCLAW_API_TOKEN'];
      process.env['IRONCLAW_ADDR'] = srv.d.addr.replace(/^http:\/\//, '');
      process.env['IRONCLAW_DATA_DIR'] = srv.d.dataDir;
      const s = await IronClawSandbox.connect(sbx.id!);
      assert.equal(s.addr, srv.d.addr);
      assert.equal((await s.run('echo ok')).stdout, 'ok\n');
    } finally {
      process.env = saved;
    }
  });

  test('creates with env, limits, ttlMs and idleMs; the info is camelCase with Dates', async () => {
    const before = Date.now();
    const s = await IronClawSandbox.create({
      addr: srv.d.addr,
      token: srv.d.agentToken,
      env: { GREETING: 'hello' },
      limits: { memory: '256M', pids: 64, timeoutMs: 5_000, openFiles: 256 },
      ttlMs: 10 * 60_000,
      idleMs: 60_000,
    });
    try {
      const info = s.info!;
      assert.ok(info.createdAt instanceof Date && info.lastUsedAt instanceof Date);
      assert.ok(info.expiresAt instanceof Date);
      const ttl = info.expiresAt.getTime() - info.createdAt.getTime();
      assert.ok(Math.abs(ttl - 10 * 60_000) < 1000, `ttl ${ttl} ms`);
      assert.ok(info.createdAt.getTime() >= before - 1000);
      assert.equal(info.idleTimeoutMs, 60_000);
      assert.equal(info.endedAt, undefined);
      assert.equal('created_at' in info, false);
      const r = await s.run('echo $GREETING; ulimit -n');
      assert.equal(r.stdout, 'hello\n256\n');
    } finally {
      await s.destroy();
    }
  });

  test('the deprecated ttl, idle and limits.timeout still work', async () => {
    const s = await IronClawSandbox.create({
      addr: srv.d.addr,
      token: srv.d.agentToken,
      limits: { timeout: '400ms' },
      ttl: '10m',
      idle: 60_000,
    });
    try {
      assert.equal(s.info!.idleTimeoutMs, 60_000);
      assert.ok(s.info!.expiresAt instanceof Date);
      assert.equal((await s.run('sleep 5')).timedOut, true);
      assert.equal((await s.run('sleep 5', { timeout: '200ms' })).timedOut, true);
    } finally {
      await s.destroy();
    }
  });
});

describe('the first run of a handle not yet created', () => {
  /** A fetch that counts the calls it passes on; `oldDaemon` answers a create with a command as a daemon before them did. */
  function counting(oldDaemon = false): { fetch: typeof globalThis.fetch; calls: string[] } {
    const calls: string[] = [];
    const fetch: typeof globalThis.fetch = async (input, init) => {
      const url = new URL(String(input));
      const line = `${init?.method ?? 'GET'} ${url.pathname}`;
      calls.push(line);
      if (oldDaemon && line === 'POST /v1/sandboxes' && String(init?.body ?? '').includes('"exec"')) {
        const error = { code: 'invalid_argument', message: 'malformed JSON: json: unknown field "exec"' };
        return new Response(JSON.stringify({ error }), { status: 400, headers: { 'content-type': 'application/json' } });
      }
      return globalThis.fetch(input, init);
    };
    return { fetch, calls };
  }

  test('creates the sandbox and runs the command in one request', async () => {
    const c = counting();
    const s = new IronClawSandbox({ ...srv.conn, fetch: c.fetch, labels: { suite: 'core-first-run' } });
    try {
      const out: string[] = [];
      const r = await s.run('echo one; echo two >&2; cat; exit 4', { stdin: 'in', onStdout: (t) => out.push(t) });
      assert.equal(r.stdout, 'one\nin');
      assert.equal(r.stderr, 'two\n');
      assert.equal(r.exitCode, 4);
      assert.equal(out.join(''), 'one\nin');
      assert.deepEqual(c.calls, ['POST /v1/sandboxes']);
      assert.match(s.id!, /^sbx-[0-9a-f]+$/);
      assert.equal(s.info?.state, 'running');
      assert.deepEqual(s.info?.labels, { suite: 'core-first-run' });
      assert.equal((await s.run('cat /proc/self/cgroup >/dev/null; echo again')).stdout, 'again\n');
      assert.deepEqual(c.calls, ['POST /v1/sandboxes', `POST /v1/sandboxes/${s.id}/exec`]);
    } finally {
      await s.destroy();
    }
  });

  test('calls made while it runs share the one sandbox', async () => {
    const s = new IronClawSandbox({ ...srv.conn, labels: { suite: 'core-first-run-shared' } });
    try {
      const [a, b, e] = await Promise.all([s.run('sleep 0.2; echo a'), s.run('echo b'), s.engage()]);
      assert.equal(a.stdout, 'a\n');
      assert.equal(b.stdout, 'b\n');
      assert.equal(e, s);
      const listed = await IronClawSandbox.list({ ...srv.conn, labels: { suite: 'core-first-run-shared' } });
      assert.deepEqual(
        listed.map((x) => x.id),
        [s.id],
      );
    } finally {
      await s.destroy();
    }
  });

  test('a bad command creates nothing, and the next call creates the sandbox', async () => {
    const s = new IronClawSandbox({ ...srv.conn, labels: { suite: 'core-first-run-bad' } });
    try {
      await assert.rejects(s.run('echo x', { cwd: 'relative' }), InvalidArgumentError);
      assert.equal(s.id, undefined);
      const listed = await IronClawSandbox.list({ ...srv.conn, labels: { suite: 'core-first-run-bad' } });
      assert.equal(listed.length, 0);
      assert.equal((await s.run('echo ok')).stdout, 'ok\n');
      assert.match(s.id!, /^sbx-/);
    } finally {
      await s.destroy();
    }
  });

  test('a daemon that takes no command with the create: create, then run', async () => {
    const c = counting(true);
    const s = new IronClawSandbox({ ...srv.conn, fetch: c.fetch });
    try {
      assert.equal((await s.run('echo ok')).stdout, 'ok\n');
      assert.equal(c.calls.length, 3);
      assert.deepEqual(c.calls.slice(0, 2), ['POST /v1/sandboxes', 'POST /v1/sandboxes']);
      assert.equal(c.calls[2], `POST /v1/sandboxes/${s.id}/exec`);
    } finally {
      await s.destroy();
    }
  });
});

describe('run', () => {
  test('shell line: stdout, stderr, exit code', async () => {
    const r = await sbx.run('echo out; echo err >&2; exit 3');
    assert.ok(r instanceof ExecResult);
    assert.equal(r.stdout, 'out\n');
    assert.equal(r.stderr, 'err\n');
    assert.equal(r.exitCode, 3);
    assert.equal(r.ok, false);
    assert.equal(r.timedOut, false);
    assert.equal(r.truncated, false);
    assert.equal(r.oomKilled, false);
    assert.equal(typeof r.durationMs, 'number');
    assert.equal(r.toString(), 'out\n[stderr]\nerr\n[exit 3]');
  });

  test('argv, stdin, cwd, env', async () => {
    const r = await sbx.run(['sh', '-c', 'pwd; echo "$X"; cat'], {
      stdin: 'piped in',
      cwd: '/tmp',
      env: { X: 'y z' },
    });
    assert.equal(r.stdout, '/tmp\ny z\npiped in');
    assert.equal(r.exitCode, 0);
    assert.equal(r.toString(), '/tmp\ny z\npiped in\n[exit 0]');
  });

  test('streams stdout and stderr per frame as they arrive', async () => {
    const frames: Array<[string, string, number]> = [];
    const t0 = Date.now();
    const r = await sbx.run('for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.2; done', {
      onStdout: (s) => frames.push(['out', s, Date.now() - t0]),
      onStderr: (s) => frames.push(['err', s, Date.now() - t0]),
    });
    assert.equal(r.stdout, 'o1\no2\no3\n');
    assert.equal(r.stderr, 'e1\ne2\ne3\n');
    assert.equal(frames.filter((f) => f[0] === 'out').map((f) => f[1]).join(''), 'o1\no2\no3\n');
    // the first chunk arrived well before the command finished
    assert.ok(frames[0]![2] < r.durationMs, `first frame at ${frames[0]![2]}ms, command took ${r.durationMs}ms`);
  });

  test('command not found and cannot execute', async () => {
    const r = await sbx.run(['no-such-command']);
    assert.equal(r.exitCode, 127);
    assert.match(r.error!, /command not found/);
    assert.match(r.toString(), /^\[exit 127: command not found/);
    const r2 = await sbx.run(['/workspace']);
    assert.equal(r2.exitCode, 126);
  });

  test('timeout kills the command and says so', async () => {
    const r = await sbx.run('echo started; sleep 10', { timeoutMs: 500 });
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, 137);
    assert.ok(r.durationMs < 5000);
    assert.equal(r.toString(), 'started\n[exit 137: timed out]');
    const r2 = await sbx.run('sleep 10', { timeoutMs: 300 });
    assert.equal(r2.timedOut, true);
  });

  test('abort cancels the request and the daemon kills the command', async () => {
    const ac = new AbortController();
    const seen: string[] = [];
    const p = sbx.run('echo begin; sleep 30; echo never > /workspace/aborted.txt', {
      signal: ac.signal,
      onStdout: (s) => {
        seen.push(s);
        ac.abort(new Error('stop it'));
      },
    });
    await assert.rejects(p, (err: unknown) => {
      assert.ok(err instanceof AbortError && err instanceof SandboxError);
      assert.equal(err.code, 'aborted');
      assert.equal(err.name, 'AbortError');
      return true;
    });
    assert.deepEqual(seen, ['begin\n']);
    // the probe below does see a running sleep
    const probe = sbx.run('sleep 2');
    await new Promise((r) => setTimeout(r, 300));
    const live = await sbx.run(
      'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < "$f" 2>/dev/null; echo; done | grep -c "^sleep 2" || true',
    );
    assert.equal(live.stdout.trim(), '1');
    await probe;
    // the command is gone: no sleep left in the sandbox
    const t0 = Date.now();
    for (;;) {
      const ps = await sbx.run(
        'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < "$f" 2>/dev/null; echo; done | grep -c "^sleep 30" || true',
      );
      if (ps.stdout.trim() === '0') break;
      assert.ok(Date.now() - t0 < 5000, 'the aborted command is still running');
      await new Promise((r) => setTimeout(r, 100));
    }
    // an already-aborted signal never starts the command
    await assert.rejects(sbx.run('true', { signal: AbortSignal.abort() }), { code: 'aborted' });
  });

  test('big output is kept whole', async () => {
    const r = await sbx.run('head -c 300000 /dev/zero | tr "\\0" a');
    assert.equal(r.stdout.length, 300000);
    assert.equal(r.truncated, false);
  });

  test('output over the limit is truncated and noted', async () => {
    const s = await IronClawSandbox.create({ ...srv.conn, limits: { output: 4096 } });
    try {
      const r = await s.run('head -c 100000 /dev/zero | tr "\\0" b');
      assert.equal(r.truncated, true);
      assert.ok(r.stdout.length <= 4096);
      assert.match(r.toString(), /\[exit 0: output truncated\]$/);
    } finally {
      await s.destroy();
    }
  });
});

describe('files', () => {
  test('write, read, list round trip (text and binary, mode)', async () => {
    await sbx.writeFile('/workspace/dir/a.txt', 'hello\n');
    const bin = new Uint8Array(256).map((_, i) => i);
    await sbx.writeFile('dir/b.bin', bin, { mode: 0o600 });
    await sbx.writeFile('/tmp/c.sh', '#!/bin/sh\necho run\n', { mode: '0755' });
    assert.equal(await sbx.readTextFile('/workspace/dir/a.txt'), 'hello\n');
    assert.deepEqual(await sbx.readFile('dir/b.bin'), bin);
    assert.equal((await sbx.run('/tmp/c.sh')).stdout, 'run\n');
    const entries = await sbx.list('/workspace/dir');
    const byName = Object.fromEntries(entries.map((e) => [e.name, e]));
    assert.deepEqual(Object.keys(byName).sort(), ['a.txt', 'b.bin']);
    assert.equal(byName['a.txt']!.type, 'file');
    assert.equal(byName['a.txt']!.size, 6);
    assert.equal(byName['b.bin']!.mode, '0600');
    assert.ok(byName['b.bin']!.mtime instanceof Date && Math.abs(byName['b.bin']!.mtime.getTime() - Date.now()) < 60_000);
    const root = await sbx.list();
    assert.equal(root.find((e) => e.name === 'dir')?.type, 'dir');
    // files written by commands are readable, and the other way round
    await sbx.run('printf made-inside > /workspace/inside.txt');
    assert.equal(await sbx.readTextFile('inside.txt'), 'made-inside');
  });

  test('missing file is not_found; paths outside /workspace and /tmp are refused', async () => {
    await assert.rejects(sbx.readFile('/workspace/missing.txt'), (err: unknown) => {
      assert.ok(err instanceof NotFoundError && err instanceof SandboxError);
      assert.equal(err.name, 'NotFoundError');
      assert.equal(err.code, 'not_found');
      assert.equal(err.status, 404);
      return true;
    });
    await assert.rejects(sbx.readFile('/etc/passwd'), (err: unknown) => err instanceof InvalidArgumentError && err.status === 400);
    await assert.rejects(sbx.writeFile('../../etc/x', 'x'), { code: 'invalid_argument' });
  });
});

describe('errors', () => {
  test('bad token is unauthorized', async () => {
    const s = new IronClawSandbox({ addr: srv.d.addr, token: 'not-a-token' });
    await assert.rejects(s.engage(), (err: unknown) => {
      assert.ok(err instanceof UnauthorizedError);
      assert.equal(err.code, 'unauthorized');
      assert.equal(err.status, 401);
      return true;
    });
  });

  test('operator-only route with the agent token is forbidden', async () => {
    const r = await srv.d.agent('GET', '/v1/audit');
    assert.equal(r.status, 403);
  });

  test('unknown sandbox is not_found', async () => {
    await assert.rejects(IronClawSandbox.connect('sbx-0000000000000000', srv.conn), (err: unknown) =>
      err instanceof NotFoundError && err.status === 404,
    );
  });

  test('daemon unreachable is unavailable', async () => {
    const s = new IronClawSandbox({ addr: '127.0.0.1:1', token: 'x' });
    await assert.rejects(s.engage(), (err: unknown) => err instanceof UnavailableError && err.code === 'unavailable');
  });

  test('no token anywhere is unauthorized before any request', async () => {
    const saved = { ...process.env };
    const empty = mkdtempSync(join(tmpdir(), 'ironclaw-notoken-'));
    try {
      delete process.env['IRONCLAW_API_TOKEN'];
      process.env['IRONCLAW_DATA_DIR'] = empty;
      process.env['XDG_DATA_HOME'] = empty;
      process.env['HOME'] = empty;
      writeFileSync(join(empty, 'agent.token'), '');
      await assert.rejects(new IronClawSandbox({ addr: srv.d.addr }).engage(), { code: 'unauthorized' });
    } finally {
      process.env = saved;
      rmSync(empty, { recursive: true, force: true });
    }
  });

  test('invalid request is invalid_argument', async () => {
    await assert.rejects(sbx.run(''), { code: 'invalid_argument', status: 400 });
    await assert.rejects(IronClawSandbox.create({ ...srv.conn, limits: { memory: 'lots' } }), InvalidArgumentError);
    // A bad ...Ms value is refused before anything is sent.
    await assert.rejects(sbx.run('true', { timeoutMs: -1 }), (err: unknown) => err instanceof InvalidArgumentError && err.status === undefined);
    await assert.rejects(IronClawSandbox.create({ ...srv.conn, ttlMs: Number.NaN }), InvalidArgumentError);
  });
});

describe('model access', () => {
  test('mints a proxy token that the model proxy accepts', async () => {
    const m = await sbx.modelAccess();
    assert.match(m.token, /^icp_/);
    assert.match(m.session, /^api-/);
    assert.ok(m.expiresAt instanceof Date && m.expiresAt.getTime() > Date.now());
    assert.equal(m.openaiBaseUrl, `${srv.d.addr}/v1/model/openai/v1`);
    assert.equal(m.anthropicBaseUrl, `${srv.d.addr}/v1/model/anthropic`);
    const res = await fetch(`${m.openaiBaseUrl}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${m.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'ping' }] }),
    });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { choices: Array<{ message: { content: string } }> };
    assert.match(body.choices[0]!.message.content, /ping/);
  });
});

describe('destroy', () => {
  test('destroys; later use is a conflict; destroying again is fine', async () => {
    const s = await IronClawSandbox.create(srv.conn);
    await s.run('true');
    await s.destroy();
    assert.equal(s.info?.state, 'destroyed');
    await assert.rejects(s.run('true'), (err: unknown) => err instanceof ConflictError && err.status === 409);
    assert.ok(s.info?.endedAt instanceof Date);
    await s.destroy();
    assert.equal((await s.getInfo()).state, 'destroyed');
    await assert.rejects(IronClawSandbox.connect(s.id!, srv.conn), { code: 'conflict' });
    // never engaged: nothing to do
    await new IronClawSandbox(srv.conn).destroy();
  });

  test('await using destroys at the end of the scope', async () => {
    let id: string | undefined;
    {
      await using s = await IronClawSandbox.create(srv.conn);
      id = s.id;
    }
    const r = await srv.d.agent('GET', `/v1/sandboxes/${id}`);
    assert.equal(r.body.state, 'destroyed');
  });
});

test('ExecResult.toString is compact', () => {
  assert.equal(new ExecResult({ stdout: '', stderr: '', exitCode: 0, durationMs: 1 }).toString(), '[exit 0]');
  assert.equal(
    new ExecResult({ stdout: 'a\n\n', stderr: '', exitCode: 137, durationMs: 1, oomKilled: true }).toString(),
    'a\n[exit 137: out of memory]',
  );
});
