/**
 * `@mastra/e2b`'s E2BSandbox, unchanged, on IronClaw's E2B-compatible API: in a Mastra Workspace driven by a real
 * Mastra Agent on the daemon's offline mock model (foreground and background workspace tools), and its own
 * lifecycle (create by logical id, stop = pause, a second instance reconnects by metadata and resumes, writeFiles,
 * destroy). Effects are checked through IronClaw's native API.
 *
 * @mastra/e2b passes apiUrl/apiKey to the e2b SDK but has no sandboxUrl option, so the envd base comes from
 * E2B_SANDBOX_URL in the environment (set here for this file's process; node runs each test file in its own).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { TestContext } from 'node:test';
import { createOpenAI } from '@ai-sdk/openai';
import { Agent } from '@mastra/core/agent';
import type { MastraModelConfig } from '@mastra/core/llm';
import { Workspace } from '@mastra/core/workspace';
import { E2BSandbox } from '@mastra/e2b';
import { Sandbox } from 'e2b';
import { IronClawSandbox } from '../src/index.js';
import { daemonPerFile, eventually } from './helpers/daemon.js';

process.env['MASTRA_TELEMETRY_DISABLED'] = '1';

const srv = daemonPerFile({}, (s) => {
  process.env['E2B_SANDBOX_URL'] = `${s.d.addr}/e2b`;
});

/** apiUrl and apiKey as E2BSandbox options (the envd URL is in the environment). */
function conn() {
  return { apiUrl: `${srv.d.addr}/e2b`, apiKey: readFileSync(join(srv.d.dataDir, 'e2b.key'), 'utf8').trim() };
}

async function proxyModel(): Promise<MastraModelConfig> {
  const access = await new IronClawSandbox(srv.conn).modelAccess();
  const openai = createOpenAI({ baseURL: access.openaiBaseUrl, apiKey: access.token });
  return openai.chat('gpt-4o-mini') as unknown as MastraModelConfig;
}
const mockCall = (name: string, args: unknown) => JSON.stringify({ mock_tool_calls: [{ name, arguments: args }] });

/**
 * An E2BSandbox on the default template 'base' (IronClaw's host-toolchain view). Given no template, E2BSandbox
 * would look up (GET /templates/aliases/mastra-<hash>) and else build (Template.build) a FUSE-mountable template.
 */
function e2bSandbox(t: TestContext, id: string): E2BSandbox {
  const s = new E2BSandbox({ ...conn(), id, template: 'base', timeout: 300_000, metadata: { suite: 'e2b-mastra' } });
  t.after(() => s._destroy().catch(() => undefined));
  return s;
}

/** The native sandbox behind an E2BSandbox. */
function native(s: E2BSandbox): IronClawSandbox {
  return new IronClawSandbox({ ...srv.conn, id: s.e2b.sandboxId });
}

describe('@mastra/e2b E2BSandbox in a Workspace, driven by an Agent', () => {
  test('execute_command runs in the E2B sandbox, as uid 65532 in /workspace; the file it writes is there natively', async (t) => {
    const sandbox = e2bSandbox(t, `agent-${process.pid}`);
    const ws = new Workspace({ sandbox });
    await ws.init();
    assert.equal(sandbox.status, 'running');
    const id = sandbox.e2b.sandboxId;
    assert.match(id, /^sbx-/);

    const agent = new Agent({ id: 'e2b-agent', name: 'E2B Agent', instructions: 'Work in the sandbox.', model: await proxyModel(), workspace: ws });
    const r = await agent.generate(
      mockCall('mastra_workspace_execute_command', { command: 'echo "written by the agent" > agent.txt; pwd; id -u' }),
    );
    const out = String(r.toolResults.map((x: any) => (typeof x.payload.result === 'string' ? x.payload.result : JSON.stringify(x.payload.result))));
    assert.match(out, /\/workspace/);
    assert.match(out, /65532/);
    assert.equal(await native(sandbox).readTextFile('/workspace/agent.txt'), 'written by the agent\n');

    // a failing command reaches the agent as a failure with its exit code, not as a thrown error
    const f = await agent.generate(mockCall('mastra_workspace_execute_command', { command: 'echo bad >&2; exit 7' }));
    const fout = String(f.toolResults.map((x: any) => (typeof x.payload.result === 'string' ? x.payload.result : JSON.stringify(x.payload.result))));
    assert.match(fout, /bad/);
    assert.match(fout, /7/);

    // the sandbox is found by the metadata E2BSandbox set (its logical id)
    const listed = await Sandbox.list({ ...conn(), query: { metadata: { 'mastra-sandbox-id': sandbox.id } } }).nextItems();
    assert.deepEqual(listed.map((s) => s.sandboxId), [id]);
    assert.equal(listed[0]!.metadata['suite'], 'e2b-mastra');
  });

  test('background tools: execute_command background, get_process_output, kill_process', async (t) => {
    const sandbox = e2bSandbox(t, `bg-${process.pid}`);
    const ws = new Workspace({ sandbox });
    await ws.init();
    const agent = new Agent({ id: 'e2b-bg-agent', name: 'E2B Background Agent', instructions: 'Run things.', model: await proxyModel(), workspace: ws });
    const call = async (tool: string, args: unknown) => {
      const r = await agent.generate(mockCall(`mastra_workspace_${tool}`, args));
      return String(r.toolResults.map((x: any) => (typeof x.payload.result === 'string' ? x.payload.result : JSON.stringify(x.payload.result))));
    };
    const started = await call('execute_command', { command: 'echo serving; sleep 60', background: true });
    const pid = /PID: (\d+)/.exec(started)?.[1];
    assert.ok(pid, started);
    const procs = await sandbox.e2b.commands.list();
    assert.ok(procs.some((p) => String(p.pid) === pid), JSON.stringify(procs));
    await eventually(async () => /serving/.test(await call('get_process_output', { pid })));
    const killed = await call('kill_process', { pid });
    assert.match(killed, new RegExp(`Process ${pid} has been killed`));
    await eventually(async () => !(await sandbox.e2b.commands.list()).some((p) => String(p.pid) === pid));

    const short = await call('execute_command', { command: 'echo quick; exit 3', background: true });
    const spid = /PID: (\d+)/.exec(short)?.[1];
    assert.ok(spid, short);
    const waited = await call('get_process_output', { pid: spid, wait: true });
    assert.match(waited, /quick/);
    assert.match(waited, /Exit code: 3/);
  });
});

