#!/usr/bin/env python3
"""The driver-level parts of the GPU check (scripts/gpu-check.sh), run with
the hook's test program hook_probe (src/hook/testing/hook_probe.cc), which
works the same against the real CUDA driver and the fake one
(docs/FAKE_CUDA.md). Every step adds its result to a JSON report on disk as
soon as it ends (written whole, then renamed), so a step that fails or hangs
leaves the results of the steps before it; each process runs under a
timeout.

Commands:
  hook-checks --build B --report R [--seconds S] [--dry-run]
      overhead  launches per second of one process with and without
                LD_PRELOAD=libhfhook.so (a slice with a quota but no compute
                share), for a ~1 ms kernel and for an empty one
      shares    two slices on one GPU at 25/75 and 50/50, strict and
                work-conserving, with the slice and GPU regions set as the
                agent sets them; each slice's achieved share is its launches
                of a ~1 ms kernel against those of one unhooked process
                alone (the baseline), the GPU's time being what a slice's
                kernels get
      vllm      a KV-cache-style allocation under a 4096 MiB quota: 90% of
                what cuMemGetInfo calls free, in one allocation; then 1 GiB
                more, which must be refused
  agent-shares --url U --token-file F --build B --report R [--seconds S]
               [--dry-run-gpu-dir D] [--baseline-report HOOK_JSON]
      the 25/75 and 50/50 pairs again, as tasks through hf-server and
      hf-agent (the agent creates the regions and the environment); the
      slices' enforcement and hook reports are recorded while they run
  record REPORT KEY [--top]   (the value's JSON on stdin)
      sets steps.KEY (or KEY itself, with --top) of REPORT and rewrites it
      at once, so the check's report holds every step that has ended even
      when a later one is killed; a value that is not JSON is kept as text
  check-dry-run --hook-report R [--check-report C]
      against the fake driver the answers are known: exits 1, naming each,
      when one is wrong (so the dry run fails when the script or the hook
      breaks)

It never changes a GPU's settings.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

MIB = 1 << 20
QUOTA_MB = 4096
SHARE_CASES = [  # (name, percents, mode)
    ("25_75_strict", (25, 75), "strict"),
    ("25_75_work_conserving", (25, 75), "work-conserving"),
    ("50_50_strict", (50, 50), "strict"),
    ("50_50_work_conserving", (50, 50), "work-conserving"),
]
# A run may take this long beyond its own duration (context creation, the
# PTX JIT of the probe's kernel) before it counts as hung.
STARTUP_S = 60


def load_json(path):
    """The JSON object in `path`; exits with a clear message otherwise."""
    try:
        with open(path) as f:
            value = json.load(f)
    except OSError as e:
        raise SystemExit("gpu_check_lib: cannot read %s: %s" %
                         (path, e.strerror))
    except ValueError as e:
        raise SystemExit("gpu_check_lib: %s is not JSON: %s" % (path, e))
    if not isinstance(value, dict):
        raise SystemExit("gpu_check_lib: %s is not a JSON object" % path)
    return value


class Report:
    """A JSON object on disk, rewritten after every change."""

    def __init__(self, path):
        self.path = path
        self.data = {}
        if os.path.exists(path):
            self.data = load_json(path)

    def set_step(self, key, value):
        """Sets steps.KEY (gpu-check.json's layout)."""
        steps = dict(self.data.get("steps", {}))
        steps[key] = value
        self.set("steps", steps)

    def set(self, key, value):
        self.data[key] = value
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, self.path)


