/**
 * Approval waits in the agent's stream: a daemon whose policy holds `curl` commands for an operator; the Mastra
 * tool announces each wait as a `data-ironclaw-approval` chunk carrying the approval id, and the workspace
 * sandbox calls its `onApproval`.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createOpenAI } from '@ai-sdk/openai';
import { Agent } from '@mastra/core/agent';
import type { MastraModelConfig } from '@mastra/core/llm';
import { IronClawSandbox } from '../src/index.js';
import { ApprovalDeniedError } from '../src/index.js';
import type { Approval } from '../src/index.js';
import { Workspace } from '@mastra/core/workspace';
import { APPROVAL_CHUNK_TYPE, IronClawWorkspaceSandbox, ironClawToolHooks, makeSandboxTool } from '../src/mastra.js';
import { daemonPerFile } from './helpers/daemon.js';

process.env['MASTRA_TELEMETRY_DISABLED'] = '1';

let sbx: IronClawSandbox;
// curl waits for an operator; so does anything reading the cgroup (the resources getInfo reads)
const srv = daemonPerFile({ policy: { exec: { require_approval: ['^curl ', 'sys/fs/cgroup'] } } }, async (s) => {
  sbx = await IronClawSandbox.create(s.conn);
  s.cleanup.push(() => sbx.destroy());
});

async function decide(id: string, how: 'approve' | 'deny', reason?: string) {
  const r = await srv.d.operator('POST', `/v1/approvals/${id}/${how}`, reason ? { reason } : {});
  assert.equal(r.status, 200, JSON.stringify(r.body));
}

const mockCall = (name: string, args: unknown) => JSON.stringify({ mock_tool_calls: [{ name, arguments: args }] });

/**
 * An agent on the daemon's model proxy (mock provider) that runs commands: with `shell` as its `sandbox_shell`
 * tool, or else in a Workspace on sbx with ironClawToolHooks().
 */
async function commandAgent(id: string, name: string, shell?: ReturnType<typeof makeSandboxTool>): Promise<Agent> {
  const access = await sbx.modelAccess();
  const model = createOpenAI({ baseURL: access.openaiBaseUrl, apiKey: access.token }).chat('gpt-4o-mini');
  const config = { id, name, instructions: 'Run commands.', model: model as unknown as MastraModelConfig };
  if (shell) return new Agent({ ...config, tools: { sandbox_shell: shell } });
  const sandbox = new IronClawWorkspaceSandbox({ sandbox: sbx });
  return new Agent({ ...config, workspace: new Workspace({ sandbox, tools: { hooks: ironClawToolHooks() } }) });
}

/** Streams `prompt` through `agent` and returns every chunk; each approval chunk goes to `onApproval` as it comes. */
async function streamChunks(agent: Agent, prompt: string, onApproval: (c: any) => Promise<void>): Promise<any[]> {
  const s = await agent.stream(prompt);
  const chunks: any[] = [];
  for await (const c of s.fullStream as AsyncIterable<any>) {
    chunks.push(c);
    if (c.type === APPROVAL_CHUNK_TYPE) await onApproval(c);
  }
  return chunks;
}

