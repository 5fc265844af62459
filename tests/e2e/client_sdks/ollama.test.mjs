// `llamapp serve` driven by the official Ollama JavaScript library (node --test), with a loopback
// hub for /api/pull; see server.mjs and fake_hub.mjs.
// LLAMAPP_HUB_MODEL: a small GGUF that the fake hub serves as tiny/llama-GGUF's Q4_0 file.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { Ollama } from "ollama";
import { startServer } from "./server.mjs";
import { commit, startFakeHub } from "./fake_hub.mjs";

const hubModelPath = process.env.LLAMAPP_HUB_MODEL;
if (!hubModelPath) throw new Error("LLAMAPP_HUB_MODEL must be set");
const hubModel = readFileSync(hubModelPath);
const hubFile = "llama-tiny-Q4_0.gguf";
const pulledName = "hf.co/tiny/llama-GGUF:Q4_0";

// A llamapp model id lists as `id:latest`.
const model = basename(process.env.LLAMAPP_MODEL, ".gguf") + ":latest";

let server;
let hub;
let cache;
let base;
let client;

before(async () => {
  hub = await startFakeHub({
    "tiny/llama-GGUF": { [hubFile]: hubModel, "README.md": Buffer.from("# tiny/llama-GGUF\n") },
  });
  // Hermetic: the loopback hub, reached directly, and a cache of the test's own.
  cache = mkdtempSync(join(tmpdir(), "llamapp-ollama-cache-"));
  const env = { MODEL_ENDPOINT: hub.endpoint, LLAMA_CACHE: cache };
  for (const name of ["HF_ENDPOINT", "HF_TOKEN", "HF_HUB_OFFLINE", "LLAMA_OFFLINE", "http_proxy", "HTTP_PROXY",
                      "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"])
    env[name] = undefined;
  // No --api-key: Ollama's API has no keys.
  server = await startServer(["-c", "2048", "-t", "2", "--parallel", "2"], env);
  base = `http://127.0.0.1:${server.port}`;
  client = new Ollama({ host: base });
});

after(async () => {
  if (server && server.child.exitCode === null) {
    server.child.kill("SIGTERM");
    await once(server.child, "exit");
  }
  await hub?.close();
  if (cache) rmSync(cache, { recursive: true, force: true });
});

const greedy = { temperature: 0, seed: 42 };
const hello = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Hello" },
];
// Thinking is off: a random-weight model's thinking block never ends, and `content` stays the
// whole reply. The client sets `stream` on the object it is given, so each call gets a new one.
const helloChat = (extra = {}) => ({
  model,
  messages: hello,
  think: false,
  options: { ...greedy, num_predict: 8 },
  ...extra,
});

async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

