import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createOpenAI } from '@ai-sdk/openai';
import { Agent } from '@mastra/core/agent';
import type { MastraModelConfig } from '@mastra/core/llm';
import {
  DirectoryNotEmptyError,
  DirectoryNotFoundError,
  FileExistsError,
  FileNotFoundError,
  IsDirectoryError,
  Workspace,
  WorkspaceReadOnlyError,
} from '@mastra/core/workspace';
import { IronClawSandbox } from '../src/index.js';
import { IronClawFilesystem, IronClawWorkspaceSandbox, MASTRA_ID_LABEL, makeSandboxTool } from '../src/mastra.js';
import { daemonPerFile } from './helpers/daemon.js';

process.env['MASTRA_TELEMETRY_DISABLED'] = '1';

const srv = daemonPerFile();

/** A Mastra model that talks to the IronClaw mock provider through the daemon's model proxy. */
async function proxyModel(sbx: IronClawSandbox): Promise<MastraModelConfig> {
  const access = await sbx.modelAccess();
  const openai = createOpenAI({ baseURL: access.openaiBaseUrl, apiKey: access.token });
  // Cast: @ai-sdk/openai's LanguageModelV4 is newer than the one bundled in @mastra/core (type drift only).
  return openai.chat('gpt-4o-mini') as unknown as MastraModelConfig;
}

const mockCall = (name: string, args: unknown) => JSON.stringify({ mock_tool_calls: [{ name, arguments: args }] });

describe('makeSandboxTool', () => {
  test('execute runs the command and returns { output, exitCode }', async () => {
    const sbx = new IronClawSandbox(srv.conn);
    srv.cleanup.push(() => sbx.destroy());
    const tool = makeSandboxTool(sbx);
    assert.equal(tool.id, 'sandbox_shell');
    assert.match(tool.description, /isolated Linux sandbox/);
    assert.match(tool.description, /\/workspace/);
    const ok = await tool.execute!({ command: 'echo hi; echo oops >&2; exit 2' }, {} as any);
    assert.deepEqual(ok, { output: 'hi\n[stderr]\noops\n[exit 2]', exitCode: 2 });
    assert.ok(sbx.id, 'the tool engaged the sandbox on first use');
    const custom = makeSandboxTool(sbx, { id: 'shell', description: 'mine', timeoutMs: 300 });
    assert.equal(custom.id, 'shell');
    const slow = (await custom.execute!({ command: 'sleep 5' }, {} as any)) as { output: string; exitCode: number };
    assert.equal(slow.exitCode, 137);
    assert.match(slow.output, /timed out/);
  });

  test('a real Agent calls it through the IronClaw model proxy (mock provider)', async () => {
    const sbx = await IronClawSandbox.create(srv.conn);
    srv.cleanup.push(() => sbx.destroy());
    const agent = new Agent({
      id: 'sandbox-agent',
      name: 'Sandbox Agent',
      instructions: 'Use the sandbox_shell tool to run commands.',
      model: await proxyModel(sbx),
      tools: { sandbox_shell: makeSandboxTool(sbx) },
    });
    const res = await agent.generate(mockCall('sandbox_shell', { command: 'echo hi' }));
    const calls = res.toolCalls.map((c: any) => ({ name: c.payload.toolName, args: c.payload.args }));
    assert.deepEqual(calls, [{ name: 'sandbox_shell', args: { command: 'echo hi' } }]);
    const results = res.toolResults.map((r: any) => r.payload.result);
    assert.deepEqual(results, [{ output: 'hi\n[exit 0]', exitCode: 0 }]);
    assert.match(res.text, /hi\\n\[exit 0\]/, `the mock quotes the tool result: ${res.text}`);
    assert.equal(res.finishReason, 'stop');

    // streaming, with output streamed to the agent's writer
    const s = await agent.stream(mockCall('sandbox_shell', { command: 'echo streamed; echo warn >&2' }));
    const chunks: any[] = [];
    for await (const c of s.fullStream) chunks.push(c);
    const types = new Set(chunks.map((c) => c.type));
    assert.ok(types.has('tool-call') && types.has('tool-result'), [...types].join(','));
    const result = chunks.find((c) => c.type === 'tool-result');
    assert.equal(result.payload.result.output, 'streamed\n[stderr]\nwarn\n[exit 0]');
    assert.match(await s.text, /streamed/);
  });
});

