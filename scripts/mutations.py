#!/usr/bin/env python3
"""Puts each hole of tests/mutations/catalogue.py back into a scratch copy
of the source, builds it, and runs what must catch it: the simulation's
`make test` budget (24 seeds x 4,200 steps, the same as simulation_test)
and the named regression tests. Prints a table, writes
build/mutations.json, and exits 1 if any mutation survives.

  scripts/mutations.py              every mutation
  scripts/mutations.py NAME ...     some of them
  scripts/mutations.py --check      only that each still applies to the
                                    source as it is (a CTest test)
"""
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "mutations"))
from catalogue import MUTATIONS  # noqa: E402

SCRATCH = os.path.join(ROOT, "build-mutations")
TREE = os.path.join(SCRATCH, "src")
BUILD = os.path.join(SCRATCH, "build")
SEEDS, STEPS = 12, 4200


# The working tree's uncommitted changes when the run began, by file.
SNAPSHOT = {}


def run(cmd, **kw):
    return subprocess.run(cmd, text=True, capture_output=True, **kw)


def fresh_tree():
    if os.path.isdir(TREE):
        run(["git", "worktree", "remove", "--force", TREE], cwd=ROOT)
    os.makedirs(SCRATCH, exist_ok=True)
    r = run(["git", "worktree", "add", "--detach", TREE, "HEAD"], cwd=ROOT)
    if r.returncode != 0:
        sys.exit("git worktree add failed: " + r.stderr)
    # The working tree's uncommitted changes too, so what is measured is
    # what is here (as it is now: later edits do not leak into the run).
    diff = run(["git", "diff", "HEAD"], cwd=ROOT).stdout
    SNAPSHOT.update(diff_by_file(diff))
    if diff:
        r = subprocess.run(["git", "apply"], input=diff, text=True,
                           cwd=TREE, capture_output=True)
        if r.returncode != 0:
            sys.exit("cannot apply the working tree's changes: " + r.stderr)


def edits(m):
    """(file, old, new) of a mutation: one or two replacements."""
    out = [(m["file"], m["old"], m["new"])]
    if m.get("old2") is not None:
        out.append((m.get("file2", m["file"]), m["old2"], m["new2"]))
    return out


def mutate(m):
    for file, old, new in edits(m):
        path = os.path.join(TREE, file)
        text = open(path).read()
        if text.count(old) != 1:
            return "the code to mutate is not found once in " + file
        open(path, "w").write(text.replace(old, new))
    return None


def restore(m):
    for file in {f for f, _, _ in edits(m)}:
        run(["git", "checkout", "--", file], cwd=TREE)
        diff = SNAPSHOT.get(file)
        if diff:
            subprocess.run(["git", "apply"], input=diff, text=True, cwd=TREE)


def diff_by_file(diff):
    """A `git diff` split into the diff of each file, by path."""
    out = {}
    for part in re.split(r"(?m)^(?=diff --git )", diff):
        found = re.match(r"diff --git a/(\S+) b/", part)
        if found:
            out[found.group(1)] = part
    return out


def build():
    if not os.path.isdir(BUILD):
        r = run(["cmake", "-S", TREE, "-B", BUILD, "-G", "Ninja",
                 "-DHF_BUILD_BENCH=OFF", "-DHF_BUILD_CONSOLE=OFF"])
        if r.returncode != 0:
            return r.stdout + r.stderr
    extra = sorted({f.split("/")[0] for m in MUTATIONS for f in m["tests"]
                    if "/" in f})
    r = run(["cmake", "--build", BUILD, "--target", "hf-simulate",
             "simulation_test", "control_plane_test", "agent_test"] + extra)
    return None if r.returncode == 0 else (r.stdout + r.stderr)[-3000:]


