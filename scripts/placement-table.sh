#!/bin/bash
# Runs hf-sim for each policy on each openb variant (the five public traces
# and the ones hf-sim builds: gpuspec 20/25/33% grown from gpuspec10, CPU-only
# demand at 150/250/400% of the default trace's) and prints a Markdown table
# of the unallocated GPU % at x = 100 (median, p25-p75) and decisions/s.
# Usage: scripts/placement-table.sh OPENB_DIR [OUT_DIR] [SEEDS] [POLICIES...]
set -euo pipefail
T=${1:?usage: placement-table.sh OPENB_DIR [OUT_DIR] [SEEDS] [POLICIES...]}
OUT=${2:-build/placement}
SEEDS=${3:-42-51}
shift $(( $# < 3 ? $# : 3 ))
POLICIES=${*:-fgd bestfit hf-frag}
SIM=${HF_SIM:-build/src/sim/hf-sim}
mkdir -p "$OUT"
# name:base trace:gpuspec share:CPU-only scale
VARIANTS="default:default:: gpushare40:gpushare40:: multigpu20:multigpu20::
gpuspec10:gpuspec10:: cpu050:cpu050:: gpuspec20:gpuspec10:0.20:
gpuspec25:gpuspec10:0.25: gpuspec33:gpuspec10:0.33: cpu150:default::1.5
cpu250:default::2.5 cpu400:default::4"
printf '| variant |'; for p in $POLICIES; do printf ' %s | %s dec/s |' "$p" "$p"; done; echo
printf '|---|'; for p in $POLICIES; do printf -- '---|---|'; done; echo
for v in $VARIANTS; do
  IFS=: read -r name base share scale <<< "$v"
  args=()
  [ -n "$share" ] && args+=(--gpuspec-share "$share")
  [ -n "$scale" ] && args+=(--cpu-only-scale "$scale")
  printf '| %s |' "$name"
  for p in $POLICIES; do
    "$SIM" --nodes "$T/openb_node_list_gpu_node.csv" \
      --pods "$T/openb_pod_list_$base.csv" --policy "$p" --seeds "$SEEDS" \
      "${args[@]}" --json "$OUT/$name-$p.json" > /dev/null
    python3 - "$OUT/$name-$p.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
pt = r["points"][100]["unallocated_pct"]
print(" %.2f (%.2f–%.2f) | %s |" % (pt["median"], pt["p25"], pt["p75"],
      format(round(r["decisions_per_second"]), ",")), end="")
PY
  done
  echo
done
