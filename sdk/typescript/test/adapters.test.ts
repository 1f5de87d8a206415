import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs } from 'ai';
import { IronClawSandbox } from '../src/index.js';
import { sandboxTool as aiSdkTool } from '../src/ai-sdk.js';
import { sandboxTool as langchainTool } from '../src/langchain.js';
import { startDaemon } from './helpers/daemon.js';
import type { Daemon } from './helpers/daemon.js';

let d: Daemon;
let sbx: IronClawSandbox;

before(async () => {
  d = await startDaemon();
  sbx = await IronClawSandbox.create({ addr: d.addr, token: d.agentToken });
});
after(async () => {
  await sbx?.destroy().catch(() => undefined);
  await d?.stop();
});

describe('ai-sdk', () => {
  test('execute runs the command in the sandbox', async () => {
    const t = aiSdkTool(sbx);
    assert.match(String(t.description), /isolated Linux sandbox/);
    const out = await t.execute!({ command: 'echo hi; id -u' }, { toolCallId: 'c1', messages: [] } as any);
    assert.deepEqual(out, { output: 'hi\n65532\n[exit 0]', exitCode: 0 });
  });

  test('abortSignal cancels the command', async () => {
    const t = aiSdkTool(sbx);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 200);
    await assert.rejects(
      Promise.resolve(t.execute!({ command: 'sleep 20' }, { toolCallId: 'c2', messages: [], abortSignal: ac.signal } as any)),
      { code: 'aborted' },
    );
  });

  test('generateText drives it through the IronClaw model proxy (mock provider)', async () => {
    const access = await sbx.modelAccess();
    const openai = createOpenAI({ baseURL: access.openaiBaseUrl, apiKey: access.token });
    const res = await generateText({
      model: openai.chat('gpt-4o-mini'),
      tools: { sandbox_shell: aiSdkTool(sbx) },
      stopWhen: stepCountIs(3),
      prompt: JSON.stringify({ mock_tool_calls: [{ name: 'sandbox_shell', arguments: { command: 'echo via-ai-sdk' } }] }),
    });
    const results = res.steps.flatMap((s) => s.toolResults.map((r) => r.output));
    assert.deepEqual(results, [{ output: 'via-ai-sdk\n[exit 0]', exitCode: 0 }]);
    assert.match(res.text, /via-ai-sdk/);
  });
});

describe('langchain', () => {
  test('invoke runs the command and returns the text for the model', async () => {
    const t = langchainTool(sbx);
    assert.equal(t.name, 'sandbox_shell');
    assert.match(t.description, /isolated Linux sandbox/);
    const out = await t.invoke({ command: 'echo from-langchain; exit 5' });
    assert.equal(out, 'from-langchain\n[exit 5]');
  });

  test('invoke with a tool call gives a ToolMessage', async () => {
    const t = langchainTool(sbx, { name: 'shell' });
    const msg: any = await t.invoke({
      id: 'call-7',
      name: 'shell',
      args: { command: 'printf x' },
      type: 'tool_call',
    });
    assert.equal(msg.tool_call_id, 'call-7');
    assert.equal(msg.content, 'x\n[exit 0]');
  });

  test('the schema rejects bad input', async () => {
    const t = langchainTool(sbx);
    await assert.rejects(t.invoke({ command: 42 } as any));
  });
});