def json_lines(text):
    """The JSON objects among the lines of `text`, in order."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def failure(what, stderr=""):
    return {"error": what, "stderr": (stderr or "")[-2000:]}


def run_probe(cmd, env, timeout, stdin=None):
    """Runs `cmd`; its last JSON line, or an error object."""
    try:
        p = subprocess.run(cmd, env=env, input=stdin, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr
        return failure("timed out after %ds" % timeout, err)
    except OSError as e:
        return failure(str(e))
    lines = json_lines(p.stdout)
    if p.returncode != 0 or not lines:
        return failure("exit %d" % p.returncode, p.stderr)
    return lines[-1]


class Probe:
    """How to run hook_probe here: the build's paths and, in a dry run, the
    fake driver's environment (one shared fake GPU, 1 ms per launch)."""

    def __init__(self, build, dry_run, work):
        self.build = os.path.abspath(build)
        self.probe = os.path.join(self.build, "src/hook/hook_probe")
        self.hook = os.path.join(self.build, "lib/libhfhook.so")
        self.dry_run = dry_run
        self.work = work
        for path in (self.probe, self.hook):
            if not os.path.exists(path):
                raise SystemExit("gpu_check_lib: %s is missing (build the "
                                 "hfhook and hook_probe targets)" % path)
        self.base = dict(os.environ)
        for key in list(self.base):
            if key.startswith("HETEROFLOW_") or key == "LD_PRELOAD":
                del self.base[key]
        if dry_run:
            gpu_dir = os.path.join(work, "fake-gpu")
            os.makedirs(gpu_dir, exist_ok=True)
            self.base.update({
                "LD_LIBRARY_PATH": os.path.join(
                    self.build, "src/hook/testing/fake-cuda"),
                "HF_FAKE_CUDA_MEMORY_MB": "16384",
                "HF_FAKE_CUDA_KERNEL_US": "1000",
                "HF_FAKE_CUDA_GPU_DIR": gpu_dir,
            })
        self._regions = 0

    def env(self, memory_mb=None, percent=None, mode=None, gpu_region=None,
            extra=None):
        """The environment of one process: unhooked without `memory_mb`,
        else a slice's as the agent writes it (own slice region; the GPU's
        region shared with the other slices on the GPU)."""
        env = dict(self.base)
        if memory_mb is not None:
            self._regions += 1
            env.update({
                "LD_PRELOAD": self.hook,
                "HETEROFLOW_SLICE_ID": str(self._regions),
                "HETEROFLOW_SLICE_MEMORY_MB": str(memory_mb),
                "HETEROFLOW_HOOK_REGION": os.path.join(
                    self.work, "slice-%d.region" % self._regions),
            })
            if percent is not None:
                env["HETEROFLOW_SLICE_COMPUTE_PERCENT"] = str(percent)
                env["HETEROFLOW_SLICE_COMPUTE_MODE"] = mode or "strict"
            if gpu_region:
                env["HETEROFLOW_HOOK_GPU_REGION"] = gpu_region
        env.update(extra or {})
        return env

    def launch_cmd(self, ms):
        return [self.probe, "--resolve", "procaddr", "launch", str(ms),
                "kernel"]


def per_second(run):
    if "launches" not in run or not run.get("wall_ns"):
        return None
    return run["launches"] / (run["wall_ns"] / 1e9)


def check_overhead(probe, seconds):
    ms = int(seconds * 1000)
    timeout = seconds + STARTUP_S
    out = {"method": "launches per second of one process, each launch "
                     "followed by cuCtxSynchronize, with and without the "
                     "hook (quota only, no compute share)"}
    # cycles: the probe's kernel spins this many GPU clocks (2e6 is about
    # 1 ms); 1 is an empty kernel, where the launch path's own cost shows.
    # HF_FAKE_CUDA_KERNEL_US is the same for the fake driver (the real one
    # ignores it).
    for name, cycles, fake_us in (("kernel_1ms", "2000000", "1000"),
                                  ("kernel_empty", "1", "0")):
        extra = {"HF_PROBE_KERNEL_CYCLES": cycles,
                 "HF_FAKE_CUDA_KERNEL_US": fake_us}
        plain = run_probe(probe.launch_cmd(ms), probe.env(extra=extra),
                          timeout)
        hooked = run_probe(probe.launch_cmd(ms),
                           probe.env(memory_mb=QUOTA_MB, extra=extra),
                           timeout)
        entry = {"without_hook": plain, "with_hook": hooked}
        a, b = per_second(plain), per_second(hooked)
        if a and b:
            entry["overhead_percent"] = round((1 - b / a) * 100, 2)
        out[name] = entry
    return out