// Polls `check` until it holds; for what the server does after its reply (an unload).
async function eventually(check, what, ms = 30000) {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) assert.fail(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function assertTimings(r) {
  for (const k of ["total_duration", "load_duration", "prompt_eval_duration", "eval_duration"])
    assert.ok(Number.isInteger(r[k]) && r[k] >= 0, `${k}: ${r[k]}`);
  for (const k of ["total_duration", "prompt_eval_duration", "eval_duration"]) assert.ok(r[k] > 0, `${k}: ${r[k]}`);
  assert.ok(r.total_duration >= r.eval_duration && r.total_duration >= r.prompt_eval_duration, JSON.stringify(r));
  assert.ok(r.prompt_eval_count > 0);
  assert.ok(!Number.isNaN(Date.parse(r.created_at)), r.created_at);
}

const isResponseError = (status) => (e) => e.name === "ResponseError" && e.status_code === status && e.error.length > 0;

test("version, and the root says Ollama is running", async () => {
  const v = await client.version();
  assert.equal(typeof v.version, "string");
  assert.ok(v.version.length > 0);
  const root = await fetch(base + "/");
  assert.equal(root.status, 200);
  assert.match(root.headers.get("content-type"), /^text\/plain/);
  assert.equal(await root.text(), "Ollama is running");
  assert.equal((await fetch(base + "/", { method: "HEAD" })).status, 200);
});

test("list: the model as name:latest with its details", async () => {
  const { models } = await client.list();
  assert.equal(models.length, 1, JSON.stringify(models));
  const m = models[0];
  assert.equal(m.name, model);
  assert.equal(m.model, model);
  assert.ok(m.size > 0);
  assert.equal(typeof m.digest, "string");
  assert.ok(m.digest.length > 0);
  assert.ok(!Number.isNaN(Date.parse(m.modified_at)), m.modified_at);
  assert.equal(m.details.format, "gguf");
  assert.equal(m.details.family, "qwen3");
  assert.ok(Array.isArray(m.details.families));
  assert.equal(m.details.parent_model, "");
  assert.equal(typeof m.details.parameter_size, "string");
  assert.equal(typeof m.details.quantization_level, "string");
});

test("show: GGUF metadata, template and capabilities, by name with or without its tag", async () => {
  const s = await client.show({ model });
  assert.equal(s.model_info["general.architecture"], "qwen3");
  for (const c of ["completion", "tools", "thinking"])
    assert.ok(s.capabilities.includes(c), JSON.stringify(s.capabilities));
  assert.equal(s.details.format, "gguf");
  assert.ok(s.template.length > 0);
  assert.ok(!Number.isNaN(Date.parse(s.modified_at)), s.modified_at);
  const bare = await client.show({ model: model.replace(/:latest$/, "") });
  assert.deepEqual(bare.details, s.details);
});

test("chat, whole", async () => {
  const r = await client.chat(helloChat());
  assert.equal(r.model, model);
  assert.equal(r.message.role, "assistant");
  assert.equal(typeof r.message.content, "string");
  assert.equal(r.done, true);
  // Random weights never stop by themselves within 8 tokens.
  assert.equal(r.done_reason, "length");
  assert.equal(r.eval_count, 8);
  assertTimings(r);
});

test("chat, streamed: the same greedy text as whole, one done line and it is last", async () => {
  const whole = await client.chat(helloChat());
  const parts = await collect(await client.chat(helloChat({ stream: true })));
  assert.ok(parts.length >= 2);
  assert.equal(parts.filter((p) => p.done).length, 1);
  const last = parts.at(-1);
  assert.equal(last.done, true);
  assert.equal(last.done_reason, "length");
  assert.equal(last.eval_count, 8);
  assertTimings(last);
  for (const p of parts) {
    assert.equal(p.model, model);
    assert.equal(p.message.role, "assistant");
  }
  assert.equal(parts.map((p) => p.message.content).join(""), whole.message.content);
});

// The client always sends `stream`; Ollama's default, without it, is NDJSON.
test("chat without stream is NDJSON", async () => {
  const res = await fetch(`${base}/api/chat`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model, messages: hello, think: false, options: { ...greedy, num_predict: 4 } }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type"), /^application\/x-ndjson/);
  const lines = (await res.text()).split("\n").filter(Boolean).map((l) => JSON.parse(l));
  assert.equal(lines.filter((l) => l.done).length, 1);
  assert.equal(lines.at(-1).done, true);
  assert.equal(lines.at(-1).eval_count, 4);
});

// Small argument spaces let a random-weight model finish its call. It never chooses a tool by
// itself, so llamapp's `tool_choice: "required"` (OpenAI's spelling) forces one; the client sends
// the request object as given, unknown fields included.
const timeTool = {
  type: "function",
  function: {
    name: "get_time",
    description: "Local time",
    parameters: { type: "object", properties: { utc: { type: "boolean" } }, required: ["utc"] },
  },
};
const askTime = [{ role: "user", content: "What time is it?" }];

test("chat with a tool: a forced call, its arguments an object, the result sent back", async () => {
  const r = await client.chat({
    model,
    messages: askTime,
    tools: [timeTool],
    tool_choice: "required",
    think: false,
    options: { ...greedy, num_predict: 96 },
  });
  // Ollama has no switch for parallel calls, so a model may make several.
  assert.ok(r.message.tool_calls?.length >= 1, JSON.stringify(r.message));
  const call = r.message.tool_calls[0];
  assert.equal(call.function.name, "get_time");
  assert.equal(typeof call.function.arguments, "object");
  assert.equal(typeof call.function.arguments.utc, "boolean");

  const next = await client.chat({
    model,
    messages: [...askTime, r.message, { role: "tool", content: "12:00", tool_name: "get_time" }],
    tools: [timeTool],
    think: false,
    options: { ...greedy, num_predict: 4 },
  });
  assert.equal(next.done, true);
  assert.equal(typeof next.message.content, "string");
});

test("chat with a tool, streamed: the call arrives whole in one line", async () => {
  const parts = await collect(
    await client.chat({
      model,
      messages: askTime,
      tools: [timeTool],
      tool_choice: "required",
      think: false,
      stream: true,
      options: { ...greedy, num_predict: 96 },
    }),
  );
  const withCalls = parts.filter((p) => p.message.tool_calls?.length);
  assert.equal(withCalls.length, 1, JSON.stringify(parts));
  const calls = withCalls[0].message.tool_calls;
  assert.equal(calls[0].function.name, "get_time");
  assert.equal(typeof calls[0].function.arguments.utc, "boolean");
  assert.equal(parts.at(-1).done, true);
});

test("chat with format as a JSON schema gives parseable, valid JSON", async () => {
  const r = await client.chat({
    model,
    messages: [{ role: "user", content: "Give me a number" }],
    format: {
      type: "object",
      properties: { value: { type: "integer" } },
      required: ["value"],
      additionalProperties: false,
    },
    think: false,
    options: { ...greedy, num_predict: 64 },
  });
  const parsed = JSON.parse(r.message.content);
  assert.deepEqual(Object.keys(parsed), ["value"]);
  assert.ok(Number.isInteger(parsed.value));
});

test("a multi-turn chat", async () => {
  const first = await client.chat({ model, messages: hello, think: false, options: { ...greedy, num_predict: 6 } });
  const r = await client.chat({
    model,
    messages: [...hello, first.message, { role: "user", content: "And then?" }],
    think: false,
    options: { ...greedy, num_predict: 6 },
  });
  assert.equal(r.done, true);
  assert.equal(r.eval_count, 6);
  assert.equal(typeof r.message.content, "string");
  assert.ok(r.prompt_eval_count > 0);
});

test("generate: whole and streamed give the same text; system is accepted", async () => {
  const request = (extra = {}) => ({
    model,
    prompt: "Once upon a time",
    system: "Tell stories.",
    think: false,
    options: { ...greedy, num_predict: 8 },
    ...extra,
  });
  const whole = await client.generate(request());
  assert.equal(whole.model, model);
  assert.equal(typeof whole.response, "string");
  assert.equal(whole.done, true);
  assert.equal(whole.done_reason, "length");
  assert.equal(whole.eval_count, 8);
  assertTimings(whole);

  const parts = await collect(await client.generate(request({ stream: true })));
  assert.equal(parts.filter((p) => p.done).length, 1);
  assert.equal(parts.at(-1).done, true);
  assert.equal(parts.at(-1).eval_count, 8);
  assert.equal(parts.map((p) => p.response).join(""), whole.response);
});

// The prompt's own tokens, as a completion's first part is encoded (BOS where the model adds one).
async function promptTokens(content) {
  const res = await fetch(`${base}/tokenize`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model, content, add_special: true }),
  });
  assert.equal(res.status, 200);
  return (await res.json()).tokens.length;
}

