// `llamapp serve` driven by the official OpenAI Node SDK (node --test); see server.mjs.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startServer } from "./server.mjs";
import OpenAI from "openai";

let server;
let client;
let modelId;

before(async () => {
  server = await startServer(["-c", "2048", "-t", "2", "--parallel", "2", "--api-key", "sdk-key"]);
  client = new OpenAI({ apiKey: "sdk-key", baseURL: `http://127.0.0.1:${server.port}/v1` });
});

after(() => {
  server?.child.kill("SIGTERM");
});

test("models", async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  modelId = list.data[0].id;
  assert.equal(list.data[0].object, "model");
});

test("chat", async () => {
  const r = await client.chat.completions.create({
    model: modelId,
    messages: [
      { role: "system", content: "Be brief." },
      { role: "user", content: [{ type: "text", text: "Hello" }] },
    ],
    max_tokens: 8,
    temperature: 0,
  });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.equal(r.usage.completion_tokens, 8);
});

test("streamed chat with usage", async () => {
  const stream = await client.chat.completions.create({
    model: modelId,
    messages: [{ role: "user", content: "Tell me a story" }],
    max_completion_tokens: 6,
    stream: true,
    stream_options: { include_usage: true },
  });
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length && chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.ok(chunks >= 3);
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 6);
});

test("completions", async () => {
  const r = await client.completions.create({ model: modelId, prompt: "Once upon a time", max_tokens: 5 });
  assert.equal(r.object, "text_completion");
  assert.equal(typeof r.choices[0].text, "string");
  assert.equal(r.usage.completion_tokens, 5);
});

test("response_format json_schema gives parseable, valid JSON", async () => {
  const r = await client.chat.completions.create({
    model: modelId,
    messages: [{ role: "user", content: "Give me a number" }],
    max_tokens: 64,
    response_format: {
      type: "json_schema",
      json_schema: {
        name: "number",
        strict: true,
        schema: {
          type: "object",
          properties: { value: { type: "integer" } },
          required: ["value"],
          additionalProperties: false,
        },
      },
    },
  });
  const parsed = JSON.parse(r.choices[0].message.content);
  assert.deepEqual(Object.keys(parsed), ["value"]);
  assert.ok(Number.isInteger(parsed.value));
});

// Small argument spaces let a random-weight model finish its call; the template's grammar forces
// the call itself. Thinking is off because a random model's thinking block never ends.
const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather in a city",
      parameters: {
        type: "object",
        properties: { city: { type: "string", enum: ["Paris", "Rome"] } },
        required: ["city"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "get_time",
      description: "Local time",
      parameters: { type: "object", properties: { utc: { type: "boolean" } }, required: ["utc"] },
    },
  },
];
const noThinking = { chat_template_kwargs: { enable_thinking: false } };

test("tools: a call forced by name", async () => {
  const r = await client.chat.completions.create({
    model: modelId,
    messages: [{ role: "user", content: "What is the weather in Rome?" }],
    tools,
    tool_choice: { type: "function", function: { name: "get_weather" } },
    max_tokens: 48,
    temperature: 0,
    ...noThinking,
  });
  const message = r.choices[0].message;
  assert.equal(message.tool_calls.length, 1);
  const call = message.tool_calls[0];
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "get_weather");
  assert.match(call.id, /^call_/);
  assert.ok(["Paris", "Rome"].includes(JSON.parse(call.function.arguments).city));
  assert.ok(["tool_calls", "length"].includes(r.choices[0].finish_reason));

  // The result goes back as a tool message and the conversation continues.
  const next = await client.chat.completions.create({
    model: modelId,
    messages: [
      { role: "user", content: "What is the weather in Rome?" },
      message,
      { role: "tool", tool_call_id: call.id, content: "sunny, 24 C" },
    ],
    tools,
    tool_choice: "none",
    max_tokens: 4,
    ...noThinking,
  });
  assert.equal(typeof next.choices[0].message.content, "string");
  assert.equal(next.choices[0].message.tool_calls, undefined);
});

test("tools: a required call, streamed", async () => {
  const stream = await client.chat.completions.create({
    model: modelId,
    messages: [{ role: "user", content: "What time is it?" }],
    tools: [tools[1]],
    tool_choice: "required",
    parallel_tool_calls: false,
    max_tokens: 96,
    temperature: 0,
    stream: true,
    ...noThinking,
  });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (choice.finish_reason) finish = choice.finish_reason;
    for (const d of choice.delta.tool_calls ?? []) {
      if (!calls[d.index]) calls[d.index] = { id: d.id, name: d.function.name, arguments: "" };
      calls[d.index].arguments += d.function.arguments ?? "";
    }
  }
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, "get_time");
  assert.match(calls[0].id, /^call_/);
  assert.equal(typeof JSON.parse(calls[0].arguments).utc, "boolean");
  // One call and the reply ends: the grammar allows no second one.
  assert.equal(finish, "tool_calls");
});

test("tools: the SDK's stream helper assembles the call", async () => {
  const runner = client.chat.completions.stream({
    model: modelId,
    messages: [{ role: "user", content: "Weather in Paris?" }],
    tools,
    tool_choice: { type: "function", function: { name: "get_weather" } },
    max_tokens: 48,
    temperature: 0,
    ...noThinking,
  });
  const done = await runner.finalChatCompletion();
  const call = done.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, "get_weather");
  assert.ok(["Paris", "Rome"].includes(JSON.parse(call.function.arguments).city));
});

