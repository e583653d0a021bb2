#!/usr/bin/env bash
# Installs the Debian 12 packages HeteroFlow builds and tests with, but only
# those missing, so `make run` / `make test` work on a fresh machine and cost
# nothing on a ready one. docs/DEPENDENCIES.md says why each one is here.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git curl binutils python3
  # clang: the ASan + UBSan tree and its fuzz targets (libFuzzer and the
  # sanitizer runtimes are in libclang-rt)
  clang-14 libclang-rt-14-dev
  # libraries (see docs/DEPENDENCIES.md)
  nlohmann-json3-dev libcpp-httplib-dev libssl-dev libsqlite3-dev
  libpq-dev libpqxx-dev libspdlog-dev libfmt-dev libcli11-dev libfccp-dev
  prometheus-cpp-dev
  # testing and benchmarks
  libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev strace
  # the hook's test in an older userland (a Debian bullseye root)
  debootstrap
  # code style
  clang-format clang-tidy
  # the web console: built with npm, tested in Debian's Chromium
  nodejs chromium
  # the PostgreSQL store's tests start a real server (initdb, pg_ctl)
  postgresql-15
  # the metrics' end-to-end test scrapes with a real Prometheus (and
  # promtool, in the same package)
  prometheus
)

missing=()
# Debian's own nodejs ships npm as a separate package (NodeSource's
# includes it): ask for it only where npm is missing.
if ! command -v npm >/dev/null 2>&1; then
  packages+=(npm)
fi

for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "bootstrap: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "bootstrap: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