test("generate: raw skips the chat template", async () => {
  // A prompt no other request starts with, so that no cached prefix lowers prompt_eval_count.
  const prompt = "Violet lanterns hummed over the quiet harbour";
  const request = (raw) => ({ model, prompt, raw, think: false, options: { ...greedy, num_predict: 4 } });
  const raw = await client.generate(request(true));
  assert.equal(raw.eval_count, 4);
  assert.equal(typeof raw.response, "string");
  // Exactly the prompt: a template's markers would add tokens.
  assert.equal(raw.prompt_eval_count, await promptTokens(prompt));
  const templated = await client.generate(request(false));
  assert.ok(templated.prompt_eval_count > raw.prompt_eval_count,
            `templated ${templated.prompt_eval_count} <= raw ${raw.prompt_eval_count}`);
});

test("embed: one unit vector per input, all of one length", async () => {
  const r = await client.embed({ model, input: ["hello", "world"] });
  assert.equal(r.model, model);
  assert.equal(r.embeddings.length, 2);
  const dims = r.embeddings[0].length;
  assert.ok(dims > 0);
  for (const e of r.embeddings) {
    assert.equal(e.length, dims);
    assert.ok(Math.abs(Math.hypot(...e) - 1) < 1e-3, String(Math.hypot(...e)));
  }
  assert.ok(r.prompt_eval_count > 0);
  assert.ok(r.total_duration > 0);

  const one = await client.embed({ model, input: "hello" });
  assert.equal(one.embeddings.length, 1);
  one.embeddings[0].forEach((x, i) => assert.ok(Math.abs(x - r.embeddings[0][i]) < 1e-4));
  const cut = await client.embed({ model, input: "hello", dimensions: 4 });
  assert.equal(cut.embeddings[0].length, 4);
});

test("embeddings, the older route", async () => {
  const dims = (await client.embed({ model, input: "hello" })).embeddings[0].length;
  const r = await client.embeddings({ model, prompt: "hello" });
  assert.equal(r.embedding.length, dims);
  assert.ok(r.embedding.every((x) => typeof x === "number"));
});

