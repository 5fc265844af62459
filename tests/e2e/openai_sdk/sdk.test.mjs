// `llamapp serve` driven by the official OpenAI Node SDK (node --test).
// LLAMAPP_BIN: the llamapp binary; LLAMAPP_MODEL: a GGUF with a real tokenizer and chat template.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import OpenAI from "openai";

const bin = process.env.LLAMAPP_BIN;
const modelPath = process.env.LLAMAPP_MODEL;
let server;
let client;
let modelId;

function startServer(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, ["serve", "--port", "0", "-m", modelPath, ...args], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let log = "";
    const timer = setTimeout(() => reject(new Error("the server did not start:\n" + log)), 60000);
    child.stderr.on("data", (chunk) => {
      log += chunk;
      const m = log.match(/http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ child, port: Number(m[1]) });
      }
    });
    child.on("exit", (code) => reject(new Error(`the server exited (${code}):\n${log}`)));
  });
}

before(async () => {
  assert.ok(bin && modelPath, "LLAMAPP_BIN and LLAMAPP_MODEL must be set");
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
  await assert.rejects(
    client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found",
  );
  const wrongKey = new OpenAI({ apiKey: "wrong", baseURL: client.baseURL, maxRetries: 0 });
  await assert.rejects(wrongKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  await assert.rejects(
    client.completions.create({ model: modelId, prompt: "x", max_tokens: 4, temperature: 9 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "temperature",
  );
});
