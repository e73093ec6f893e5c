#!/usr/bin/env bash
# Run a command as on a CPU without bfloat16 units (AVX2 only), on a machine that has them: what `make test` costs
# on the kind of machine where the small configs' `auto` resolves to float32 (README, "Budgets").
#
#   bash tools/as_avx2_only.sh make test
#
# Two things change, for the command and everything it starts, and nothing outside it:
#   - /proc/cpuinfo, seen through a private mount namespace, lists no AVX-512 or AMX flag, so lib.core.precision finds
#     no bfloat16 units and `dtype: auto` / `precision: auto` resolve to float32 / fp32, as there;
#   - torch's own kernels, oneDNN and MKL are held to AVX2 (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA,
#     MKL_ENABLE_INSTRUCTIONS), so float32 runs the instructions such a CPU has.
# The clock, the caches and the memory bandwidth stay this machine's: a measurement, not a copy of another machine.
# Needs root (or unprivileged user namespaces) for the mount namespace; Linux only.
set -euo pipefail
[[ $# -gt 0 ]] || { echo "usage: bash tools/as_avx2_only.sh COMMAND [ARGS...]" >&2; exit 2; }
filtered=$(mktemp)
trap 'rm -f "$filtered"' EXIT
sed -E 's/\b(avx512[a-z0-9_]*|amx[a-z0-9_]*)\b//g' /proc/cpuinfo > "$filtered"
unshare -m --propagation private bash -c '
  mount --bind "$0" /proc/cpuinfo || { echo "as_avx2_only: cannot bind-mount /proc/cpuinfo (root needed)" >&2; exit 1; }
  export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
  exec "$@"' "$filtered" "$@"