describe('IronClawWorkspaceSandbox', () => {
  test('start is get-or-create; executeCommand streams; stop keeps it; destroy ends it', async () => {
    const ws = new IronClawWorkspaceSandbox({ ...srv.conn, id: 'logical-1', env: { FROM: 'create' } });
    srv.cleanup.push(() => ws.destroy());
    assert.equal(ws.provider, 'ironclaw');
    assert.equal(ws.status, 'pending');
    assert.match(ws.getInstructions(), /\/workspace/);
    // no start(): the first command starts it (agents never call workspace.init())
    const out: string[] = [];
    const err: string[] = [];
    const r = await ws.executeCommand('echo $FROM $0; pwd; echo e >&2; exit 4', [], {
      onStdout: (s) => out.push(s),
      onStderr: (s) => err.push(s),
    });
    assert.equal(ws.status, 'running');
    assert.equal(r.success, false);
    assert.equal(r.exitCode, 4);
    assert.equal(r.stdout, 'create /bin/sh\n/workspace\n');
    assert.equal(out.join(''), r.stdout);
    assert.equal(err.join(''), 'e\n');
    const sid = ws.sandboxId!;
    assert.match(sid, /^sbx-/);
    const info = await srv.d.agent('GET', `/v1/sandboxes/${sid}`);
    assert.equal(info.body.labels[MASTRA_ID_LABEL], 'logical-1');

    // args are shell-quoted; cwd, env, timeout (ms) pass through
    const q = await ws.executeCommand('printf', ['%s|', 'a b', "it's", '$HOME'], { cwd: '/tmp', env: { X: '1' } });
    assert.equal(q.stdout, "a b|it's|$HOME|");
    const t = await ws.executeCommand('sleep', ['5'], { timeout: 300 });
    assert.equal(t.timedOut, true);
    assert.equal(t.killed, true);

    const infoM = await ws.getInfo();
    assert.equal(infoM.id, 'logical-1');
    assert.equal(infoM.provider, 'ironclaw');
    assert.equal(infoM.metadata?.['sandboxId'], sid);
    assert.ok(infoM.createdAt instanceof Date);

    // another instance with the same logical id connects to the same daemon sandbox
    await ws.executeCommand('echo kept > /workspace/state.txt');
    const ws2 = new IronClawWorkspaceSandbox({ ...srv.conn, id: 'logical-1' });
    assert.deepEqual(await ws2.start(), { outcome: 'connected' });
    assert.equal(ws2.sandboxId, sid);
    assert.equal((await ws2.executeCommand('cat state.txt')).stdout, 'kept\n');

    // stop keeps the sandbox; start reconnects (_stop/_destroy are the lifecycle wrappers Workspace calls)
    await ws._stop();
    assert.equal(ws.status, 'stopped');
    assert.deepEqual(await ws.start(), { outcome: 'connected' });
    assert.equal(ws.sandboxId, sid);
    assert.equal(ws.status, 'running');

    await ws._destroy();
    assert.equal(ws.status, 'destroyed');
    assert.equal((await srv.d.agent('GET', `/v1/sandboxes/${sid}`)).body.state, 'destroyed');

    // a destroyed logical sandbox is created anew on the next start
    const ws3 = new IronClawWorkspaceSandbox({ ...srv.conn, id: 'logical-1' });
    srv.cleanup.push(() => ws3.destroy());
    assert.deepEqual(await ws3.start(), { outcome: 'created' });
    assert.notEqual(ws3.sandboxId, sid);
  });

  test('abort settles with a killed result (as LocalSandbox does)', async () => {
    const ws = new IronClawWorkspaceSandbox(srv.conn);
    srv.cleanup.push(() => ws.destroy());
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 200);
    const r = await ws.executeCommand('sleep 20', [], { abortSignal: ac.signal });
    assert.equal(r.killed, true);
    assert.equal(r.exitCode, 128);
  });

  test('writeFiles uploads with modes; a shared client is used as is', async () => {
    const sbx = await IronClawSandbox.create(srv.conn);
    srv.cleanup.push(() => sbx.destroy());
    const ws = new IronClawWorkspaceSandbox({ sandbox: sbx });
    assert.equal(ws.id, sbx.id);
    assert.deepEqual(await ws.start(), { outcome: 'connected' });
    await ws.writeFiles([
      { path: '/workspace/run.sh', content: '#!/bin/sh\necho ran\n', mode: 0o755 },
      { path: 'data/b.bin', content: Buffer.from([0, 1, 2]) },
    ]);
    assert.equal((await ws.executeCommand('./run.sh')).stdout, 'ran\n');
    assert.deepEqual([...(await sbx.readFile('data/b.bin'))], [0, 1, 2]);
  });
});