describe('@mastra/e2b E2BSandbox lifecycle', () => {
  test('writeFiles and executeCommand; destroy kills its processes and the sandbox', async (t) => {
    const s = e2bSandbox(t, `files-${process.pid}`);
    await s._start();
    const id = s.e2b.sandboxId;
    await s.writeFiles([
      { path: '/workspace/w/one.txt', content: 'one' },
      { path: '/workspace/w/two.bin', content: Buffer.from([1, 2, 3]) },
    ]);
    const n = new IronClawSandbox({ ...srv.conn, id });
    assert.equal(await n.readTextFile('/workspace/w/one.txt'), 'one');
    assert.deepEqual(await n.readFile('/workspace/w/two.bin'), new Uint8Array([1, 2, 3]));
    const r = await s.executeCommand!('cat w/one.txt');
    assert.equal(r.stdout, 'one');
    assert.equal(r.exitCode, 0);
    const bad = await s.executeCommand!('echo nope >&2; exit 4');
    assert.equal(bad.exitCode, 4);
    // @mastra/e2b 0.8.0 appends the CommandExitError's stderr to what it already streamed: 'nope\n' twice
    assert.match(bad.stderr, /^(nope\n)+$/);

    const p = await s.processes!.spawn('sleep 300');
    assert.ok((await s.processes!.list()).some((x) => x.pid === p.pid));
    await s._destroy();
    assert.equal(s.status, 'destroyed');
    assert.equal(await Sandbox.kill(id, conn()), false, 'already gone');
    assert.notEqual((await srv.d.agent('GET', `/v1/sandboxes/${id}`)).body?.state, 'running');
    const left = await Sandbox.list({ ...conn(), query: { metadata: { 'mastra-sandbox-id': s.id } } }).nextItems();
    assert.deepEqual(left, []);
  });

  test('stop pauses; another instance with the same logical id finds it by metadata and resumes it', async (t) => {
    const logical = `life-${process.pid}`;
    const first = e2bSandbox(t, logical);
    await first._start();
    const id = first.e2b.sandboxId;
    await first.writeFiles([{ path: '/workspace/kept.txt', content: 'kept' }]);
    await first._stop();
    assert.equal(first.status, 'stopped');
    assert.equal((await srv.d.agent('GET', `/v1/sandboxes/${id}`)).body.state, 'paused');
    const paused = await Sandbox.list({ ...conn(), query: { metadata: { 'mastra-sandbox-id': logical }, state: ['paused'] } }).nextItems();
    assert.deepEqual(paused.map((x) => x.sandboxId), [id]);

    // On reconnect E2BSandbox reconciles FUSE mounts: it runs grep, awk, ls and cat in the sandbox.
    const second = e2bSandbox(t, logical);
    await second._start();
    assert.equal(second.e2b.sandboxId, id, 'reconnected by its mastra-sandbox-id, not a new sandbox');
    assert.equal((await srv.d.agent('GET', `/v1/sandboxes/${id}`)).body.state, 'running');
    assert.equal((await second.executeCommand!('cat kept.txt')).stdout, 'kept');
  });
});
