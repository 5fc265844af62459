// `llamapp serve` driven by the official Anthropic Node SDK (node --test); see server.mjs.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { startServer } from "./server.mjs";

let server;
let client;
let modelId;

before(async () => {
  server = await startServer(["-c", "2048", "-t", "2", "--parallel", "2", "--api-key", "sdk-key"]);
  // The SDK sends the key as x-api-key.
  client = new Anthropic({ apiKey: "sdk-key", baseURL: `http://127.0.0.1:${server.port}` });
  const models = await fetch(`http://127.0.0.1:${server.port}/v1/models`, {
    headers: { "x-api-key": "sdk-key" },
  }).then((r) => r.json());
  modelId = models.data[0].id;
});

after(() => {
  server?.child.kill("SIGTERM");
});

const noThinking = { thinking: { type: "disabled" } };
const weather = {
  name: "get_weather",
  description: "Current weather in a city",
  input_schema: {
    type: "object",
    properties: { city: { type: "string", enum: ["Paris", "Rome"] } },
    required: ["city"],
  },
};

test("create", async () => {
  const m = await client.messages.create({
    model: modelId,
    system: "Be brief.",
    messages: [{ role: "user", content: [{ type: "text", text: "Hello" }] }],
    max_tokens: 8,
    temperature: 0,
    ...noThinking,
  });
  assert.equal(m.type, "message");
  assert.equal(m.role, "assistant");
  assert.match(m.id, /^msg_/);
  assert.equal(m.content[0].type, "text");
  assert.equal(typeof m.content[0].text, "string");
  assert.equal(m.stop_reason, "max_tokens");
  assert.equal(m.usage.output_tokens, 8);
  assert.ok(m.usage.input_tokens > 0);

  // The same prompt again: its prefix comes from the cache, and usage says so.
  const again = await client.messages.create({
    model: modelId,
    system: "Be brief.",
    messages: [{ role: "user", content: [{ type: "text", text: "Hello" }] }],
    max_tokens: 8,
    temperature: 0,
    ...noThinking,
  });
  assert.ok(again.usage.cache_read_input_tokens > 0);
  assert.equal(again.content[0].text, m.content[0].text);
});

test("stream: the SDK assembles the same message from the events", async () => {
  const stream = client.messages.stream({
    model: modelId,
    messages: [{ role: "user", content: "Tell me a story" }],
    max_tokens: 6,
    temperature: 0,
    ...noThinking,
  });
  const types = [];
  let text = "";
  stream.on("streamEvent", (e) => types.push(e.type));
  stream.on("text", (t) => (text += t));
  const m = await stream.finalMessage();
  assert.equal(types[0], "message_start");
  assert.equal(types.at(-1), "message_stop");
  assert.ok(types.includes("content_block_delta"));
  assert.equal(m.content[0].type, "text");
  assert.equal(m.content[0].text, text);
  assert.equal(m.stop_reason, "max_tokens");
  assert.equal(m.usage.output_tokens, 6);
});

test("a forced tool, then its result", async () => {
  const m = await client.messages.create({
    model: modelId,
    messages: [{ role: "user", content: "What is the weather in Rome?" }],
    tools: [weather],
    tool_choice: { type: "tool", name: "get_weather" },
    max_tokens: 48,
    temperature: 0,
    ...noThinking,
  });
  const call = m.content.find((b) => b.type === "tool_use");
  assert.ok(call, JSON.stringify(m.content));
  assert.equal(call.name, "get_weather");
  assert.ok(["Paris", "Rome"].includes(call.input.city));
  assert.ok(["tool_use", "max_tokens"].includes(m.stop_reason));

  const next = await client.messages.create({
    model: modelId,
    messages: [
      { role: "user", content: "What is the weather in Rome?" },
      { role: "assistant", content: m.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: "sunny, 24 C" }] },
    ],
    tools: [weather],
    tool_choice: { type: "none" },
    max_tokens: 8,
    ...noThinking,
  });
  assert.equal(next.content[0].type, "text");
  assert.equal(next.content.filter((b) => b.type === "tool_use").length, 0);
});

test("a forced tool, streamed", async () => {
  const stream = client.messages.stream({
    model: modelId,
    messages: [{ role: "user", content: "Weather in Paris?" }],
    tools: [weather],
    tool_choice: { type: "any" },
    max_tokens: 48,
    temperature: 0,
    ...noThinking,
  });
  // The model may go on to a second call, which max_tokens cuts: each block has its own deltas.
  const partial = [];
  stream.on("streamEvent", (event) => {
    if (event.type === "content_block_delta" && event.delta.type === "input_json_delta")
      partial[event.index] = (partial[event.index] ?? "") + event.delta.partial_json;
  });
  const m = await stream.finalMessage();
  const call = m.content[0];
  assert.equal(call.type, "tool_use", JSON.stringify(m.content));
  assert.equal(call.name, "get_weather");
  assert.deepEqual(call.input, JSON.parse(partial[0]));
});

test("count_tokens", async () => {
  const short = await client.messages.countTokens({
    model: modelId,
    messages: [{ role: "user", content: "Hi" }],
  });
  const long = await client.messages.countTokens({
    model: modelId,
    system: "You are a helpful assistant who answers in French.",
    messages: [{ role: "user", content: "Hi" }],
  });
  assert.ok(short.input_tokens > 0);
  assert.ok(long.input_tokens > short.input_tokens);
});

test("errors surface as the SDK's typed errors", async () => {
  await assert.rejects(
    client.messages.create({ model: modelId, messages: [{ role: "user", content: "x" }], max_tokens: 0 }),
    (e) => e instanceof Anthropic.BadRequestError && e.error?.type === "error" &&
      e.error.error.type === "invalid_request_error",
  );
  // A server of one model answers Claude's names with it, and says which model answered.
  const anyName = await client.messages.create({ model: "claude-sonnet-4-5", messages: [{ role: "user", content: "x" }], max_tokens: 2 });
  assert.equal(anyName.model, modelId);
  const anonymous = new Anthropic({ apiKey: "wrong", baseURL: client.baseURL });
  await assert.rejects(
    anonymous.messages.create({ model: modelId, messages: [{ role: "user", content: "x" }], max_tokens: 4 }),
    (e) => e instanceof Anthropic.AuthenticationError && e.error.error.type === "authentication_error",
  );
  // The server keeps serving.
  const m = await client.messages.create({ model: modelId, messages: [{ role: "user", content: "x" }], max_tokens: 2 });
  assert.equal(m.usage.output_tokens, 2);
});
