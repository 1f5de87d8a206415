/**
 * The OpenAI Agents SDK's own E2B sandbox client (`E2BSandboxClient` from `@openai/agents-extensions/sandbox/e2b`,
 * which drives the official `e2b` SDK) on IronClaw's E2B-compatible API: a SandboxAgent, run by the Agents SDK's
 * Runner on the daemon's offline mock model, materializes its manifest in the sandbox and runs its `exec_command`
 * tool there; a session paused on close is resumed by the client. Effects are checked through IronClaw's native API.
 *
 * E2BSandboxClient passes no connection options to the e2b SDK, so it is configured by the environment alone:
 * E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (set here for this file's process).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { OpenAIProvider, Runner } from '@openai/agents';
import { Manifest, SandboxAgent } from '@openai/agents/sandbox';
import { E2BSandboxClient } from '@openai/agents-extensions/sandbox/e2b';
import { Sandbox } from 'e2b';
import { IronClawSandbox } from '../src/index.js';
import { daemonPerFile } from './helpers/daemon.js';

process.env['OPENAI_AGENTS_DISABLE_TRACING'] = '1';

const srv = daemonPerFile({}, (s) => {
  process.env['E2B_API_URL'] = `${s.d.addr}/e2b`;
  process.env['E2B_SANDBOX_URL'] = `${s.d.addr}/e2b`;
  process.env['E2B_API_KEY'] = readFileSync(join(s.d.dataDir, 'e2b.key'), 'utf8').trim();
});

const mockCall = (name: string, args: unknown) => JSON.stringify({ mock_tool_calls: [{ name, arguments: args }] });

/** A Runner whose models are the daemon's mock provider, through its model proxy (Chat Completions). */
async function runner(): Promise<Runner> {
  const access = await new IronClawSandbox(srv.conn).modelAccess();
  const modelProvider = new OpenAIProvider({ apiKey: access.token, baseURL: access.openaiBaseUrl, useResponses: false });
  return new Runner({ modelProvider, tracingDisabled: true });
}

describe('OpenAI Agents SDK: E2BSandboxClient', () => {
  test('a SandboxAgent runs exec_command in the E2B sandbox; manifest files are there; close kills it', async (t) => {
    const client = new E2BSandboxClient({ metadata: { suite: 'openai-agents' }, timeout: 300 });
    const session = await client.create(
      new Manifest({ entries: { 'task.txt': { type: 'file', content: 'from the manifest\n' } } }),
    );
    const id = session.state.sandboxId;
    t.after(() => Sandbox.kill(id).catch(() => undefined));
    assert.match(id, /^sbx-/);
    const n = new IronClawSandbox({ ...srv.conn, id });
    assert.equal(await n.readTextFile('/workspace/task.txt'), 'from the manifest\n');

    const agent = new SandboxAgent({ name: 'E2B worker', instructions: 'Work in the sandbox.', model: 'gpt-4o-mini' });
    const result = await (await runner()).run(
      agent,
      mockCall('exec_command', { cmd: 'cat task.txt; echo "made by the agent" > made.txt; pwd; id -u' }),
      { sandbox: { client, session } },
    );
    const out = String(result.finalOutput);
    assert.match(out, /from the manifest/);
    assert.match(out, /\/workspace/);
    assert.match(out, /65532/);
    assert.equal(await n.readTextFile('/workspace/made.txt'), 'made by the agent\n');

    const listed = await Sandbox.list({ query: { metadata: { suite: 'openai-agents' } } }).nextItems();
    assert.deepEqual(listed.map((s) => s.sandboxId), [id]);

    await session.close();
    assert.equal(await Sandbox.kill(id), false, 'close without pauseOnExit kills the sandbox');
  });

  test('pauseOnExit: close pauses; resume(state) connects to the same sandbox, files kept', async (t) => {
    const client = new E2BSandboxClient({ pauseOnExit: true, timeout: 300 });
    const session = await client.create(new Manifest({}));
    const id = session.state.sandboxId;
    t.after(() => Sandbox.kill(id).catch(() => undefined));
    await session.execCommand!({ cmd: 'echo kept > kept.txt' });
    await session.close();
    assert.equal((await Sandbox.getInfo(id)).state, 'paused');
    assert.equal(client.canPersistOwnedSessionState(session.state), true);

    const state = await client.deserializeSessionState(await client.serializeSessionState(session.state));
    const again = await client.resume(state);
    assert.equal(again.state.sandboxId, id, 'resumed, not recreated');
    assert.equal((await Sandbox.getInfo(id)).state, 'running');
    assert.equal(await new IronClawSandbox({ ...srv.conn, id }).readTextFile('/workspace/kept.txt'), 'kept\n');
    await again.delete();
    assert.equal(await Sandbox.kill(id), false);
  });
});
