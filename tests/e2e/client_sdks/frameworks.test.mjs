// `llamapp serve` driven by two application frameworks as their users set them up (node --test):
// the Vercel AI SDK through its OpenAI-compatible provider, and LangChain through its Ollama
// integration. Both ask the chat model they were given for embeddings, with no flag on the
// server; see server.mjs.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { basename } from "node:path";
import { cosineSimilarity, embed, embedMany, generateText } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOllama, OllamaEmbeddings } from "@langchain/ollama";
import { startServer } from "./server.mjs";

const modelId = basename(process.env.LLAMAPP_MODEL, ".gguf");

let server;
let base;

before(async () => {
  server = await startServer(["-c", "1024", "-t", "2", "--parallel", "2"]);
  base = `http://127.0.0.1:${server.port}`;
});

after(() => {
  server?.child.kill("SIGTERM");
});

function assertUnit(vector) {
  assert.ok(vector.length > 0);
  const norm = Math.sqrt(vector.reduce((sum, x) => sum + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
}

test("Vercel AI SDK: embed and embedMany from the chat model, then text from it", async () => {
  const provider = createOpenAICompatible({ name: "llamapp", baseURL: `${base}/v1` });
  const model = provider.embeddingModel(modelId);
  const many = await embedMany({ model, values: ["sunny day", "rainy night", "sunny day"], maxRetries: 0 });
  assert.equal(many.embeddings.length, 3);
  many.embeddings.forEach(assertUnit);
  assert.ok(Math.abs(cosineSimilarity(many.embeddings[0], many.embeddings[2]) - 1) < 1e-4);
  assert.ok(cosineSimilarity(many.embeddings[0], many.embeddings[1]) < 0.9999);
  assert.ok(many.usage.tokens > 0);
  const one = await embed({ model, value: "sunny day", maxRetries: 0 });
  one.embedding.forEach((x, i) => assert.ok(Math.abs(x - many.embeddings[0][i]) < 1e-4));

  const text = await generateText({
    model: provider.chatModel(modelId),
    prompt: "Say hi",
    maxOutputTokens: 4,
    temperature: 0,
    maxRetries: 0,
  });
  assert.equal(typeof text.text, "string");
  assert.equal(text.usage.outputTokens, 4);
});

test("LangChain: OllamaEmbeddings and ChatOllama on the same model", async () => {
  const embeddings = new OllamaEmbeddings({ model: `${modelId}:latest`, baseUrl: base, maxRetries: 0 });
  const documents = await embeddings.embedDocuments(["sunny day", "rainy night"]);
  assert.equal(documents.length, 2);
  documents.forEach(assertUnit);
  const query = await embeddings.embedQuery("sunny day");
  assert.equal(query.length, documents[0].length);
  query.forEach((x, i) => assert.ok(Math.abs(x - documents[0][i]) < 1e-4));

  const chat = new ChatOllama({ model: modelId, baseUrl: base, numPredict: 4, temperature: 0, maxRetries: 0 });
  const reply = await chat.invoke("Say hi");
  assert.equal(typeof reply.content, "string");
  assert.equal(reply.usage_metadata.output_tokens, 4);
});
