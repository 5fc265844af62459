#!/usr/bin/env python3
"""One load generator for any OpenAI-compatible server (llamapp serve, llama-server).

N clients each send streaming /v1/completions requests back to back, every prompt distinct
(--route native: llama-server's /completion; chat: /v1/chat/completions, the prompt as a user
message; messages: Anthropic's /v1/messages, the same; responses: OpenAI's /v1/responses, the prompt
as input; ollama: Ollama's /api/chat, the prompt as a user message, streamed as NDJSON).
Reports aggregate generated tokens/s over the whole run and TTFT percentiles (request sent ->
first streamed token). Prints one JSON line.
"""
import argparse
import http.client
import json
import random
import threading
import time

WORDS = ("time river mountain light garden story window music paper winter city friend ocean "
         "forest morning silver letter journey bridge market shadow voice dream stone field "
         "history engine number circle evening island kitchen teacher village machine").split()


def prompt(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words))


PATHS = {"openai": "/v1/completions", "native": "/completion", "chat": "/v1/chat/completions",
         "messages": "/v1/messages", "responses": "/v1/responses", "ollama": "/api/chat"}


def generated(event):
    """Tokens of text one streamed event carries, in any of the six shapes."""
    if "message" in event:  # Ollama: a line per piece
        return 1 if event["message"].get("content") else 0
    if event.get("type") == "response.output_text.delta":  # Responses
        return 1 if event["delta"] else 0
    if event.get("type") == "content_block_delta":  # Anthropic: a text delta per piece
        return 1 if event["delta"].get("text") else 0
    if "choices" not in event:  # native: a chunk per token until the final object
        return 1 if not event.get("stop") and event.get("tokens") else 0
    n = 0
    for choice in event["choices"]:
        if choice.get("text") or (choice.get("delta") or {}).get("content"):
            n += 1
    return n


def one_request(host, port, body, route):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    start = time.perf_counter()
    conn.request("POST", PATHS[route], json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    ttft = None
    tokens = 0
    usage = None
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if route == "ollama" and line:
            line = "data: " + line  # NDJSON: every line is an event
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("done") is True:
            usage = {"completion_tokens": event["eval_count"]}
        if event.get("usage"):
            usage = event["usage"]
        if event.get("type") == "message_delta":
            usage = {"completion_tokens": event["usage"]["output_tokens"]}
        if event.get("type") in ("response.completed", "response.incomplete"):
            usage = {"completion_tokens": event["response"]["usage"]["output_tokens"]}
        if event.get("stop") is True:
            usage = {"completion_tokens": event["tokens_predicted"]}
        n = generated(event)
        tokens += n
        if n and ttft is None:
            ttft = time.perf_counter() - start
    conn.close()
    if usage:
        tokens = usage["completion_tokens"]
    return ttft if ttft is not None else time.perf_counter() - start, tokens


def percentile(values, p):
    values = sorted(values)
    if not values:
        return 0.0
    k = (len(values) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--requests", type=int, default=4, help="per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    ap.add_argument("--route", choices=sorted(PATHS), default="openai")
    ap.add_argument("--extra", type=json.loads, default={},
                    help='JSON object merged into every request body, e.g. \'{"reasoning_format": "none"}\'')
    args = ap.parse_args()

    ollama_model = None
    if args.route == "ollama":  # Ollama requires a name: the first model the server lists
        conn = http.client.HTTPConnection(args.host, args.port, timeout=60)
        conn.request("GET", "/api/tags")
        ollama_model = json.loads(conn.getresponse().read())["models"][0]["name"]
        conn.close()

    ttfts, totals, errors = [], [], []
    lock = threading.Lock()

    def client(cid):
        rng = random.Random(args.seed * 1000 + cid)
        for _ in range(args.requests):
            body = {"prompt": prompt(rng, args.prompt_words), "max_tokens": args.max_tokens,
                    "temperature": args.temperature, "stream": True, "ignore_eos": True,
                    "stream_options": {"include_usage": True}}
            if args.route in ("chat", "messages", "ollama"):
                body["messages"] = [{"role": "user", "content": body.pop("prompt")}]
            if args.route == "ollama":  # Ollama's names; it has no ignore_eos
                body = {"model": ollama_model, "messages": body["messages"], "stream": True,
                        "options": {"num_predict": body["max_tokens"],
                                    "temperature": body["temperature"]}}
            if args.route == "responses":
                body["input"] = body.pop("prompt")
                body["max_output_tokens"] = body.pop("max_tokens")
                body["store"] = False
            if args.temperature > 0:
                body["seed"] = rng.randrange(1 << 30)
            body.update(args.extra)
            try:
                ttft, tokens = one_request(args.host, args.port, body, args.route)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                ttfts.append(ttft)
                totals.append(tokens)

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    out = {"clients": args.clients, "requests": len(ttfts), "errors": len(errors),
           "tokens": sum(totals), "wall_s": round(wall, 3),
           "tokens_per_s": round(sum(totals) / wall, 2) if wall > 0 else 0,
           "ttft_p50_ms": round(percentile(ttfts, 0.5) * 1000, 1) if ttfts else None,
           "ttft_p90_ms": round(percentile(ttfts, 0.9) * 1000, 1) if ttfts else None}
    if errors:
        out["first_error"] = errors[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
