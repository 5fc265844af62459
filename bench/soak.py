#!/usr/bin/env python3
"""A bounded soak of one running `llamapp serve` (bench/run-soak.sh starts it).

Workers send, for --minutes, a random mix of:
- streamed and whole chat completions;
- streams cancelled after the first event, and whole requests hung up on before the answer;
- multi-turn sessions;
- malformed bodies, wrong types, and raw-protocol abuse (pipelining, oversized heads, stalls);
- cache saves (slot save / restore), /cache prune;
- loads and unloads of a second model.

It checks:
- no answer is a 5xx;
- every request is answered exactly once: the server's access log has one line per request sent;
- resident memory and open descriptors stay flat, by the medians of the first and last quarters
  of the samples.

It prints one JSON line and exits non-zero when a check fails.
"""
import argparse
import http.client
import json
import os
import random
import socket
import statistics
import threading
import time

WORDS = "time river light garden story music paper winter city friend ocean forest dream".split()


class Soak:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.sent = 0
        self.counts = {}
        self.failed = {}
        self.failures = []

    def note(self, kind, ok=True, why=""):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if not ok:
                self.failed[kind] = self.failed.get(kind, 0) + 1
                self.failures.append(f"{kind}: {why}"[:300])

    def count_sent(self, n=1):
        with self.lock:
            self.sent += n

    def connection(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.args.port, timeout=timeout)

    def post(self, path, body, headers=None):
        self.count_sent()
        conn = self.connection()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        conn.request("POST", path, body if isinstance(body, (bytes, str)) else json.dumps(body), h)
        res = conn.getresponse()
        data = res.read()
        conn.close()
        return res.status, data

    def chat_body(self, rng, stream, model=None, n=16):
        body = {"messages": [{"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(12))}],
                "max_tokens": n, "temperature": 0, "stream": stream}
        if model:
            body["model"] = model
        return body

    # Each action sends its requests and notes the outcome.
    def chat(self, rng):
        stream = rng.random() < 0.5
        status, data = self.post("/v1/chat/completions", self.chat_body(rng, stream))
        ok = status == 200 and (b"[DONE]" in data if stream else b"choices" in data)
        self.note("chat_stream" if stream else "chat", ok, f"{status} {data[:200]!r}")

    def cancel(self, rng):
        # A raw request: read the first bytes of the answer (or none), then hang up.
        body = json.dumps(self.chat_body(rng, rng.random() < 0.7, n=64)).encode()
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.count_sent()
        s = socket.create_connection(("127.0.0.1", self.args.port), timeout=60)
        s.sendall(head + body)
        if rng.random() < 0.5:
            s.recv(64)
        s.close()
        self.note("cancelled")

    def session(self, rng):
        sid = f"soak-{rng.randrange(1 << 30)}"
        messages = []
        for _ in range(3):
            messages.append({"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(8))})
            status, data = self.post("/v1/chat/completions",
                                     {"messages": messages, "max_tokens": 8, "temperature": 0, "session": sid})
            if status != 200:
                self.note("session_turn", False, f"{status} {data[:200]!r}")
                return
            messages.append(json.loads(data)["choices"][0]["message"])
            self.note("session_turn")

    def malformed(self, rng):
        body = json.dumps(self.chat_body(rng, False))
        choice = rng.randrange(5)
        if choice == 0:  # cut short
            body = body[:rng.randrange(len(body))]
        elif choice == 1:  # a byte changed
            i = rng.randrange(len(body))
            body = body[:i] + chr(rng.randrange(32, 127)) + body[i + 1:]
        elif choice == 2:  # a field of the wrong type
            body = json.dumps({"messages": rng.choice([5, "x", [1], [{"role": 3}]]), "max_tokens": "many"})
        elif choice == 3:  # nested deep
            body = "[" * 10000 + "]" * 10000
        status, data = self.post(rng.choice(["/v1/chat/completions", "/v1/completions", "/api/chat",
                                             "/v1/messages", "/tokenize"]), body)
        # A mutation may leave a valid request: anything below 500 is an answer.
        self.note("malformed", status < 500, f"{status} {data[:200]!r}")

    def raw_abuse(self, rng):
        choice = rng.randrange(7)
        s = socket.create_connection(("127.0.0.1", self.args.port), timeout=60)
        if choice == 0:
            n = rng.randrange(2, 6)
            self.count_sent(n)
            s.sendall(b"GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n" * n)
            got = b""
            while got.count(b"HTTP/1.1 200") < n:
                part = s.recv(65536)
                if not part:
                    break
                got += part
            self.note("pipelined", got.count(b"HTTP/1.1 200") == n, got[:200])
        elif choice <= 2:
            self.count_sent()
            if choice == 1:
                s.sendall(b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
            else:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nX: " + b"b" * 10000 + b"\r\n\r\n")
            got = s.recv(200)
            self.note("oversized_head", got.startswith(b"HTTP/1.1 4"), got[:100])
        else:
            self.refused_before_body(s, choice)
        s.close()

    # Requests the server must refuse from their head, at once: a 50 MB upload announced (with or
    # without Expect: 100-continue, which must not be answered 100), a chunked body over the
    # limit, and a head whose lines end in a bare LF.
    def refused_before_body(self, s, choice):
        self.count_sent()
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        if choice == 3:
            s.sendall(head + b"Content-Length: 52428800\r\nExpect: 100-continue\r\n\r\n")
            kind, want = "announced_too_large", b"HTTP/1.1 413"
        elif choice == 4:
            s.sendall(head + b"Content-Length: 52428800\r\n\r\n")
            kind, want = "announced_too_large", b"HTTP/1.1 413"
        elif choice == 5:
            kind, want = "chunked_too_large", b"HTTP/1.1 413"
            chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
            try:
                s.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
                for _ in range(self.args.max_body_bytes // 0x10000 + 2):
                    s.sendall(chunk)
            except OSError:
                pass  # the server answered and closed before the whole upload: read its answer
        else:
            s.sendall(b"GET /health HTTP/1.1\nHost: localhost\n\n")
            kind, want = "bare_line_feed", b"HTTP/1.1 400"
        try:
            got = s.recv(200)
        except OSError as e:
            got = repr(e).encode()
        self.note(kind, got.startswith(want), got[:100])

    # An alias must be a plain name: a path or a hub reference is refused, and never served.
    def squat(self, rng):
        destination = rng.choice(["../../etc/passwd", "owner/repo:/etc/passwd", "hf.co/evil/model:Q4_0",
                                  "evil/model:Q4_0"])
        status, data = self.post("/api/copy", {"source": "second", "destination": destination})
        self.note("copy_squat", status == 400, f"{status} {data[:200]!r}")

    def cache(self, rng):
        action = rng.choice(["save", "restore", "prune"])
        if action == "prune":
            status, data = self.post("/cache/prune", {})
        else:
            status, data = self.post(f"/slots/{rng.randrange(2)}?action={action}",
                                     {"filename": f"soak-{rng.randrange(4)}.bin"})
        # A restore of a file not saved yet is a 4xx; a slot in use may be refused too.
        self.note(f"cache_{action}", status < 500, f"{status} {data[:200]!r}")

    def models(self, rng):
        if not self.args.second_model:
            return self.chat(rng)
        path = rng.choice(["/models/load", "/models/unload", "/v1/chat/completions"])
        body = {"model": self.args.second_model}
        if path == "/v1/chat/completions":
            body = self.chat_body(rng, False, model=self.args.second_model, n=8)
        status, data = self.post(path, body)
        self.note("model_" + path.rsplit("/", 1)[-1], status < 500, f"{status} {data[:200]!r}")

    def worker(self, seed, until):
        rng = random.Random(seed)
        actions = [(self.chat, 30), (self.cancel, 15), (self.session, 10), (self.malformed, 20),
                   (self.raw_abuse, 10), (self.squat, 2), (self.cache, 8), (self.models, 7)]
        population = [a for a, w in actions for _ in range(w)]
        while time.time() < until:
            action = rng.choice(population)
            try:
                action(rng)
            except Exception as e:  # noqa: BLE001 - a failure to record, not to stop on
                self.note(action.__name__ + "_exception", False, repr(e))


def access_lines(log):
    with open(log, errors="replace") as f:
        return sum(1 for line in f if "] http " in line)


def sample(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--log", required=True, help="the server's stderr, to count access-log lines")
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--second-model", default="")
    ap.add_argument("--max-body-bytes", type=int, default=1 << 20, help="the server's --max-body-bytes")
    args = ap.parse_args()
    soak = Soak(args)
    # Lines already in the log (the start-up's health checks) are not the soak's.
    before = access_lines(args.log)
    until = time.time() + args.minutes * 60
    threads = [threading.Thread(target=soak.worker, args=(i, until)) for i in range(args.workers)]
    for t in threads:
        t.start()
    samples = []
    while any(t.is_alive() for t in threads):
        samples.append(sample(args.pid))
        time.sleep(5)
    for t in threads:
        t.join()
    # The server logs a cancelled stream when it notices; give it a moment to write the lines.
    deadline = time.time() + 30
    while True:
        logged = access_lines(args.log) - before
        if logged >= soak.sent or time.time() > deadline:
            break
        time.sleep(1)
    samples.append(sample(args.pid))
    # Quiet again, the server must answer as at the start.
    final_status, _ = soak.post("/v1/chat/completions", soak.chat_body(random.Random(0), False))
    logged += 1
    quarter = max(1, len(samples) // 4)
    rss_start = statistics.median(s[0] for s in samples[:quarter])
    rss_end = statistics.median(s[0] for s in samples[-quarter:])
    fd_start = statistics.median(s[1] for s in samples[:quarter])
    fd_end = statistics.median(s[1] for s in samples[-quarter:])
    # The start-up's health checks may have met a 503 while the model loaded: not the soak's.
    with open(args.log, errors="replace") as f:
        http_lines = [line for line in f if "] http " in line][before:]
    five_xx = sum(1 for line in http_lines if " status=5" in line)
    checks = {
        "no_failures": not soak.failures,
        "recovered": final_status == 200,
        "no_5xx": five_xx == 0,
        "answered_exactly_once": logged == soak.sent,
        "rss_flat": rss_end <= rss_start * 1.15 + 32 * 1024,
        "fds_flat": fd_end <= fd_start + 8,
    }
    print(json.dumps({"minutes": args.minutes, "requests": soak.sent, "logged": logged,
                      "by_kind": soak.counts, "failed_by_kind": soak.failed, "failures": soak.failures[:20], "five_xx": five_xx,
                      "rss_kb_first_quarter": rss_start, "rss_kb_last_quarter": rss_end,
                      "fds_first_quarter": fd_start, "fds_last_quarter": fd_end,
                      "rss_kb_max": max(s[0] for s in samples), "checks": checks}))
    raise SystemExit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