test("ps lists the loaded model; keep_alive as a duration sets when it expires", async () => {
  await client.chat(helloChat({ keep_alive: "5m" }));
  const { models } = await client.ps();
  assert.equal(models.length, 1, JSON.stringify(models));
  const m = models[0];
  assert.equal(m.name, model);
  assert.equal(m.model, model);
  assert.ok(m.size > 0);
  assert.equal(typeof m.size_vram, "number");
  assert.equal(typeof m.digest, "string");
  assert.equal(m.details.format, "gguf");
  assert.ok(m.context_length > 0);
  assert.equal(typeof m.expires_at, "string");
  const left = Date.parse(m.expires_at) - Date.now();
  assert.ok(left > 4 * 60e3 && left <= 5 * 60e3 + 5e3, m.expires_at);
});

test("generate with an empty prompt unloads with keep_alive 0, and loads without it", async () => {
  const gone = await client.generate({ model, prompt: "", keep_alive: 0 });
  assert.equal(gone.done, true);
  assert.equal(gone.done_reason, "unload");
  assert.equal(gone.response, "");
  await eventually(async () => (await client.ps()).models.length === 0, "the model leaves /api/ps");

  const loaded = await client.generate({ model, prompt: "" });
  assert.equal(loaded.done, true);
  assert.equal(loaded.done_reason, "load");
  assert.deepEqual((await client.ps()).models.map((m) => m.name), [model]);
});

test("keep_alive 0 unloads after the reply; the next request loads the model again", async () => {
  const r = await client.generate({ model, prompt: "Hi", keep_alive: 0, options: { ...greedy, num_predict: 2 } });
  assert.equal(r.eval_count, 2);
  await eventually(async () => (await client.ps()).models.length === 0, "the model leaves /api/ps");

  const again = await client.chat(helloChat());
  assert.equal(again.eval_count, 8);
  assert.deepEqual((await client.ps()).models.map((m) => m.name), [model]);
});

test("pull from the hub: progress, then list, chat and delete the pulled model", async () => {
  const progress = await collect(await client.pull({ model: pulledName, stream: true }));
  assert.equal(progress[0].status, "pulling manifest", JSON.stringify(progress));
  assert.equal(progress.at(-1).status, "success");
  // The file's lines: "pulling <digest>", its digest, total and completed (absent while 0, as
  // Ollama's omitempty leaves it).
  const file = progress.filter((p) => p.digest);
  assert.ok(file.length > 0, JSON.stringify(progress));
  for (const p of file) {
    assert.match(p.status, /^pulling /);
    assert.ok((p.completed ?? 0) <= p.total, JSON.stringify(p));
    assert.equal(p.total, hubModel.length);
  }
  assert.ok(file.some((p) => p.completed === p.total), JSON.stringify(file));
  // Fetched from the loopback hub, into the test's cache.
  assert.ok(hub.requests.includes(`GET /cdn/tiny/llama-GGUF/${hubFile}`), hub.requests.join("\n"));
  const cached = join(cache, "models--tiny--llama-GGUF", "snapshots", commit, hubFile);
  assert.ok(existsSync(cached));

  const listed = (await client.list()).models.find((m) => m.name === pulledName);
  assert.ok(listed, JSON.stringify(await client.list()));
  assert.equal(listed.model, pulledName);
  assert.equal(listed.size, hubModel.length);
  assert.equal(listed.details.format, "gguf");
  assert.equal(listed.details.family, "llama");

  const r = await client.chat({
    model: pulledName,
    messages: [{ role: "user", content: "Hello" }],
    options: { ...greedy, num_predict: 4 },
  });
  assert.equal(r.model, pulledName);
  assert.equal(r.eval_count, 4);

  // A pull of a model already here, as owner/repo:QUANT and whole: success.
  const again = await client.pull({ model: "tiny/llama-GGUF:Q4_0" });
  assert.equal(again.status, "success");

  await client.delete({ model: pulledName });
  assert.ok(!(await client.list()).models.some((m) => m.name === pulledName));
  assert.ok(!existsSync(cached));
  await assert.rejects(
    client.chat({ model: pulledName, messages: [{ role: "user", content: "Hello" }] }),
    isResponseError(404),
  );
});