describe('IronClawFilesystem', () => {
  test('the WorkspaceFilesystem operations over the sandbox', async () => {
    const sandbox = new IronClawWorkspaceSandbox(srv.conn);
    const fs = new IronClawFilesystem({ sandbox });
    const workspace = new Workspace({ sandbox, filesystem: fs });
    srv.cleanup.push(() => workspace.destroy());
    await workspace.init();
    assert.equal(sandbox.status, 'running');
    assert.equal(fs.status, 'ready');

    await fs.writeFile('notes/a.txt', 'hello');
    assert.equal(await fs.readFile('notes/a.txt', { encoding: 'utf-8' }), 'hello');
    const buf = await fs.readFile('/workspace/notes/a.txt');
    assert.ok(Buffer.isBuffer(buf));
    await fs.appendFile('notes/a.txt', ' world');
    await fs.appendFile('notes/new.txt', 'fresh');
    assert.equal(await fs.readFile('notes/a.txt', { encoding: 'utf-8' }), 'hello world');
    assert.equal(await fs.readFile('notes/new.txt', { encoding: 'utf-8' }), 'fresh');
    await assert.rejects(fs.writeFile('notes/a.txt', 'x', { overwrite: false }), FileExistsError);
    await assert.rejects(fs.writeFile('nodir/x.txt', 'x', { recursive: false }), DirectoryNotFoundError);
    await assert.rejects(fs.readFile('notes/missing.txt'), FileNotFoundError);
    await assert.rejects(fs.readFile('notes'), IsDirectoryError);

    const st = await fs.stat('notes/a.txt');
    assert.equal(st.type, 'file');
    assert.equal(st.size, 11);
    assert.equal(st.name, 'a.txt');
    assert.equal(st.path, 'notes/a.txt');
    assert.ok(st.modifiedAt instanceof Date && !Number.isNaN(st.modifiedAt.getTime()));
    assert.equal((await fs.stat('notes')).type, 'directory');
    await assert.rejects(fs.stat('nope'), FileNotFoundError);
    // the mtime from stat guards against stale writes
    await fs.writeFile('notes/a.txt', 'v2', { expectedMtime: st.modifiedAt });
    await assert.rejects(fs.writeFile('notes/a.txt', 'v3', { expectedMtime: new Date(0) }), /stale|modified/i);

    assert.equal(await fs.exists('notes/a.txt'), true);
    assert.equal(await fs.exists('notes/zzz'), false);

    await fs.mkdir('deep/er/est');
    await fs.mkdir('deep'); // exists: fine
    await assert.rejects(fs.mkdir('notes/a.txt'), FileExistsError);
    await assert.rejects(fs.mkdir('x/y', { recursive: false }), DirectoryNotFoundError);
    await fs.writeFile('deep/er/f.md', '# f');

    const flat = await fs.readdir('.');
    assert.deepEqual(flat.map((e) => `${e.name}:${e.type}`).sort(), ['deep:directory', 'notes:directory']);
    const all = await fs.readdir('/workspace', { recursive: true });
    assert.deepEqual(all.map((e) => e.name).sort(), [
      'deep',
      'deep/er',
      'deep/er/est',
      'deep/er/f.md',
      'notes',
      'notes/a.txt',
      'notes/new.txt',
    ]);
    const md = await fs.readdir('', { recursive: true, extension: '.md' });
    assert.deepEqual(md.filter((e) => e.type === 'file').map((e) => e.name), ['deep/er/f.md']);
    assert.equal(all.find((e) => e.name === 'notes/a.txt')?.size, 2);
    await assert.rejects(fs.readdir('nowhere'), DirectoryNotFoundError);

    await fs.copyFile('notes/a.txt', 'copy/a.txt');
    assert.equal(await fs.readFile('copy/a.txt', { encoding: 'utf-8' }), 'v2');
    await assert.rejects(fs.copyFile('notes/a.txt', 'copy/a.txt', { overwrite: false }), FileExistsError);
    await assert.rejects(fs.copyFile('deep', 'deep2'), IsDirectoryError);
    await fs.copyFile('deep', 'deep2', { recursive: true });
    assert.equal(await fs.readFile('deep2/er/f.md', { encoding: 'utf-8' }), '# f');
    await fs.moveFile('copy/a.txt', 'moved/b.txt');
    assert.equal(await fs.exists('copy/a.txt'), false);
    assert.equal(await fs.readFile('moved/b.txt', { encoding: 'utf-8' }), 'v2');
    await assert.rejects(fs.moveFile('copy/a.txt', 'x.txt'), FileNotFoundError);

    await assert.rejects(fs.deleteFile('deep'), IsDirectoryError);
    await fs.deleteFile('moved/b.txt');
    await assert.rejects(fs.deleteFile('moved/b.txt'), FileNotFoundError);
    await fs.deleteFile('moved/b.txt', { force: true });
    await assert.rejects(fs.rmdir('deep'), DirectoryNotEmptyError);
    await fs.rmdir('moved');
    await fs.rmdir('deep', { recursive: true });
    assert.equal(await fs.exists('deep'), false);

    // the same files, seen by the sandbox's commands
    assert.equal((await sandbox.executeCommand('cat notes/new.txt')).stdout, 'fresh');

    const ro = new IronClawFilesystem({ sandbox, readOnly: true });
    await assert.rejects(ro.writeFile('x', 'y'), WorkspaceReadOnlyError);
    assert.equal(await ro.readFile('notes/new.txt', { encoding: 'utf-8' }), 'fresh');
  });

  test("an Agent uses the Workspace's built-in tools inside the sandbox", async () => {
    const sandbox = new IronClawWorkspaceSandbox(srv.conn);
    const workspace = new Workspace({ sandbox, filesystem: new IronClawFilesystem({ sandbox }) });
    srv.cleanup.push(() => workspace.destroy());
    const helper = new IronClawSandbox(srv.conn);
    const agent = new Agent({
      id: 'workspace-agent',
      name: 'Workspace Agent',
      instructions: 'Work in the workspace.',
      model: await proxyModel(helper),
      workspace,
    });
    const w = await agent.generate(
      mockCall('mastra_workspace_write_file', { path: 'hello.txt', content: 'written by the agent' }),
    );
    assert.match(String(w.toolResults.map((r: any) => r.payload.result)), /Wrote 20 bytes to hello.txt/);
    assert.equal(await sandbox.client.readTextFile('hello.txt'), 'written by the agent');
    const x = await agent.generate(
      mockCall('mastra_workspace_execute_command', { command: 'cat hello.txt; id -u' }),
    );
    const out = String(x.toolResults.map((r: any) => r.payload.result));
    assert.match(out, /written by the agent/);
    assert.match(out, /65532/);
  });
});
