#!/usr/bin/env python3
"""Helpers of bench/gpu/run.sh (standard library only; the GPU machine has nothing else for sure).

  health PORT PID TIMEOUT_S      wait until GET /health answers 200 (exit 1 if PID dies or time
                                 runs out)
  loadgen --port P --clients N --requests R --max-tokens M [--seed S] [--procs K]
          [--loadgen-dir DIR]    bench/loadgen.py's streaming /v1/completions load (its request
                                 and stream parsing, imported from DIR), spread over K processes so
                                 that one Python interpreter's lock does not cap 64 clients on a
                                 fast GPU; adds TTFT p99. Prints one JSON line.
  kvpost --port P --tokens N --seed S   one non-streaming /v1/completions with N random token ids
                                 (max_tokens 1, greedy); prints wall ms and the server's usage and
                                 timings as one JSON line
  summary RESULTS_JSONL          the Markdown tables of a run (stdout)
"""
import argparse
import http.client
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import threading
import time
import urllib.request


def cmd_health(args):
    deadline = time.time() + args.timeout
    url = f"http://127.0.0.1:{args.port}/health"
    while time.time() < deadline:
        try:
            os.kill(args.pid, 0)
        except OSError:
            print(f"health: process {args.pid} exited", file=sys.stderr)
            return 1
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return 0
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.1)
    print(f"health: no 200 from {url} within {args.timeout} s", file=sys.stderr)
    return 1


def percentile(values, p):
    values = sorted(values)
    if not values:
        return None
    k = (len(values) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _worker(args, client_ids, start_evt, queue):
    sys.path.insert(0, args.loadgen_dir)
    import loadgen  # bench/loadgen.py: prompt() and one_request()

    ttfts, totals, errors = [], [], []
    lock = threading.Lock()

    def client(cid):
        rng = random.Random(args.seed * 1000 + cid)
        for _ in range(args.requests):
            body = {"prompt": loadgen.prompt(rng, args.prompt_words),
                    "max_tokens": args.max_tokens, "temperature": 0.0, "stream": True,
                    "ignore_eos": True, "stream_options": {"include_usage": True}}
            try:
                ttft, tokens = loadgen.one_request("127.0.0.1", args.port, body, "openai")
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                ttfts.append(ttft)
                totals.append(tokens)

    threads = [threading.Thread(target=client, args=(c,)) for c in client_ids]
    start_evt.wait()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    queue.put((ttfts, totals, errors))


def cmd_loadgen(args):
    ctx = mp.get_context("fork")
    procs = max(1, min(args.procs, args.clients))
    groups = [list(range(i, args.clients, procs)) for i in range(procs)]
    start_evt, queue = ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(args, g, start_evt, queue)) for g in groups]
    for w in workers:
        w.start()
    time.sleep(0.2)  # every process imported and waiting
    start = time.perf_counter()
    start_evt.set()
    ttfts, totals, errors = [], [], []
    for _ in workers:
        t, n, e = queue.get()
        ttfts += t
        totals += n
        errors += e
    wall = time.perf_counter() - start
    for w in workers:
        w.join()

    def ms(v):
        return round(v * 1000, 1) if v is not None else None

    out = {"clients": args.clients, "requests": len(ttfts), "errors": len(errors),
           "tokens": sum(totals), "wall_s": round(wall, 3),
           "tokens_per_s": round(sum(totals) / wall, 2) if wall > 0 else 0,
           "ttft_p50_ms": ms(percentile(ttfts, 0.5)), "ttft_p90_ms": ms(percentile(ttfts, 0.9)),
           "ttft_p99_ms": ms(percentile(ttfts, 0.99)), "max_tokens": args.max_tokens,
           "procs": procs}
    if errors:
        out["first_error"] = errors[0]
    print(json.dumps(out))
    return 0


def cmd_kvpost(args):
    rng = random.Random(args.seed)
    # Ordinary token ids of a 32000-token llama vocabulary (clear of the control tokens).
    prompt = [rng.randrange(1000, 30000) for _ in range(args.tokens)]
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0.0,
                       "cache_prompt": True})
    conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=600)
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    wall = time.perf_counter() - start
    out = {"status": resp.status, "wall_ms": round(wall * 1000, 1), "prompt_tokens": args.tokens}
    try:
        j = json.loads(data)
        out["usage"] = j.get("usage")
        out["timings"] = j.get("timings")
    except ValueError:
        out["body"] = data[:300].decode("utf-8", "replace")
    print(json.dumps(out))
    return 0 if resp.status == 200 else 1


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=1):
    return "n/a" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return f"{a / b:.3f}" if a is not None and b else "n/a"


