/**
 * The rest of the Mastra Workspace contract, against a real daemon (a policy with inbound ports): the
 * SandboxProcessManager over the processes API (spawn, output, stdin, timeout, kill, list, reattach after a
 * client restart), Mastra's background execute_command, get_process_output and kill_process tools through a
 * real Agent, stop() = pause, networking.getPortUrl, and Workspace({ mounts }) on IronClaw volumes.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { createOpenAI } from '@ai-sdk/openai';
import { Agent } from '@mastra/core/agent';
import type { MastraModelConfig } from '@mastra/core/llm';
import { LocalFilesystem, Workspace } from '@mastra/core/workspace';
import { IronClawSandbox, Volumes } from '../src/index.js';
import { IronClawFilesystem, IronClawWorkspaceSandbox } from '../src/mastra.js';
import { daemonPerFile, eventually } from './helpers/daemon.js';

process.env['MASTRA_TELEMETRY_DISABLED'] = '1';

const srv = daemonPerFile({ policy: { ports: { inbound: true, url_ttl: '10m' } }, args: ['--ports-listen', '127.0.0.1:0'] });

const root = process.getuid?.() === 0;

function sandbox(extra: ConstructorParameters<typeof IronClawWorkspaceSandbox>[0] = {}) {
  const s = new IronClawWorkspaceSandbox({ ...srv.conn, ...extra });
  srv.cleanup.push(() => s.destroy());
  return s;
}

async function proxyModel(): Promise<MastraModelConfig> {
  const access = await new IronClawSandbox(srv.conn).modelAccess();
  return createOpenAI({ baseURL: access.openaiBaseUrl, apiKey: access.token }).chat('gpt-4o-mini') as unknown as MastraModelConfig;
}
const mockCall = (name: string, args: unknown) => JSON.stringify({ mock_tool_calls: [{ name, arguments: args }] });

describe('IronClawProcessManager (LocalSandbox semantics)', () => {
  test('spawn, output as the handle reads it, stdin, wait, list, env and cwd', async () => {
    const s = sandbox({ env: { BASE: 'b' } });
    s.setEnv((e) => ({ ...e, OVER: 'o' }));
    const pm = s.processes!;
    await s.executeCommand('mkdir -p sub');
    const seen: string[] = [];
    const h = await pm.spawn('echo "$BASE $OVER $X $(pwd)"; cat; echo bye >&2', { env: { X: 'x' }, cwd: 'sub', onStdout: (t) => seen.push(t) });
    assert.match(h.pid, /^\d+$/);
    assert.equal(h.exitCode, undefined);
    const got = await eventually(async () => {
      const again = await pm.get(h.pid);
      return again?.stdout.includes('/workspace/sub') ? again : undefined;
    });
    assert.equal(got, h, 'get returns the tracked handle, its output read');
    assert.equal(h.stdout, 'b o x /workspace/sub\n');
    await h.sendStdin('line 1\n');
    await eventually(async () => (await pm.get(h.pid))!.stdout.endsWith('line 1\n'));
    const listed = await pm.list();
    assert.deepEqual(
      listed.find((p) => p.pid === h.pid),
      { pid: h.pid, command: 'echo "$BASE $OVER $X $(pwd)"; cat; echo bye >&2', running: true },
    );
    await h.closeStdin();
    const r = await h.wait();
    assert.equal(r.exitCode, 0);
    assert.equal(r.success, true);
    assert.equal(r.stdout, 'b o x /workspace/sub\nline 1\n');
    assert.equal(r.stderr, 'bye\n');
    assert.equal(seen.join(''), r.stdout, 'spawn-time onStdout saw it live');
    await assert.rejects(h.sendStdin('late'), /already exited/);
    const ignore = await pm.spawn('cat', { stdinMode: 'ignore' });
    assert.equal((await ignore.wait()).exitCode, 0, 'stdinMode ignore: cat reads end of file');
    await assert.rejects(ignore.sendStdin('x'), /exited|stdin/);
  });

  test('timeout: 124 and the message; kill: 128, killed; abort kills; maxRetainedBytes', async () => {
    const s = sandbox();
    const pm = s.processes!;
    const slow = await pm.spawn('echo started; sleep 30', { timeout: 500 });
    const r = await slow.wait();
    assert.equal(r.exitCode, 124);
    assert.equal(r.timedOut, true);
    assert.match(r.stdout, /started/);
    assert.match(r.stderr, /Process timed out after 500ms/);

    const long = await pm.spawn('echo up; sleep 30');
    await eventually(async () => (await pm.get(long.pid))!.stdout === 'up\n');
    assert.equal(await pm.kill(long.pid), true);
    assert.equal(long.exitCode, 128);
    assert.equal(await pm.get(long.pid), undefined, 'killed and released');
    assert.equal(await pm.kill(long.pid), false);

    const ac = new AbortController();
    const aborted = await pm.spawn('sleep 30', { abortSignal: ac.signal });
    ac.abort();
    const ar = await aborted.wait();
    assert.equal(ar.exitCode, 128);
    assert.equal(ar.killed, true);

    const big = await pm.spawn('head -c 5000 /dev/zero | tr "\\0" a', { maxRetainedBytes: 100 });
    const br = await big.wait();
    assert.equal(br.stdout.length, 100);
    assert.equal(br.stdoutTruncated, true);
    assert.equal(br.stdoutDroppedBytes, 4900);
  });

  test('a new client (a restart) lists the processes and reattaches to one with its output', async () => {
    const first = sandbox({ id: 'proc-restart' });
    const h = await first.processes!.spawn('echo one; sleep 30');
    await eventually(async () => (await first.processes!.get(h.pid))!.stdout === 'one\n');

    const second = new IronClawWorkspaceSandbox({ ...srv.conn, id: 'proc-restart' });
    assert.deepEqual(await second.start(), { outcome: 'connected' });
    assert.ok((await second.processes!.list()).some((p) => p.pid === h.pid && p.running));
    const again = await second.processes!.get(h.pid);
    assert.ok(again);
    assert.equal(again.stdout, 'one\n');
    assert.equal(again.command, 'echo one; sleep 30');
    assert.equal(await second.processes!.get('999'), undefined);
    assert.equal(await second.processes!.kill(h.pid), true);
    assert.equal((await first.processes!.get(h.pid))!.exitCode !== undefined, true, 'the first client sees the end');
  });

  test('a process that ended before its handle was made still gives its output and its end', async () => {
    const first = sandbox({ id: 'proc-ended' });
    const h = await first.processes!.spawn('printf "done\\n"; exit 3');
    const second = new IronClawWorkspaceSandbox({ ...srv.conn, id: 'proc-ended' });
    assert.deepEqual(await second.start(), { outcome: 'connected' });
    await eventually(async () => (await second.processes!.list()).some((p) => p.pid === h.pid && !p.running));
    // the daemon describes it as exited when the handle is made: the output is still to be read
    const late = await second.processes!.get(h.pid);
    assert.ok(late);
    assert.equal(late.exitCode, 3);
    assert.equal(late.stdout, 'done\n');
    const r = await late.wait();
    assert.equal(r.stdout, 'done\n');
    assert.equal(r.exitCode, 3);
  });
});

describe("Mastra's background process tools through an Agent", () => {
  test('execute_command background, get_process_output, kill_process', async () => {
    const s = sandbox();
    const ws = new Workspace({ sandbox: s, filesystem: new IronClawFilesystem({ sandbox: s }) });
    srv.cleanup.push(() => ws.destroy());
    const agent = new Agent({ id: 'bg-agent', name: 'Background Agent', instructions: 'Run things.', model: await proxyModel(), workspace: ws });
    const call = async (tool: string, args: unknown) => {
      const r = await agent.generate(mockCall(`mastra_workspace_${tool}`, args));
      return String(r.toolResults.map((x: any) => (typeof x.payload.result === 'string' ? x.payload.result : JSON.stringify(x.payload.result))));
    };
    const started = await call('execute_command', { command: 'echo serving; sleep 60', background: true });
    const pid = /PID: (\d+)/.exec(started)?.[1];
    assert.ok(pid, started);
    const out = await eventually(async () => {
      const o = await call('get_process_output', { pid });
      return /serving/.test(o) ? o : undefined;
    });
    assert.doesNotMatch(out, /Exit code/, 'still running');
    const killed = await call('kill_process', { pid });
    assert.match(killed, new RegExp(`Process ${pid} has been killed`));
    assert.match(killed, /serving/);
    const gone = await call('get_process_output', { pid });
    assert.match(gone, /No background process found|exited|killed/i);

    const short = await call('execute_command', { command: 'echo quick; exit 3', background: true });
    const spid = /PID: (\d+)/.exec(short)?.[1];
    const waited = await call('get_process_output', { pid: spid, wait: true });
    assert.match(waited, /quick/);
    assert.match(waited, /Exit code: 3/);
  });
});

describe('stop() = pause; networking.getPortUrl', () => {
  test('stop pauses (processes kept), start resumes', async () => {
    const s = sandbox();
    await s.start();
    const h = await s.processes!.spawn('while :; do date +%s%N; sleep 0.1; done');
    await eventually(async () => (await s.processes!.get(h.pid))!.stdout.length > 0);
    await s._stop();
    assert.equal(s.status, 'stopped');
    assert.equal((await srv.d.agent('GET', `/v1/sandboxes/${s.sandboxId}`)).body.state, 'paused');
    const before = (await IronClawSandbox.connect(s.sandboxId!, srv.conn)).processes; // a read resumes nothing by itself
    void before;
    assert.deepEqual(await s.start(), { outcome: 'connected' });
    assert.equal(s.status, 'running');
    assert.equal((await srv.d.agent('GET', `/v1/sandboxes/${s.sandboxId}`)).body.state, 'running');
    const p = await s.processes!.get(h.pid);
    assert.equal(p?.exitCode, undefined, 'the process survived the pause');
    await s._stop();
    assert.equal((await s.executeCommand('echo back')).stdout, 'back\n', 'a command after stop resumes');
  });

  test('getPortUrl reaches a server inside; an unlisted port is null', async () => {
    const s = sandbox({ ports: [3000] });
    assert.equal(await s.networking!.getPortUrl(3001), null);
    await s.processes!.spawn(
      `exec python3 -c "import http.server as h
class H(h.BaseHTTPRequestHandler):
  def do_GET(s):
    b=('hello '+s.path).encode(); s.send_response(200); s.send_header('content-length',str(len(b))); s.end_headers(); s.wfile.write(b)
h.HTTPServer(('127.0.0.1',3000),H).serve_forever()"`,
    );
    const url = await s.networking!.getPortUrl(3000);
    assert.ok(url);
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/p\/.+\/$/);
    const body = await eventually(async () => {
      const res = await fetch(`${url}x/y`).catch(() => undefined);
      return res?.ok ? res.text() : undefined;
    });
    assert.equal(body, 'hello /x/y');
  });
});

describe('mounts', () => {
  test('Workspace({ mounts }) with an IronClaw volume: created with it, files and commands see it; other mounts are errors', {
    skip: !root && 'volumes need a daemon running as root',
  }, async () => {
    await Volumes.create('mastra-data', { ...srv.conn, size: '32M' });
    srv.cleanup.push(() => Volumes.delete('mastra-data', srv.conn));
    const dir = mkdtempSync(join(tmpdir(), 'h6-mount-'));
    srv.cleanup.push(async () => rmSync(dir, { recursive: true, force: true }));
    const s = new IronClawWorkspaceSandbox(srv.conn);
    const ws = new Workspace({
      sandbox: s,
      mounts: {
        '/workspace': new IronClawFilesystem({ sandbox: s }),
        '/data': new IronClawFilesystem({ sandbox: s, volume: 'mastra-data' }),
        '/host': new LocalFilesystem({ basePath: dir }),
      },
    });
    srv.cleanup.push(() => ws.destroy());
    await ws.init();
    assert.equal(s.mounts!.get('/data')?.state, 'mounted', s.mounts!.get('/data')?.error);
    assert.equal(s.mounts!.get('/workspace')?.state, 'mounted', s.mounts!.get('/workspace')?.error);
    assert.equal(s.mounts!.get('/host')?.state, 'error');
    assert.match(s.mounts!.get('/host')?.error ?? '', /mount only IronClaw volumes.*local/);
    assert.equal((await Volumes.get('mastra-data', srv.conn)).sandbox, s.sandboxId);

    await ws.filesystem!.writeFile('/data/notes.txt', 'kept');
    assert.equal((await s.executeCommand('cat /data/notes.txt')).stdout, 'kept');
    await ws.filesystem!.writeFile('/workspace/w.txt', 'w');
    assert.equal((await s.executeCommand('cat w.txt')).stdout, 'w');
    const info = await s.getInfo();
    assert.deepEqual(
      info.mounts?.sort((a, b) => a.path.localeCompare(b.path)),
      [
        { path: '/data', filesystem: 'ironclaw-volume:mastra-data' },
        { path: '/workspace', filesystem: 'ironclaw' },
      ],
    );
    await ws.destroy();

    // the volume outlives the sandbox: a new workspace on it sees the file
    const s2 = new IronClawWorkspaceSandbox(srv.conn);
    const ws2 = new Workspace({ sandbox: s2, mounts: { '/data': new IronClawFilesystem({ sandbox: s2, volume: 'mastra-data' }) } });
    srv.cleanup.push(() => ws2.destroy());
    await ws2.init();
    assert.equal(await ws2.filesystem!.readFile('/data/notes.txt', { encoding: 'utf-8' }), 'kept');
    await ws2.destroy();

    // a volume that does not exist: the create fails with the daemon's reason
    const s3 = new IronClawWorkspaceSandbox(srv.conn);
    const ws3 = new Workspace({ sandbox: s3, mounts: { '/data': new IronClawFilesystem({ sandbox: s3, volume: 'no-such' }) } });
    srv.cleanup.push(() => ws3.destroy());
    await assert.rejects(ws3.init(), /no-such|volume/);
  });

  test('the volumes option shows in getInfo().mounts', { skip: !root && 'volumes need a daemon running as root' }, async () => {
    await Volumes.create('mastra-opt', { ...srv.conn, size: '32M' });
    srv.cleanup.push(() => Volumes.delete('mastra-opt', srv.conn));
    const s = sandbox({ volumes: [{ name: 'mastra-opt', path: '/workspace/v' }] });
    await s.start();
    assert.deepEqual((await s.getInfo()).mounts, [{ path: '/workspace/v', filesystem: 'ironclaw-volume:mastra-opt' }]);
    // a clone does not take the volume (it is in one running sandbox at a time), so it starts beside it
    const sib = s.clone();
    srv.cleanup.push(() => sib.destroy());
    assert.deepEqual(await sib.start(), { outcome: 'created' });
    assert.deepEqual((await sib.getInfo()).mounts, []);
    await s.destroy();
  });
});
