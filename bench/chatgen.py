#!/usr/bin/env python3
"""Chat workloads through /v1/chat/completions for any OpenAI-compatible server.

multiturn: N conversations run at once, each T turns back to back; every turn sends the whole
  history (system prompt, earlier turns with the replies as received) plus a new user message,
  streamed. With --session each conversation names itself in llamapp's `session` field.
  Reports TTFT of first turns and of later turns (where a server can reuse the history).
once: one streamed request for a long seeded conversation; reports its TTFT (the restart
  scenario sends it before and after a server restart).
Prints one JSON line.
"""
import argparse
import http.client
import json
import random
import threading
import time

# One word list, text maker and percentile for both load generators.
from loadgen import percentile
from loadgen import prompt as words


def stream_chat(host, port, body):
    """Returns (ttft_s, reply_text, usage)."""
    conn = http.client.HTTPConnection(host, port, timeout=600)
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    ttft, text, usage = None, [], None
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("usage"):
            usage = event["usage"]
        for choice in event.get("choices", []):
            piece = choice.get("delta", {}).get("content")
            if piece:
                text.append(piece)
                if ttft is None:
                    ttft = time.perf_counter() - start
    conn.close()
    return (ttft if ttft is not None else time.perf_counter() - start), "".join(text), usage


def request_body(messages, args, session):
    body = {"messages": messages, "max_tokens": args.max_tokens, "temperature": 0,
            "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    if session:
        body["session"] = session
    return body


def multiturn(args):
    first, later, cached, errors = [], [], [], []
    lock = threading.Lock()

    def conversation(cid):
        rng = random.Random(args.seed * 1000 + cid)
        messages = [{"role": "system", "content": words(rng, args.system_words)}]
        session = f"conv-{args.seed}-{cid}" if args.session else None
        for turn in range(args.turns):
            messages.append({"role": "user", "content": words(rng, args.user_words)})
            try:
                ttft, reply, usage = stream_chat(args.host, args.port,
                                                 request_body(messages, args, session))
            except Exception as e:  # noqa: BLE001 - reported, not fatal
                with lock:
                    errors.append(str(e))
                return
            messages.append({"role": "assistant", "content": reply})
            with lock:
                (first if turn == 0 else later).append(ttft)
                if usage and turn > 0:
                    details = usage.get("prompt_tokens_details") or {}
                    cached.append((details.get("cached_tokens", 0), usage["prompt_tokens"]))

    start = time.perf_counter()
    threads = [threading.Thread(target=conversation, args=(c,))
               for c in range(args.conversations)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    reused = sum(c for c, _ in cached) / max(1, sum(p for _, p in cached))
    return {"conversations": args.conversations, "turns": args.turns, "wall_s": round(wall, 3),
            "first_ttft_p50_ms": round(percentile(first, 0.5) * 1000, 1),
            "later_ttft_p50_ms": round(percentile(later, 0.5) * 1000, 1),
            "later_ttft_p90_ms": round(percentile(later, 0.9) * 1000, 1),
            "reported_cached_share": round(reused, 3), "errors": len(errors)}


def once(args):
    rng = random.Random(args.seed)
    messages = [{"role": "system", "content": words(rng, args.system_words)}]
    for _ in range(args.turns):
        messages.append({"role": "user", "content": words(rng, args.user_words)})
        messages.append({"role": "assistant", "content": words(rng, args.user_words)})
    messages.append({"role": "user", "content": words(rng, args.user_words)})
    session = f"once-{args.seed}" if args.session else None
    ttft, _, usage = stream_chat(args.host, args.port, request_body(messages, args, session))
    details = (usage or {}).get("prompt_tokens_details") or {}
    return {"ttft_ms": round(ttft * 1000, 1), "prompt_tokens": (usage or {}).get("prompt_tokens"),
            "cached_tokens": details.get("cached_tokens")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["multiturn", "once"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--conversations", type=int, default=4)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system-words", type=int, default=300)
    ap.add_argument("--user-words", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--session", action="store_true", help="send llamapp's session field")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(json.dumps(multiturn(args) if args.mode == "multiturn" else once(args)))


if __name__ == "__main__":
    main()