describe('approval waits as stream chunks', () => {
  test('an Agent stream carries data-ironclaw-approval with the id while the command waits', async () => {
    const agent = await commandAgent('approval-agent', 'Approval Agent', makeSandboxTool(sbx));
    const chunks = await streamChunks(agent, mockCall('sandbox_shell', { command: 'curl http://example.com/x' }), async (c) => {
      assert.match(c.data.approvalId, /^apr-/);
      assert.equal(c.data.kind, 'exec.command');
      assert.equal(c.data.state, 'pending');
      assert.equal(c.data.sandboxId, sbx.id);
      assert.equal(typeof c.data.toolCallId, 'string');
      await decide(c.data.approvalId, 'deny', 'not now');
    });
    const approvals = chunks.filter((c) => c.type === APPROVAL_CHUNK_TYPE);
    assert.equal(approvals.length, 1, chunks.map((c) => c.type).join(','));
    const result = chunks.find((c) => c.type === 'tool-result');
    assert.equal(result.payload.result.denied, true);
    assert.match(result.payload.result.output, /not now/);
  });

  test('requireApproval: the tool.call approval it files is announced too', async () => {
    const seen: any[] = [];
    const writer = {
      custom: async (chunk: any) => {
        seen.push(chunk);
        if (chunk.type === APPROVAL_CHUNK_TYPE) await decide(chunk.data.approvalId, 'approve');
      },
    };
    const tool = makeSandboxTool(sbx, { requireApproval: true });
    const out = await tool.execute!({ command: 'echo gated' }, { writer, agent: { toolCallId: 'call-9' } } as any);
    assert.deepEqual(out, { output: 'gated\n[exit 0]', exitCode: 0 });
    const a = seen.filter((c) => c.type === APPROVAL_CHUNK_TYPE);
    assert.equal(a.length, 1);
    assert.equal(a[0].data.kind, 'tool.call');
    assert.equal(a[0].data.toolCallId, 'call-9');
  });

  test("Mastra's execute_command tool through an Agent stream: the chunk, with ironClawToolHooks()", async () => {
    const agent = await commandAgent('ws-approval-agent', 'Workspace Approval Agent');
    const prompt = mockCall('mastra_workspace_execute_command', { command: 'curl http://example.com/y' });
    const chunks = await streamChunks(agent, prompt, async (c) => {
      assert.match(c.data.approvalId, /^apr-/);
      assert.equal(c.data.kind, 'exec.command');
      assert.equal(typeof c.data.toolCallId, 'string');
      await decide(c.data.approvalId, 'deny', 'no fetching');
    });
    assert.equal(chunks.filter((c) => c.type === APPROVAL_CHUNK_TYPE).length, 1, chunks.map((c) => c.type).join(','));
    const result = chunks.find((c) => c.type === 'tool-result');
    assert.match(JSON.stringify(result.payload.result), /denied: .*no fetching/);
  });

  test('ironClawToolHooks: parallel tool calls each get their own approval chunk', async () => {
    const agent = await commandAgent('ws-approval-agent-2', 'Workspace Approval Agent 2');
    const prompt = JSON.stringify({
      mock_tool_calls: [
        { name: 'mastra_workspace_execute_command', arguments: { command: 'curl http://example.com/one' } },
        { name: 'mastra_workspace_execute_command', arguments: { command: 'curl http://example.com/two' } },
      ],
    });
    const chunks = await streamChunks(agent, prompt, (c) => decide(c.data.approvalId, 'deny'));
    const calls = chunks.filter((c) => c.type === 'tool-call');
    const approvals = chunks.filter((c) => c.type === APPROVAL_CHUNK_TYPE);
    assert.equal(calls.length, 2, chunks.map((c) => c.type).join(','));
    assert.equal(approvals.length, 2);
    // each approval names the tool call whose command it holds
    for (const a of approvals) {
      const call = calls.find((c) => c.payload.toolCallId === a.data.toolCallId);
      assert.ok(call, `no tool call ${a.data.toolCallId}`);
      assert.match(a.data.summary, new RegExp(call.payload.args.command.split('/').pop()));
    }
  });

  test('the workspace sandbox calls onApproval before it waits', async () => {
    const filed: Approval[] = [];
    const ws = new IronClawWorkspaceSandbox({
      sandbox: sbx,
      onApproval: (a) => {
        filed.push(a);
        void decide(a.id, 'deny');
      },
    });
    const r = await ws.executeCommand('curl', ['http://example.com/']);
    assert.equal(r.exitCode, -1);
    assert.equal(filed.length, 1);
    assert.match(filed[0]!.id, /^apr-/);
  });

  test('getInfo under a policy that holds its usage reading: no resources, and one approval only, not one per call', async () => {
    const ws = new IronClawWorkspaceSandbox({ sandbox: sbx });
    await ws.start();
    for (let i = 0; i < 3; i++) assert.equal((await ws.getInfo()).resources, undefined);
    const r = await srv.d.operator('GET', `/v1/approvals?state=pending&session=${sbx.id}&kind=exec.command`);
    const held = (r.body.approvals as Array<{ id: string }>) ?? [];
    assert.equal(held.length, 1, JSON.stringify(r.body));
    for (const a of held) await decide(a.id, 'deny');
  });

  test('a background spawn the policy holds waits for the decision: approved it runs, denied it is refused', async () => {
    const ws = new IronClawWorkspaceSandbox({
      sandbox: sbx,
      onApproval: (a) => void decide(a.id, /deny-me/.test(a.summary) ? 'deny' : 'approve'),
    });
    const h = await ws.processes!.spawn('curl --version >/dev/null 2>&1; echo approved-run');
    const r = await h.wait();
    assert.equal(r.stdout, 'approved-run\n');
    await assert.rejects(ws.processes!.spawn('curl http://deny-me.example/'), ApprovalDeniedError);

    const { processTools } = await import('../src/ai-sdk.js');
    const watcher = setInterval(async () => {
      const p = await srv.d.operator('GET', `/v1/approvals?state=pending&session=${sbx.id}`);
      for (const a of (p.body.approvals as Array<{ id: string }>) ?? []) await srv.d.operator('POST', `/v1/approvals/${a.id}/deny`, {});
    }, 100);
    try {
      const out: any = await processTools(sbx).start_process.execute!({ command: 'curl http://x.example/' }, { toolCallId: 't', messages: [] } as any);
      assert.equal(out.pid, -1);
      assert.equal(out.denied, true);
      assert.match(out.output, /denied/);
    } finally {
      clearInterval(watcher);
    }
  });
});