test("pull of a repository the hub lacks fails", async () => {
  // Before the stream as an HTTP status, or in it as an {"error"} line: the client throws both.
  await assert.rejects(
    async () => collect(await client.pull({ model: "hf.co/tiny/absent-GGUF:Q4_0", stream: true })),
    (e) => e instanceof Error && e.message.length > 0,
  );
  await assert.rejects(client.pull({ model: "hf.co/tiny/absent-GGUF:Q4_0" }), (e) => e instanceof Error);
  assert.ok(!(await client.list()).models.some((m) => m.name.includes("absent")));
});

test("copy makes an alias usable in chat; delete removes the alias only", async () => {
  await client.copy({ source: model, destination: "my-alias" });
  const r = await client.chat({ ...helloChat(), model: "my-alias:latest" });
  assert.equal(r.model, "my-alias:latest");
  assert.equal(r.eval_count, 8);
  assert.equal((await client.show({ model: "my-alias" })).details.format, "gguf");
  // Listed as a model of its own, as Ollama lists a copy.
  assert.ok((await client.list()).models.some((m) => m.name === "my-alias:latest"));

  await client.delete({ model: "my-alias" });
  assert.ok(!(await client.list()).models.some((m) => m.name === "my-alias:latest"));
  await assert.rejects(client.chat({ ...helloChat(), model: "my-alias:latest" }), isResponseError(404));
  assert.equal((await client.chat(helloChat())).eval_count, 8);
  await assert.rejects(client.copy({ source: "no-such-model", destination: "other" }), isResponseError(404));
});

test("errors surface as the client's ResponseError with Ollama's statuses", async () => {
  const ask = [{ role: "user", content: "x" }];
  await assert.rejects(client.chat({ model: "no-such-model", messages: ask }), isResponseError(404));
  await assert.rejects(client.chat({ model: "no-such-model", messages: ask, stream: true }), isResponseError(404));
  await assert.rejects(client.generate({ model: "no-such-model", prompt: "x" }), isResponseError(404));
  await assert.rejects(client.show({ model: "no-such-model" }), isResponseError(404));
  await assert.rejects(client.embed({ model: "no-such-model", input: "x" }), isResponseError(404));
  // messages not an array
  await assert.rejects(client.chat({ model, messages: "hello" }), isResponseError(400));
  // llamapp serves no vision model here
  await assert.rejects(
    client.chat({ model, messages: [{ role: "user", content: "What is this?", images: ["iVBORw0KGgo="] }] }),
    isResponseError(400),
  );
  const json = { "Content-Type": "application/json" };
  const bad = await fetch(`${base}/api/chat`, { method: "POST", headers: json, body: "{not json" });
  assert.equal(bad.status, 400);
  assert.equal(typeof (await bad.json()).error, "string");
  // fetch's own type for a string body (text/plain) is what a page of another site could send
  // unasked; a browser names that site in Origin, and is refused. Without one (curl, scripts) the
  // body is read as JSON.
  const plain = await fetch(`${base}/api/chat`, { method: "POST", body: JSON.stringify({ ...helloChat(), stream: false }) });
  assert.equal(plain.status, 200);
  assert.equal((await plain.json()).eval_count, 8);
  const page = await fetch(`${base}/api/chat`, {
    method: "POST", headers: { Origin: "http://page.example" }, body: JSON.stringify(helloChat()),
  });
  assert.equal(page.status, 403);
  assert.equal(typeof (await page.json()).error, "string");
  // Still serving.
  assert.equal((await client.chat(helloChat())).eval_count, 8);
});

test("an Ollama chat and an OpenAI chat at once give what each gives alone", async () => {
  const models = await fetch(`${base}/v1/models`).then((r) => r.json());
  const openAiId = models.data.find((m) => `${m.id}:latest` === model)?.id;
  assert.ok(openAiId, JSON.stringify(models));
  const messages = [{ role: "user", content: "Tell me a story" }];
  const viaOllama = async () =>
    (await client.chat({ model, messages, think: false, options: { temperature: 0, seed: 7, num_predict: 16 } }))
      .message.content;
  const viaOpenAi = async () => {
    const res = await fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({
        model: openAiId,
        messages,
        max_tokens: 16,
        temperature: 0,
        seed: 7,
        chat_template_kwargs: { enable_thinking: false },
      }),
    });
    assert.equal(res.status, 200);
    const r = await res.json();
    assert.equal(r.usage.completion_tokens, 16);
    return r.choices[0].message.content;
  };
  const ollamaAlone = await viaOllama();
  const openAiAlone = await viaOpenAi();
  const [ollamaBoth, openAiBoth] = await Promise.all([viaOllama(), viaOpenAi()]);
  assert.equal(ollamaBoth, ollamaAlone);
  assert.equal(openAiBoth, openAiAlone);
});
