#!/usr/bin/env python3
"""llama-server's own test suite (tools/server/tests in the pinned llama.cpp tree), run unedited
against `llamapp serve` and against llama-server built from the same tree, side by side.

    tests/compat/run.py --llamapp build/bin/llamapp [--llama-server build/bin/llama-server]
                        [--files test_basic.py,test_tokenize.py] [--report out.md]
                        [--record llama_server_passes.txt | --reference llama_server_passes.txt]

--record writes the tests llama-server passed; --reference reads such a list instead of running
llama-server (CI does, so as not to build llama-server: llama_server_passes.txt beside this
script was recorded on this machine's setup from the pinned tree).

There is no network here, so the suite's hub models are mapped to local files: a Hugging Face
cache (LLAMA_CACHE, read by both servers) is seeded with them, and the suite's session-wide
warm-up that downloads every preset's model is skipped. A test whose model is not mapped
fails to start its server on both servers alike and is counted as not runnable. So is a whole
file that needs a Python package Debian does not ship (openai).

llamapp runs as a link named llama-server, which makes it `llamapp serve`. Exit status: 1 when a
test passes on llama-server and fails on llamapp without being listed, with its reason, in
expected_differences.txt beside this script (or when llama-server was not given and a test
fails on llamapp that is not listed).
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Hub repository -> {path inside it: the local file}. stories260K is the suite's main model, and
# stands in for stories15M_MOE (test_speculative's target; test_lora and test_tool_call use it too).
def hub_models(shared: Path) -> dict:
    stories = shared / "models" / "stories260K.gguf"
    return {
        "ggml-org/test-model-stories260K": {"stories260K.gguf": stories},
        "ggml-org/models": {"tinyllamas/stories260K.gguf": stories},
        "ggml-org/stories15M_MOE": {"stories15M_MOE-F16.gguf": stories},
    }


# Files the suite fetches by URL (utils.download_file, into tests/tmp/) -> the local stand-in:
# test_speculative's draft is stories260K's Q4_0 copy, which the build generates.
def url_files(models_dir: Path) -> dict:
    return {"stories15M-q4_0.gguf": models_dir / "stories260K-q4_0.gguf"}

COMMIT = "0" * 40  # the snapshot every seeded repository is at


def seed_cache(cache: Path, models: dict) -> None:
    """The Hugging Face cache layout llama.cpp and llamapp read offline."""
    for repo, files in models.items():
        root = cache / ("models--" + repo.replace("/", "--"))
        (root / "refs").mkdir(parents=True, exist_ok=True)
        (root / "refs" / "main").write_text(COMMIT)
        for inside, local in files.items():
            digest = hashlib.sha256(local.read_bytes()).hexdigest()
            blob = root / "blobs" / digest
            blob.parent.mkdir(parents=True, exist_ok=True)
            if not blob.exists():
                shutil.copyfile(local, blob)
            link = root / "snapshots" / COMMIT / inside
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(os.path.relpath(blob, link.parent))


PLUGIN = '''
# Loaded with -p: the suite's session warm-up downloads every preset's model; the cache is
# seeded instead, so it is skipped.
def pytest_configure(config):
    import utils
    utils.ServerPreset.load_all = staticmethod(lambda: None)
'''


def python_with_pytest() -> str:
    """Debian's python3 (where apt installs pytest and requests), else this one."""
    for python in ("/usr/bin/python3", sys.executable):
        if subprocess.run([python, "-c", "import pytest, requests, wget, filelock"],
                          capture_output=True).returncode == 0:
            return python
    sys.exit("compat: no python3 with pytest, requests, wget and filelock (apt-get install "
             "python3-pytest python3-requests python3-wget python3-filelock)")


# Debian 12 ships no openai Python package; without one, five files fail to import at all. This
# stand-in lets them load: a test that makes an OpenAI client is skipped, on both servers alike.
OPENAI_STANDIN = '''
import pytest


class OpenAI:
    def __init__(self, *args, **kwargs):
        pytest.skip("the openai Python package is not installed here")
'''


