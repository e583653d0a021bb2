#!/usr/bin/env python3
"""Fails on a shared object that needs a newer glibc than it may.

A library that references `dlopen@GLIBC_2.34` does not load where glibc is
older: the loader stops the program with "version `GLIBC_2.34' not found".
This reads the dynamic symbols of each FILE (`readelf --dyn-syms -W`) and
checks the version of every symbol it takes from elsewhere:

  GLIBC_x.y[.z]   at most --max-glibc (default 2.17)
  GLIBCXX_*       none, unless --max-glibcxx allows up to a version
  CXXABI_*        none, unless --max-cxxabi allows up to a version

It prints each version too new with the symbols that need it, and exits 1
when any FILE fails. --must-reject FILE (repeatable) names a file that must
fail: the run fails if it passes, which shows the check can see the fault.
A FILE that is not ELF is read as a saved `readelf --dyn-syms -W` listing.
--self-test first checks the rules on built-in listings.

Usage: check_symbol_versions.py [--max-glibc V] [--max-glibcxx V]
           [--max-cxxabi V] [--must-reject FILE]... [--self-test] FILE...
"""

import argparse
import re
import subprocess
import sys

# "  12: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND dlopen@GLIBC_2.34 (3)"
# A reference has one '@' and Ndx UND; a definition of our own has '@@' (or
# '@' with a section index) and is not a dependency.
SYMBOL_LINE = re.compile(
    r"^\s*\d+:\s+[0-9a-fA-F]+\s+\d+\s+\S+\s+\S+\s+\S+\s+(?P<ndx>\S+)\s+"
    r"(?P<name>[^@\s]+)@(?P<version>[A-Za-z_]+[0-9][0-9.]*)")

VERSION_NAME = re.compile(r"^(?P<family>[A-Z]+)_(?P<number>[0-9]+(\.[0-9]+)*)$")


def version_key(number):
    """'2.3.4' -> (2, 3, 4), so that 2.3.4 < 2.17."""
    return tuple(int(part) for part in number.split("."))


def read_listing(path):
    """The `readelf --dyn-syms -W` text of an ELF file or a saved listing."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"\x7fELF":
        result = subprocess.run(["readelf", "--dyn-syms", "-W", path],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"readelf failed on {path}: {result.stderr}")
        return result.stdout
    with open(path, encoding="utf-8") as f:
        return f.read()


def needed_versions(listing):
    """{version name: sorted symbol names} for every versioned reference."""
    needs = {}
    for line in listing.splitlines():
        match = SYMBOL_LINE.match(line)
        if match is None or match.group("ndx") != "UND":
            continue
        needs.setdefault(match.group("version"), set()).add(
            match.group("name"))
    return {v: sorted(names) for v, names in needs.items()}


def violations(listing, limits):
    """The versions of `listing` that `limits` do not allow, each with the
    reason: [(version, symbols, why)]."""
    found = []
    for version, symbols in sorted(needed_versions(listing).items()):
        match = VERSION_NAME.match(version)
        if match is None:
            continue
        family, number = match.group("family"), match.group("number")
        limit = limits.get(family, "any")
        if limit == "any":
            continue  # GCC_*, libcuda's own, ...: not what this checks
        if limit is None:
            found.append((version, symbols, f"no {family} dependency allowed"))
        elif version_key(number) > version_key(limit):
            found.append((version, symbols, f"newer than {family}_{limit}"))
    return found


def describe(path, found):
    lines = [f"{path}: needs what an older userland lacks:"]
    for version, symbols, why in found:
        shown = ", ".join(symbols[:8]) + (", ..." if len(symbols) > 8 else "")
        lines.append(f"  {version} ({why}): {shown}")
    return "\n".join(lines)


SELF_TESTS = [
    # (listing line, rejected?) under the default limits (GLIBC 2.17, no
    # libstdc++): the versions glibc 2.34 and 2.33 gave dlopen and fstat,
    # one just past the limit, the limit itself, an old one that compares
    # smaller only numerically, libstdc++ and its ABI, and definitions.
    ("5: 0000000000000000 0 FUNC GLOBAL DEFAULT UND dlopen@GLIBC_2.34 (3)",
     True),
    ("6: 0000000000000000 0 FUNC GLOBAL DEFAULT UND fstat@GLIBC_2.33 (4)",
     True),
    ("7: 0000000000000000 0 FUNC GLOBAL DEFAULT UND getauxval@GLIBC_2.18 (5)",
     True),
    ("8: 0000000000000000 0 FUNC GLOBAL DEFAULT UND clock_gettime@GLIBC_2.17 "
     "(6)", False),
    ("9: 0000000000000000 0 FUNC GLOBAL DEFAULT UND __memcpy_chk@GLIBC_2.3.4 "
     "(7)", False),
    ("10: 0000000000000000 0 FUNC GLOBAL DEFAULT UND dlopen@GLIBC_2.2.5 (2)",
     False),
    ("11: 0000000000000000 0 FUNC GLOBAL DEFAULT UND "
     "_ZSt28__throw_bad_array_new_lengthv@GLIBCXX_3.4.29 (8)", True),
    ("12: 0000000000000000 0 FUNC GLOBAL DEFAULT UND "
     "__cxa_begin_catch@CXXABI_1.3 (9)", True),
    ("13: 0000000000001100 42 FUNC GLOBAL DEFAULT 14 hf_probe@@GLIBC_2.34",
     False),
]


def self_test():
    limits = {"GLIBC": "2.17", "GLIBCXX": None, "CXXABI": None}
    failures = 0
    for line, rejected in SELF_TESTS:
        got = bool(violations(line, limits))
        if got != rejected:
            failures += 1
            print(f"self-test: expected {'rejected' if rejected else 'accepted'}"
                  f": {line}")
    print(f"self-test: {len(SELF_TESTS) - failures} of {len(SELF_TESTS)} "
          "listings judged as expected")
    return failures == 0


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", metavar="FILE")
    parser.add_argument("--max-glibc", default="2.17")
    parser.add_argument("--max-glibcxx", default=None)
    parser.add_argument("--max-cxxabi", default=None)
    parser.add_argument("--must-reject", action="append", default=[],
                        metavar="FILE")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    limits = {"GLIBC": args.max_glibc, "GLIBCXX": args.max_glibcxx,
              "CXXABI": args.max_cxxabi}

    ok = True
    if args.self_test:
        ok = self_test() and ok
    for path in args.must_reject:
        found = violations(read_listing(path), limits)
        if found:
            print(f"{path}: rejected, as it must be")
            print(describe(path, found))
        else:
            ok = False
            print(f"FAIL: {path} should have been rejected (it needs a newer "
                  "glibc than the limit) but was not: the check sees nothing")
    for path in args.files:
        listing = read_listing(path)
        found = violations(listing, limits)
        if found:
            ok = False
            print("FAIL: " + describe(path, found))
        else:
            glibc = [v for v in needed_versions(listing) if
                     v.startswith("GLIBC_")]
            newest = max(glibc, key=lambda v: version_key(v.split("_")[1]),
                         default="none")
            print(f"{path}: ok (newest glibc version needed: {newest})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