def spawn(cmd, env):
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def collect(proc, timeout):
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        return failure("timed out after %ds" % timeout, stderr)
    lines = json_lines(stdout)
    if proc.returncode != 0 or not lines:
        return failure("exit %d" % proc.returncode, stderr)
    return lines[-1]


def share_entry(percents, runs, baseline):
    """Each slice's launches as a share of the baseline's, and the split."""
    rates = [per_second(r) for r in runs]
    entry = {"slices": []}
    total = sum(r for r in rates if r) or None
    for percent, run, rate in zip(percents, runs, rates):
        s = {"set_percent": percent, "run": run}
        if rate is not None and baseline:
            s["achieved_percent"] = round(100 * rate / baseline, 1)
        if rate is not None and total:
            s["split_percent"] = round(100 * rate / total, 1)
        entry["slices"].append(s)
    return entry


def check_shares(probe, seconds):
    # Shares settle over a few of the hook's periods: never under 2 s.
    seconds = max(seconds, 2.0)
    ms = int(seconds * 1000)
    timeout = seconds + STARTUP_S
    baseline_run = run_probe(probe.launch_cmd(ms), probe.env(), timeout)
    baseline = per_second(baseline_run)
    out = {
        "method": "kernel timing: launches of a ~1 ms kernel per second, "
                  "each slice's against one unhooked process alone "
                  "(achieved_percent) and against both slices together "
                  "(split_percent)",
        "baseline": baseline_run,
        "cases": {},
    }
    for name, percents, mode in SHARE_CASES:
        gpu_region = os.path.join(probe.work, "gpu-%s.region" % name)
        procs = [spawn(probe.launch_cmd(ms),
                       probe.env(memory_mb=QUOTA_MB, percent=p, mode=mode,
                                 gpu_region=gpu_region))
                 for p in percents]
        runs = [collect(p, timeout) for p in procs]
        entry = share_entry(percents, runs, baseline)
        entry["mode"] = mode
        out["cases"][name] = entry
    return out


def check_vllm(probe):
    script = "info\ncache 90\ninfo\nalloc 1024\nquit\n"
    env = probe.env(memory_mb=QUOTA_MB)
    try:
        p = subprocess.run([probe.probe, "--resolve", "procaddr", "repl"],
                           env=env, input=script, capture_output=True,
                           text=True, timeout=STARTUP_S)
    except subprocess.TimeoutExpired as e:
        return failure("timed out after %ds" % STARTUP_S, str(e.stderr))
    lines = json_lines(p.stdout)
    # ready, info, cache, info, alloc
    if p.returncode != 0 or len(lines) < 5:
        return failure("exit %d, %d lines" % (p.returncode, len(lines)),
                       p.stderr)
    before, cache, after, extra = lines[1], lines[2], lines[3], lines[4]
    quota = QUOTA_MB * MIB
    checks = {
        "cuMemGetInfo_total_is_quota": before.get("total") == quota,
        "cache_allocated": cache.get("cache") == "CUDA_SUCCESS",
        "cache_within_quota": 0 < cache.get("bytes", 0) <= quota,
        "used_within_quota":
            after.get("total") == quota and 0 <= after.get("free", -1),
        "more_beyond_quota_refused": extra.get("alloc") != "CUDA_SUCCESS",
    }
    return {
        "quota_mb": QUOTA_MB,
        "before": before,
        "cache_90_percent_of_free": cache,
        "after": after,
        "then_1024_mb": extra,
        "checks": checks,
        "ok": all(checks.values()),
    }