test("embeddings as floats and base64", async () => {
  const floats = await client.embeddings.create({ model: modelId, input: ["hello", "world"], encoding_format: "float" });
  assert.equal(floats.data.length, 2);
  const dims = floats.data[0].embedding.length;
  assert.ok(dims > 0);
  // The SDK asks for base64 by default and decodes it.
  const b64 = await client.embeddings.create({ model: modelId, input: "hello" });
  assert.equal(b64.data[0].embedding.length, dims);
  b64.data[0].embedding.forEach((x, i) => assert.ok(Math.abs(x - floats.data[0].embedding[i]) < 1e-6));
  const cut = await client.embeddings.create({ model: modelId, input: "hello", dimensions: 4, encoding_format: "float" });
  assert.equal(cut.data[0].embedding.length, 4);
});

test("errors surface as the SDK's typed errors", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: modelId, messages: [], max_tokens: 4 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "messages",
  );
  // A server of one model answers any name with it, as llama-server does, and says which.
  const anyName = await client.chat.completions.create({ model: "gpt-4", messages: [{ role: "user", content: "x" }], max_tokens: 2 });
  assert.equal(anyName.model, modelId);
  const wrongKey = new OpenAI({ apiKey: "wrong", baseURL: client.baseURL, maxRetries: 0 });
  await assert.rejects(wrongKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  await assert.rejects(
    client.chat.completions.create({
      model: modelId,
      messages: [{ role: "user", content: "x" }],
      tools,
      tool_choice: { type: "function", function: { name: "missing" } },
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "tool_choice",
  );
  await assert.rejects(
    client.completions.create({ model: modelId, prompt: "x", max_tokens: 4, temperature: 9 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "temperature",
  );
});

// The Responses API. Thinking is off (reasoning effort "none") for the reason given above.
const responseTools = tools.map((t) => ({ type: "function", ...t.function }));

test("responses: create, and continue by previous_response_id", async () => {
  const first = await client.responses.create({
    model: modelId,
    instructions: "Answer in one line.",
    input: "Tell me a story",
    max_output_tokens: 8,
    temperature: 0,
    reasoning: { effort: "none" },
  });
  assert.equal(first.object, "response");
  assert.match(first.id, /^resp_/);
  assert.equal(first.output[0].type, "message");
  assert.match(first.output[0].id, /^msg_/);
  assert.equal(typeof first.output_text, "string");
  assert.equal(first.usage.output_tokens, 8);
  assert.equal(first.status, "incomplete");

  const next = await client.responses.create({
    model: modelId,
    previous_response_id: first.id,
    instructions: "Answer in one line.", // not carried over from the previous response
    input: [{ role: "user", content: [{ type: "input_text", text: "And then?" }] }],
    max_output_tokens: 4,
    reasoning: { effort: "none" },
  });
  assert.equal(next.previous_response_id, first.id);
  // The first turn's prompt is read back from the cache, not computed again, all but the empty
  // thinking block that Qwen3's template puts after the last assistant header only.
  assert.ok(next.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 8,
            JSON.stringify([first.usage, next.usage]));
  const kept = await client.responses.retrieve(next.id);
  assert.equal(kept.output_text, next.output_text);
  await client.responses.delete(next.id);
  await assert.rejects(client.responses.retrieve(next.id), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(
    client.responses.create({ model: modelId, previous_response_id: next.id, input: "x" }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "previous_response_id",
  );
});

test("responses: streamed, and the stream helper's final response", async () => {
  const stream = await client.responses.create({
    model: modelId,
    input: "Hello",
    max_output_tokens: 6,
    temperature: 0,
    stream: true,
    reasoning: { effort: "none" },
  });
  const types = [];
  let text = "";
  let final = null;
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === "response.output_text.delta") text += event.delta;
    if (event.type === "response.incomplete") final = event.response;
  }
  assert.equal(types[0], "response.created");
  assert.equal(types.at(-1), "response.incomplete");
  assert.equal(final.output[0].content[0].text, text);

  const helper = client.responses.stream({
    model: modelId,
    input: "Hello",
    max_output_tokens: 6,
    temperature: 0,
    reasoning: { effort: "none" },
  });
  // Assembled by the helper from the events alone.
  const done = await helper.finalResponse();
  assert.equal(done.output[0].content[0].text, text);
});

test("responses: a function tool forced by name, its output sent back", async () => {
  const r = await client.responses.create({
    model: modelId,
    input: "What is the weather in Rome?",
    tools: responseTools,
    tool_choice: { type: "function", name: "get_weather" },
    max_output_tokens: 48,
    temperature: 0,
    reasoning: { effort: "none" },
  });
  const call = r.output.find((item) => item.type === "function_call");
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, "get_weather");
  assert.match(call.id, /^fc_/);
  assert.ok(["Paris", "Rome"].includes(JSON.parse(call.arguments).city));

  const next = await client.responses.create({
    model: modelId,
    previous_response_id: r.id,
    input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny, 24 C" }],
    tools: responseTools,
    tool_choice: "none",
    max_output_tokens: 4,
    reasoning: { effort: "none" },
  });
  assert.equal(next.output.filter((item) => item.type === "function_call").length, 0);
  assert.equal(typeof next.output_text, "string");
});

test("responses: a required call, streamed as argument deltas", async () => {
  const stream = await client.responses.create({
    model: modelId,
    input: "What time is it?",
    tools: [responseTools[1]],
    tool_choice: "required",
    parallel_tool_calls: false,
    max_output_tokens: 96,
    temperature: 0,
    stream: true,
    reasoning: { effort: "none" },
  });
  let args = "";
  let done = null;
  for await (const event of stream) {
    if (event.type === "response.function_call_arguments.delta") args += event.delta;
    if (event.type === "response.function_call_arguments.done") done = event;
  }
  assert.equal(done.name, "get_time");
  assert.equal(done.arguments, args);
  assert.equal(typeof JSON.parse(args).utc, "boolean");
});
