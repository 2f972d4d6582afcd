"""pytest plugin for llama.cpp's server tests run against `oxibonsai serve` (loaded with `-p plugin`
by scripts/llama-server-suite.sh, which puts this folder and the suite's tests folder on sys.path).

It changes how servers start and how the run is counted, never what a test asserts:
- a test whose server asks for a model this machine cannot get (not a `substitute` in
  exclusions.tsv: embedding / rerank / vision models, LoRA adapters, router mode, models of real
  size) is skipped at server start, naming the model; skips are not counted as applicable;
- the `test` entries of exclusions.tsv are deselected with their reason;
- ServerPreset.load_all (the suite's pre-download of every preset) does nothing: the substitute is
  already in the oxibonsai cache and nothing else is downloaded;
- each worker's ports are moved by OXIBONSAI_SUITE_PORT (default 8080) so two runs on one machine
  do not collide; each test is failed after OXIBONSAI_SUITE_TEST_TIMEOUT seconds (default 90);
- at the end it prints passed / applicable per file and in all, the failures and the skips, and
  writes them as JSON to OXIBONSAI_SUITE_REPORT for the script's threshold.
"""
import collections
import json
import os
import signal

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def read_exclusions():
    substitutes, tests = set(), {}
    with open(os.path.join(HERE, "exclusions.tsv"), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 3 or parts[0] not in ("substitute", "test"):
                raise pytest.UsageError(f"exclusions.tsv line {number}: want KIND<TAB>KEY<TAB>REASON, got {line!r}")
            if parts[0] == "substitute":
                substitutes.add(parts[1])
            else:
                tests[parts[1]] = parts[2]
    return substitutes, tests


SUBSTITUTES, EXCLUDED = read_exclusions()


def unavailable_model(server):
    """The model (or feature) a ServerProcess asks for that no substitute covers, or None."""
    if server.models_dir or server.models_preset or (
        not server.model_file and not server.model_hf_repo and not server.model_url
    ):
        return "router mode (several models, none given at start)"
    if server.model_url:
        return server.model_url
    if server.model_file:
        if os.path.basename(server.model_file) not in SUBSTITUTES:
            return server.model_file
    else:
        repo = server.model_hf_repo
        key = f"{repo}/{server.model_hf_file}" if server.model_hf_file else repo
        if key not in SUBSTITUTES:
            return key
    if server.model_draft and os.path.basename(server.model_draft) not in SUBSTITUTES:
        return server.model_draft
    for lora in server.lora_files or []:
        return f"LoRA adapter {lora}"
    if server.mmproj_url:
        return server.mmproj_url
    return None


def patch_suite():
    import utils

    start = utils.ServerProcess.start

    def start_or_skip(self, *args, **kwargs):
        missing = unavailable_model(self)
        if missing is not None:
            pytest.skip(f"model not available: {missing}")
        return start(self, *args, **kwargs)

    init = utils.ServerProcess.__init__

    def init_moved(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.server_port += int(os.environ.get("OXIBONSAI_SUITE_PORT", "8080")) - 8080

    download = utils.download_file

    def download_or_skip(url, output_file_path=None):
        name = url.split("/").pop()
        if name in SUBSTITUTES:
            # The stand-in serves the substitute for this name; nothing is fetched.
            return output_file_path or f"./tmp/{name}"
        if url.endswith(".gguf"):
            pytest.skip(f"model not available: {url}")
        return download(url, output_file_path)

    utils.ServerProcess.start = start_or_skip
    utils.ServerProcess.__init__ = init_moved
    utils.download_file = download_or_skip
    utils.ServerPreset.load_all = staticmethod(lambda: None)


def pytest_configure(config):
    patch_suite()


def excluded_reason(nodeid):
    name = nodeid.split("[", 1)[0]
    return EXCLUDED.get(nodeid) or EXCLUDED.get(name)


def pytest_collection_modifyitems(session, config, items):
    kept, dropped = [], []
    for item in items:
        (dropped if excluded_reason(item.nodeid) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    excluded = [(i.nodeid, excluded_reason(i.nodeid)) for i in dropped]
    config._oxibonsai_excluded = excluded
    # Under xdist the workers collect, the main process reports: they leave the list in a file.
    path = os.environ.get("OXIBONSAI_SUITE_REPORT")
    if path and hasattr(config, "workerinput"):
        with open(f"{path}.excluded.{config.workerinput['workerid']}", "w", encoding="utf-8") as f:
            json.dump(excluded, f)


class TestTimeout(Exception):
    pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    limit = int(os.environ.get("OXIBONSAI_SUITE_TEST_TIMEOUT", "90"))

    def expire(signum, frame):
        raise TestTimeout(f"test ran past OXIBONSAI_SUITE_TEST_TIMEOUT={limit} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def short_reason(report):
    text = str(report.longrepr.reprcrash.message) if hasattr(report.longrepr, "reprcrash") and report.longrepr.reprcrash else str(report.longrepr)
    return " ".join(text.split())[:200]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput"):
        return
    outcome = {}
    for key in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(key, []):
            if not hasattr(report, "nodeid"):
                continue
            if key == "passed" and report.when != "call":
                continue
            if key == "skipped" and report.nodeid in outcome:
                continue
            # A failure in any phase (setup, call, teardown) fails the test.
            if key in ("failed", "error") or report.nodeid not in outcome:
                outcome[report.nodeid] = (key if key != "error" else "failed", report)
    per_file = collections.defaultdict(lambda: [0, 0])
    failures, skips = [], collections.defaultdict(list)
    for nodeid, (key, report) in sorted(outcome.items()):
        file = nodeid.split("::", 1)[0]
        if key == "skipped":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            skips[reason.removeprefix("Skipped: ")].append(nodeid)
            continue
        per_file[file][1] += 1
        if key == "passed":
            per_file[file][0] += 1
        else:
            failures.append((nodeid, short_reason(report)))
    passed = sum(p for p, _ in per_file.values())
    applicable = sum(a for _, a in per_file.values())
    percent = 100.0 * passed / applicable if applicable else 0.0
    write = terminalreporter.write_line
    terminalreporter.section("llama.cpp server suite against oxibonsai serve")
    for file, (p, a) in sorted(per_file.items()):
        write(f"  {file:40} {p:4} / {a:<4}")
    excluded = set(map(tuple, getattr(config, "_oxibonsai_excluded", [])))
    report = os.environ.get("OXIBONSAI_SUITE_REPORT")
    folder = os.path.dirname(report) if report else None
    for name in sorted(os.listdir(folder)) if folder else []:
        if name.startswith(os.path.basename(report) + ".excluded."):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                excluded.update(map(tuple, json.load(f)))
    excluded = sorted(excluded)
    write(f"not applicable: {sum(len(v) for v in skips.values())} skipped, {len(excluded)} excluded (exclusions.tsv)")
    for reason, ids in sorted(skips.items()):
        write(f"  skipped {len(ids):3}  {reason}")
    for reason, count in collections.Counter(r for _, r in excluded).most_common():
        write(f"  excluded {count:2}  {reason}")
    write(f"failures ({len(failures)}):")
    for nodeid, reason in failures:
        write(f"  {nodeid}: {reason}")
    write(f"PASSED {passed} / {applicable} applicable ({percent:.1f} %)")
    path = os.environ.get("OXIBONSAI_SUITE_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({
                "passed": passed, "applicable": applicable, "percent": percent,
                "per_file": {k: {"passed": p, "applicable": a} for k, (p, a) in sorted(per_file.items())},
                "failures": [{"test": n, "reason": r} for n, r in failures],
                "skipped": {r: ids for r, ids in sorted(skips.items())},
                "excluded": [{"test": n, "reason": r} for n, r in excluded],
            }, f, indent=1)