def hook_checks(args):
    report = Report(args.report)
    work = tempfile.mkdtemp(prefix="hf-gpu-check-")
    probe = Probe(args.build, args.dry_run, work)
    steps = (("overhead", lambda: check_overhead(probe, args.seconds)),
             ("shares", lambda: check_shares(probe, args.seconds)),
             ("vllm_probe", lambda: check_vllm(probe)))
    for key, step in steps:
        started = time.time()
        try:
            value = step()
        except Exception as e:  # record it and go on to the next step
            value = failure("%s: %s" % (type(e).__name__, e))
        value["seconds"] = round(time.time() - started, 1)
        report.set(key, value)
    return 0


class Api:
    def __init__(self, url, token):
        self.url = url.rstrip("/")
        self.token = token

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data,
                                     method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as res:
            text = res.read().decode()
        return json.loads(text) if text else None


def wait_for(what, fn, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.25)
    raise TimeoutError("%s: not within %ds" % (what, timeout))


def agent_case(api, probe, name, percents, mode, seconds, task_env, work,
               baseline):
    """Two tasks through the platform that start their kernel loops together
    (each waits for a file the check creates once both run)."""
    go = os.path.join(work, "go-" + name)
    ms = int(seconds * 1000)
    loop = " ".join(probe.launch_cmd(ms))
    command = "while [ ! -e %s ]; do sleep 0.05; done; exec %s" % (go, loop)
    ids = []
    for i, percent in enumerate(percents):
        t = api.call("POST", "/api/v1/tasks", {
            "name": "gpu-check-%s-%d" % (name, i),
            "command": command,
            "gpu_memory_mb": QUOTA_MB,
            "gpu_compute_ratio": percent / 100.0,
            "gpu_compute_mode": mode,
            "env": task_env,
        })
        ids.append(t["id"])

    def tasks():
        return [api.call("GET", "/api/v1/tasks/%d" % i) for i in ids]

    entry = {"mode": mode, "task_ids": ids}
    try:
        wait_for("both tasks running",
                 lambda: all(t["status"] == "running" for t in tasks()),
                 STARTUP_S)
        with open(go, "w"):
            pass
        # Half-way through: the slices as the server shows them (the hook's
        # report, enforcement).
        time.sleep(seconds / 2)
        entry["slices_while_running"] = [
            api.call("GET", "/api/v1/slices/%d" % t["slice_id"])
            for t in tasks() if t.get("slice_id")]
        final = wait_for(
            "both tasks ended",
            lambda: (lambda ts: ts if all(
                t["status"] in ("succeeded", "failed", "cancelled")
                for t in ts) else None)(tasks()),
            seconds + STARTUP_S)
    except (TimeoutError, urllib.error.URLError, KeyError) as e:
        entry["error"] = str(e)
        for i in ids:
            try:
                api.call("POST", "/api/v1/tasks/%d/cancel" % i, {})
            except urllib.error.URLError:
                pass
        return entry
    runs = []
    for t in final:
        log = api.call("GET", "/api/v1/tasks/%d/logs" % t["id"]) or {}
        lines = json_lines(log.get("data", ""))
        runs.append(lines[-1] if lines else failure(
            "task %s: %s" % (t["status"], t.get("message", "")),
            log.get("data", "")))
    entry.update(share_entry(percents, runs, baseline))
    return entry


def agent_shares(args):
    report = Report(args.report)
    work = tempfile.mkdtemp(prefix="hf-gpu-check-agent-")
    probe = Probe(args.build, False, work)
    with open(args.token_file) as f:
        api = Api(args.url, f.read().strip())
    seconds = max(args.seconds, 2.0)
    task_env = {}
    if args.dry_run_gpu_dir:
        task_env = {
            "LD_LIBRARY_PATH": os.path.join(probe.build,
                                            "src/hook/testing/fake-cuda"),
            "HF_FAKE_CUDA_GPU_DIR": args.dry_run_gpu_dir,
            "HF_FAKE_CUDA_KERNEL_US": "1000",
        }
    # The unhooked baseline of the hook's checks, where they measured one.
    baseline = None
    if args.baseline_report and os.path.exists(args.baseline_report):
        hook_report = load_json(args.baseline_report)
        baseline = per_second(
            (hook_report.get("shares") or {}).get("baseline") or {})
    out = {"method": "the shares cases as tasks through hf-server and "
                     "hf-agent; split_percent is each task's launches "
                     "against both tasks', achieved_percent against one "
                     "unhooked process alone (the hook check's baseline)",
           "cases": {}}
    for name, percents, mode in SHARE_CASES:
        try:
            out["cases"][name] = agent_case(api, probe, name, percents, mode,
                                            seconds, task_env, work, baseline)
        except Exception as e:
            out["cases"][name] = failure("%s: %s" % (type(e).__name__, e))
        report.set_step(args.key, out)
    return 0


