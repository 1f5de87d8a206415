// A tool loop with each official SDK against the mock: the model asks for a
// tool (driven by a mock_tool_calls directive), the "agent" runs it, sends
// the result back, and the model's answer must quote it. Prints one line per
// check; exits non-zero on the first failure.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const base = process.env.MOCK_BASE;
const directive = 'Run it: {"mock_tool_calls":[{"name":"shell","arguments":{"command":"id -u"}}]}';
const fail = (msg) => { console.log("FAIL " + msg); process.exit(1); };
const shell = (args) => (JSON.parse(args).command === "id -u" ? "65532" : "unexpected");

const openai = new OpenAI({ baseURL: base + "/openai/v1", apiKey: "icp_test" });
const tools = [{ type: "function", function: { name: "shell", description: "run", parameters: { type: "object", properties: { command: { type: "string" } } } } }];

// Chat Completions, not streaming.
{
  const messages = [{ role: "user", content: directive }];
  const r1 = await openai.chat.completions.create({ model: "mock-gpt", messages, tools });
  const call = r1.choices[0].message.tool_calls?.[0];
  if (!call || call.function.name !== "shell") fail("chat: no tool call");
  messages.push(r1.choices[0].message, { role: "tool", tool_call_id: call.id, content: shell(call.function.arguments) });
  const r2 = await openai.chat.completions.create({ model: "mock-gpt", messages, tools });
  if (!r2.choices[0].message.content.includes("65532")) fail("chat: answer does not quote the result: " + r2.choices[0].message.content);
  console.log("ok chat");
}
// Chat Completions, streaming, reassembled the way agent frameworks do.
{
  const stream = await openai.chat.completions.create({ model: "mock-gpt", stream: true, messages: [{ role: "user", content: directive }], tools });
  let name = "", args = "";
  for await (const chunk of stream) {
    const tc = chunk.choices[0]?.delta?.tool_calls?.[0];
    if (tc?.function?.name) name += tc.function.name;
    if (tc?.function?.arguments) args += tc.function.arguments;
  }
  if (name !== "shell" || shell(args) !== "65532") fail(`chat stream: ${name} ${args}`);
  console.log("ok chat-stream");
}
// Responses API.
{
  const rtools = [{ type: "function", name: "shell", parameters: { type: "object", properties: { command: { type: "string" } } } }];
  const r1 = await openai.responses.create({ model: "mock-gpt", input: directive, tools: rtools });
  const call = r1.output.find((o) => o.type === "function_call");
  if (!call) fail("responses: no function_call");
  const r2 = await openai.responses.create({
    model: "mock-gpt", tools: rtools,
    input: [{ role: "user", content: directive }, call, { type: "function_call_output", call_id: call.call_id, output: shell(call.arguments) }],
  });
  if (!r2.output_text.includes("65532")) fail("responses: " + r2.output_text);
  console.log("ok responses");
}
// Anthropic Messages, streaming, with the SDK's own accumulator.
{
  const anthropic = new Anthropic({ baseURL: base + "/anthropic", apiKey: "icp_test" });
  const atools = [{ name: "shell", description: "run", input_schema: { type: "object", properties: { command: { type: "string" } } } }];
  const messages = [{ role: "user", content: directive }];
  const m1 = await anthropic.messages.stream({ model: "mock-claude", max_tokens: 100, messages, tools: atools }).finalMessage();
  const use = m1.content.find((b) => b.type === "tool_use");
  if (!use || m1.stop_reason !== "tool_use") fail("anthropic: no tool_use");
  messages.push({ role: "assistant", content: m1.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: shell(JSON.stringify(use.input)) }] });
  const m2 = await anthropic.messages.create({ model: "mock-claude", max_tokens: 100, messages, tools: atools });
  if (!m2.content[0].text.includes("65532")) fail("anthropic: " + m2.content[0].text);
  console.log("ok anthropic");
}