def simulate():
    """Steps until the first violation over the seeds in order, or None."""
    exe = os.path.join(BUILD, "src", "simulation", "hf-simulate")
    r = run([exe, "--seed", "1", "--seeds", str(SEEDS), "--steps", str(STEPS),
             "--jobs", "2"])
    steps = {}
    failed = {}
    for line in r.stdout.splitlines():
        ok = re.match(r"seed (\d+): ok, (\d+) steps", line)
        bad = re.match(r"seed (\d+): FAILED at step (\d+): (.*)", line)
        if ok:
            steps[int(ok.group(1))] = int(ok.group(2))
        if bad:
            failed[int(bad.group(1))] = (int(bad.group(2)), bad.group(3))
    if not failed:
        return None, None
    first = min(failed)
    total = sum(s for seed, s in steps.items() if seed < first)
    total += sum(failed[s][0] for s in failed if s < first)
    return total + failed[first][0], "seed %d: %s" % (first, failed[first][1])


def tests(filters):
    caught = []
    for f in filters:
        if "/" in f:
            # "TARGET/FILTER": a test binary of another directory.
            target, f = f.split("/", 1)
            found = run(["find", BUILD, "-name", target, "-type", "f",
                         "-perm", "-u+x"]).stdout.split()
            if not found:
                caught.append((target + "/" + f, False))
                continue
            r = run([found[0], "--gtest_filter=" + f])
            caught.append((target + "/" + f, r.returncode != 0))
            continue
        if f.startswith("AgentTest."):
            binary, sub = "agent_test", "agent"
        elif f.startswith(("ControlPlane", "ForEach")):
            binary, sub = "control_plane_test", "server"
        else:
            binary, sub = "simulation_test", "simulation"
        exe = os.path.join(BUILD, "src", sub, binary)
        r = run([exe, "--gtest_filter=" + f])
        caught.append((f, r.returncode != 0))
    return caught


def check():
    """Every mutation applies exactly once to the source as it is now."""
    stale = 0
    for m in MUTATIONS:
        for file, old, _ in edits(m):
            count = open(os.path.join(ROOT, file)).read().count(old)
            if count != 1:
                stale += 1
                print("%s: the code it mutates is found %d times in %s "
                      "(update tests/mutations/catalogue.py)" %
                      (m["name"], count, file))
    print("%d mutations, %d stale" % (len(MUTATIONS), stale))
    sys.exit(1 if stale else 0)


def main():
    if sys.argv[1:] == ["--check"]:
        check()
    chosen = [m for m in MUTATIONS if len(sys.argv) < 2 or m["name"] in sys.argv[1:]]
    fresh_tree()
    if build():
        sys.exit("the unmutated tree does not build")
    results = []
    survivors = 0
    for m in chosen:
        start = time.time()
        entry = {"name": m["name"], "hole": m["hole"]}
        why = mutate(m)
        if why:
            entry["error"] = why
        else:
            err = build()
            if err:
                entry["error"] = "does not build: " + err
            else:
                if m["simulation"]:
                    steps, what = simulate()
                    entry["simulation_steps"] = steps
                    entry["simulation_violation"] = what
                entry["tests"] = {f: c for f, c in tests(m["tests"])}
        restore(m)
        caught_by_sim = entry.get("simulation_steps") is not None
        caught_by_test = any(entry.get("tests", {}).values())
        entry["caught"] = caught_by_sim or caught_by_test
        if m["simulation"] and not caught_by_sim:
            entry["caught"] = False  # it must be caught by the simulation too
        if m["tests"] and not all(entry.get("tests", {}).values()):
            entry["caught"] = False
        survivors += not entry["caught"]
        entry["seconds"] = round(time.time() - start)
        results.append(entry)
        print("%-30s %-8s %s" % (
            m["name"], "caught" if entry["caught"] else "SURVIVED",
            ("simulation after %s steps (%s); " % (
                entry["simulation_steps"], entry["simulation_violation"])
             if caught_by_sim else "") +
            ("tests: " + ", ".join(
                "%s %s" % (f, "failed" if c else "passed")
                for f, c in entry.get("tests", {}).items()))
            + (entry.get("error", ""))), flush=True)
    os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
    with open(os.path.join(ROOT, "build", "mutations.json"), "w") as out:
        json.dump(results, out, indent=2)
    sys.exit(1 if survivors else 0)


if __name__ == "__main__":
    main()