def record(args):
    report = Report(args.report)
    text = sys.stdin.read()
    try:
        value = json.loads(text)
    except ValueError:
        value = {"not_json": text[-4000:]}
    if args.top:
        report.set(args.key, value)
    else:
        report.set_step(args.key, value)
    return 0


def check_dry_run(args):
    """The fake driver's known answers (1 ms launches, one shared GPU)."""
    r = load_json(args.hook_report)
    problems = []

    def get(obj, *path):
        for p in path:
            obj = obj.get(p) if isinstance(obj, dict) else None
        return obj

    if get(r, "vllm_probe", "ok") is not True:
        problems.append("vllm_probe: %s" % json.dumps(
            get(r, "vllm_probe", "checks") or get(r, "vllm_probe")))
    # A 1 ms kernel hides the hook's cost per launch; an empty one on the
    # fake is too quick (and this machine too busy) to bound it here.
    o = get(r, "overhead", "kernel_1ms", "overhead_percent")
    if o is None or not -25 < o < 25:
        problems.append("overhead kernel_1ms: %r is not near 0%%" % o)
    if get(r, "overhead", "kernel_empty", "overhead_percent") is None:
        problems.append("overhead kernel_empty: not measured")

    def splits(cases, name):
        return [s.get("split_percent")
                for s in get(cases, name, "slices") or []]

    def check_splits(where, cases):
        for name, percents, _ in SHARE_CASES:
            got = splits(cases, name)
            if len(got) != 2 or None in got:
                problems.append("%s %s: no shares measured" % (where, name))
            elif percents == (25, 75) and not got[1] > 1.5 * got[0]:
                problems.append("%s %s: split %r is not 25/75" %
                                (where, name, got))
            elif percents == (50, 50) and not 30 < got[0] < 70:
                problems.append("%s %s: split %r is not 50/50" %
                                (where, name, got))

    check_splits("shares", get(r, "shares", "cases"))
    if args.check_report:
        c = load_json(args.check_report)
        steps = c.get("steps", {})
        for step in ("probe", "hook"):
            if step not in steps:
                problems.append("gpu-check.json has no step %r" % step)
        if get(steps, "probe", "ok") is not True:
            problems.append("probe step failed")
        check_splits("agent_shares", get(steps, "agent_shares", "cases"))
    if problems:
        print("dry run: " + "; ".join(problems), file=sys.stderr)
        return 1
    print("dry run: the known answers hold")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("hook-checks")
    p.add_argument("--build", required=True)
    p.add_argument("--report", required=True)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--dry-run", action="store_true")
    p.set_defaults(fn=hook_checks)
    p = sub.add_parser("agent-shares")
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--build", required=True)
    p.add_argument("--report", required=True)
    p.add_argument("--key", default="agent_shares")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--dry-run-gpu-dir")
    p.add_argument("--baseline-report",
                   help="gpu-check-hook.json, for its shares baseline")
    p.set_defaults(fn=agent_shares)
    p = sub.add_parser("record")
    p.add_argument("report")
    p.add_argument("key")
    p.add_argument("--top", action="store_true")
    p.set_defaults(fn=record)
    p = sub.add_parser("check-dry-run")
    p.add_argument("--hook-report", required=True)
    p.add_argument("--check-report")
    p.set_defaults(fn=check_dry_run)
    args = parser.parse_args()
    if getattr(args, "seconds", 1) <= 0:
        parser.error("--seconds must be positive")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