def run_suite(server: Path, suite: Path, files: list, work: Path, cache: Path) -> dict:
    """Outcome per test id: passed, failed, skipped or error."""
    env = dict(os.environ)
    env.update({
        "LLAMA_SERVER_BIN_PATH": str(server),
        "LLAMA_CACHE": str(cache),
        "PYTHONPATH": str(work) + os.pathsep + env.get("PYTHONPATH", ""),
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    env.setdefault("PORT", "18480")  # the suite's port; 8080 is too often taken
    outcomes = {}
    for name in files:
        xml = work / f"{server.parent.name}-{name}.xml"
        with open(work / f"{server.parent.name}-{name}.log", "w") as log:
            subprocess.run([python_with_pytest(), "-m", "pytest", "-p", "compat_plugin", "-q",
                            "--junitxml", str(xml), "-o", "junit_family=xunit1", "unit/" + name],
                           cwd=suite, env=env, stdout=log, stderr=subprocess.STDOUT)
        if not xml.exists():
            outcomes[name + "::(collection)"] = "error"
            continue
        for case in ET.parse(xml).getroot().iter("testcase"):
            test = name + "::" + case.get("name")
            kinds = {child.tag for child in case}
            outcomes[test] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                              else "skipped" if "skipped" in kinds else "passed")
    return outcomes


def expected_differences() -> dict:
    out = {}
    path = HERE / "expected_differences.txt"
    for line in path.read_text().splitlines() if path.exists() else []:
        line = line.strip()
        if line and not line.startswith("#"):
            test, _, why = line.partition(" | ")
            out[test] = why.strip()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llamapp", required=True, type=Path)
    ap.add_argument("--llama-server", type=Path)
    ap.add_argument("--llama-dir", type=Path, help="the pinned llama.cpp tree")
    ap.add_argument("--shared", type=Path, default=HERE.parents[2] / "shared")
    ap.add_argument("--files", default="", help="comma list of test files (default: all)")
    ap.add_argument("--report", type=Path)
    ap.add_argument("--keep", type=Path, help="copy the pytest logs here")
    ap.add_argument("--record", type=Path, help="write the tests llama-server passed")
    ap.add_argument("--reference", type=Path, help="llama-server's passes, recorded")
    args = ap.parse_args()

    llama_dir = args.llama_dir or Path(subprocess.check_output(
        [str(HERE.parents[1] / "scripts" / "fetch-llama.sh")], text=True).strip())
    with tempfile.TemporaryDirectory(prefix="llamapp-compat.") as tmp:
        tmp = Path(tmp)
        # Copied, never edited, at its place in the tree: its tests read ../../../models/templates.
        suite = tmp / "tools" / "server" / "tests"
        shutil.copytree(llama_dir / "tools" / "server" / "tests", suite)
        (tmp / "models").symlink_to(llama_dir / "models")
        (tmp / "compat_plugin.py").write_text(PLUGIN)
        if subprocess.run([python_with_pytest(), "-c", "import openai"],
                          capture_output=True).returncode != 0:
            (tmp / "openai").mkdir()
            (tmp / "openai" / "__init__.py").write_text(OPENAI_STANDIN)
        cache = tmp / "hf-cache"
        seed_cache(cache, hub_models(args.shared.resolve()))
        (suite / "tmp").mkdir(exist_ok=True)
        for name, local in url_files(args.llamapp.resolve().parents[1] / "models").items():
            if local.exists():
                shutil.copyfile(local, suite / "tmp" / name)
        files = [f for f in args.files.split(",") if f] or sorted(
            p.name for p in (suite / "unit").glob("test_*.py"))
        link_dir = tmp / "llamapp"
        link_dir.mkdir()
        (link_dir / "llama-server").symlink_to(args.llamapp.resolve())
        servers = {"llamapp": link_dir / "llama-server"}
        if args.llama_server:
            reference_dir = tmp / "llama.cpp"
            reference_dir.mkdir()
            (reference_dir / "llama-server").symlink_to(args.llama_server.resolve())
            servers = {"llama-server": reference_dir / "llama-server", **servers}
        results = {name: run_suite(path, suite, files, tmp, cache)
                   for name, path in servers.items()}
        if args.reference:
            recorded = set(filter(None, args.reference.read_text().splitlines()))
            results["llama-server"] = {t: "passed" for t in recorded
                                       if t.split("::")[0] in files}
        if args.record and "llama-server" in results:
            passed = sorted(t for t, o in results["llama-server"].items() if o == "passed")
            args.record.write_text("\n".join(passed) + "\n")
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for log in tmp.glob("*.log"):
                shutil.copy(log, args.keep / log.name)
    return report(results, files, expected_differences(), args.report)


def report(results: dict, files: list, expected: dict, out: Path) -> int:
    ours = results["llamapp"]
    reference = results.get("llama-server")
    lines = ["| file | tests | llama-server passed | llamapp passed | not runnable (both) |",
             "|---|---:|---:|---:|---:|"]
    regressions = []
    for name in files:
        tests = sorted(t for t in set(ours) | set(reference or {}) if t.startswith(name + "::"))
        ref_pass = sum(reference.get(t) == "passed" for t in tests) if reference else "-"
        our_pass = sum(ours.get(t) == "passed" for t in tests)
        both_out = sum(ours.get(t) != "passed" and (not reference or reference.get(t) != "passed")
                       for t in tests)
        lines.append(f"| {name} | {len(tests)} | {ref_pass} | {our_pass} | {both_out} |")
        for t in tests:
            should_pass = reference.get(t) == "passed" if reference else True
            if should_pass and ours.get(t) != "passed" and t not in expected:
                regressions.append(t)
    lines.append("")
    for t in regressions:
        lines.append(f"- llamapp fails, unlisted: {t} ({ours.get(t, 'missing')})")
    for t, why in sorted(expected.items()):
        if t in ours and ours[t] != "passed":
            lines.append(f"- listed: {t} ({ours[t]}): {why}")
        elif t in ours:
            lines.append(f"- listed but passes now (take it off the list): {t}")
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        out.write_text(text)
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