def cmd_summary(args):
    rows = []
    for line in open(args.results):
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    out = []
    env = [r for r in rows if r.get("stage") == "env"]
    if env:
        e = env[-1]
        out.append(f"GPU: {e.get('gpu', '?')}; llamapp {e.get('llamapp_commit', '?')}, "
                   f"llama.cpp {e.get('llama_commit', '?')}; {e.get('date', '')}")
        out.append("")
    single = [r for r in rows if r.get("stage") == "single"]
    if single:
        out.append("### Single stream (llamapp-bench: llamapp vs llama-bench, alternating, medians, tok/s)")
        out.append("")
        out.append("On a GPU the pp column of llamapp is not comparable: its prefill timer stops when "
                   "llama_decode returns, before the GPU has finished (llama-bench synchronizes). "
                   "tg is comparable.")
        out.append("")
        out.append("| model | pp llama-bench | pp llamapp | ratio | tg llama-bench | tg llamapp | ratio | samples |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in single:
            b = r["bench"]
            out.append(f"| {r['model']} pp{b['n_prompt']}/tg{b['n_gen']} | "
                       f"{fmt(b['llama_bench']['pp'])} | {fmt(b['llamapp']['pp'])} | "
                       f"{ratio(b['llamapp']['pp'], b['llama_bench']['pp'])} | "
                       f"{fmt(b['llama_bench']['tg'])} | {fmt(b['llamapp']['tg'])} | "
                       f"{ratio(b['llamapp']['tg'], b['llama_bench']['tg'])} | {b['samples']} |")
        out.append("")
    server = [r for r in rows if r.get("stage") == "server"]
    for model in sorted({r["model"] for r in server}):
        mine = [r for r in server if r["model"] == model]
        rounds = len({r["round"] for r in mine})
        out.append(f"### `llamapp serve` vs `llama-server`, {model} (medians over {rounds} round(s); "
                   "TTFT ms)")
        out.append("")
        out.append("| clients | llama-server tok/s | llamapp tok/s | ratio | llama-server TTFT p50 / p99 | "
                   "llamapp TTFT p50 / p99 | errors (ls / lp) | GPU MiB used (ls / lp) |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in sorted({r["result"]["clients"] for r in mine}):
            def m(server_name, key):
                return med([r["result"].get(key) for r in mine
                            if r["server"] == server_name and r["result"]["clients"] == n])

            def mem(server_name):
                return med([r.get("gpu_mem_mib") for r in mine
                            if r["server"] == server_name and r["result"]["clients"] == n])

            def errs(server_name):
                return sum(r["result"].get("errors", 0) for r in mine
                           if r["server"] == server_name and r["result"]["clients"] == n)
            a, b = m("llama-server", "tokens_per_s"), m("llamapp", "tokens_per_s")
            out.append(f"| {n} | {fmt(a)} | {fmt(b)} | {ratio(b, a)} | "
                       f"{fmt(m('llama-server', 'ttft_p50_ms'), 0)} / {fmt(m('llama-server', 'ttft_p99_ms'), 0)} | "
                       f"{fmt(m('llamapp', 'ttft_p50_ms'), 0)} / {fmt(m('llamapp', 'ttft_p99_ms'), 0)} | "
                       f"{errs('llama-server')} / {errs('llamapp')} | "
                       f"{fmt(mem('llama-server'), 0)} / {fmt(mem('llamapp'), 0)} |")
        out.append("")
    kv = [r for r in rows if r.get("stage") == "kvrestart"]
    if kv:
        out.append("### A long prompt after a restart: llamapp's disk tier vs recomputing (wall ms of a "
                   "max_tokens 1 request, medians)")
        out.append("")
        out.append("| model | prompt tokens | llama-server cold | llamapp cold | llamapp after restart "
                   "(disk) | cold / disk | cached tokens after restart | entry MiB |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for key in sorted({(r["model"], r["prompt_tokens"]) for r in kv}):
            mine = [r for r in kv if (r["model"], r["prompt_tokens"]) == key]

            def m(field):
                return med([r.get(field) for r in mine])
            cold, disk = m("llamapp_cold_ms"), m("llamapp_restart_ms")
            out.append(f"| {key[0]} | {key[1]} | {fmt(m('llama_server_cold_ms'))} | {fmt(cold)} | "
                       f"{fmt(disk)} | {ratio(cold, disk)} | {fmt(m('restart_cached_tokens'), 0)} | "
                       f"{fmt(m('disk_mib'))} |")
        out.append("")
    status = [r for r in rows if r.get("stage") == "status"]
    if status:
        out.append("### Stages")
        out.append("")
        for r in status:
            out.append(f"- {r['name']}: {r['status']} ({r.get('seconds', '?')} s)"
                       + (f" - {r['note']}" if r.get("note") else ""))
        out.append("")
    print("\n".join(out))
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("health")
    h.add_argument("port", type=int)
    h.add_argument("pid", type=int)
    h.add_argument("timeout", type=float)
    lg = sub.add_parser("loadgen")
    lg.add_argument("--port", type=int, required=True)
    lg.add_argument("--clients", type=int, default=1)
    lg.add_argument("--requests", type=int, default=4, help="per client")
    lg.add_argument("--max-tokens", type=int, default=128)
    lg.add_argument("--prompt-words", type=int, default=100)
    lg.add_argument("--seed", type=int, default=1)
    lg.add_argument("--procs", type=int, default=8)
    lg.add_argument("--loadgen-dir", default=os.path.join(os.path.dirname(__file__), ".."))
    kv = sub.add_parser("kvpost")
    kv.add_argument("--port", type=int, required=True)
    kv.add_argument("--tokens", type=int, required=True)
    kv.add_argument("--seed", type=int, default=1)
    s = sub.add_parser("summary")
    s.add_argument("results")
    args = ap.parse_args()
    return {"health": cmd_health, "loadgen": cmd_loadgen, "kvpost": cmd_kvpost,
            "summary": cmd_summary}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
