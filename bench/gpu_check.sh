#!/usr/bin/env bash
# GPU check for the interception core on a machine with a real NVIDIA GPU (e.g. an H200).
# Builds the core against the real driver, probes the driver's cuGetProcAddress against
# hooks.def, then with PyTorch checks an 8 GiB slice: allocation caps (default allocator,
# cudaMallocAsync, expandable_segments), mem_get_info and nvidia-smi inside the slice, two
# processes sharing one cap, matmul throughput at 25/50/100 % and the core's overhead at 100 %.
#
#   bench/gpu_check.sh RESULTS_FILE
#   bench/gpu_check.sh --driver-api RESULTS_FILE
#
# --driver-api runs bench/gpu_check_driver.sh instead: the same slice checked through the
# driver API alone (no PyTorch, no Python), under the shipped core at its fixed paths, on the
# real driver or on simgpu; see docs/gpu-check.md.
#
# PYTHON: the interpreter with PyTorch (default: .venv's python if it has torch, else python3).
#
# Every figure is written as "key: value" to RESULTS_FILE, "none" where a step gave nothing;
# every check writes "check.<name>: ok|FAILED". Each step has a timeout, cut to fit one
# deadline (GPU_CHECK_BUDGET_S, default 420 s), so the script ends within about 7 minutes even
# if steps hang. Exit status: 0 all checks passed, 1 a check failed, 2 no GPU or no UUID,
# 3 PyTorch with CUDA missing (the checks before torch still ran).
set -uo pipefail
if [ "${1:-}" = --driver-api ]; then
    shift
    exec "$(dirname "$0")/gpu_check_driver.sh" "$@"
fi
RESULTS=${1:?usage: bench/gpu_check.sh [--driver-api] RESULTS_FILE}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    for candidate in "$ROOT/.venv/bin/python" python3; do
        command -v "$candidate" >/dev/null || continue
        PY=${PY:-$candidate}
        "$candidate" -c 'import importlib.util as u, sys; sys.exit(not u.find_spec("torch"))' \
            2>/dev/null && { PY=$candidate; break; }
    done
fi
PY=${PY:-python3}
DEADLINE=$((SECONDS + ${GPU_CHECK_BUDGET_S:-420}))
SLICE=$((8 << 30))
MATMUL_S=${GPU_CHECK_MATMUL_S:-8} # seconds of matmuls per throughput figure
# The test variant: the shipped core reads its config and region only at the in-container
# paths; this one also takes TRANCHE_SLICE_CONFIG / TRANCHE_REGION_DIR (same hooks otherwise).
LIB=$ROOT/nodeagent/native/build/libtranche-test.so
PROBE=("$PY" "$ROOT/tests/gpu/torch_probe.py")
FAILED=0
HOLDER=
WORK=$(mktemp -d)
# What the caller's environment might carry would skew the checks: each step sets its own.
unset LD_PRELOAD TRANCHE_SLICE_CONFIG TRANCHE_REGION_DIR PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF
# shellcheck disable=SC2317  # cleanup is run by the EXIT trap
cleanup() {
    [ -z "$HOLDER" ] || { pkill -TERM -P "$HOLDER"; kill "$HOLDER"; } 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$(dirname "$RESULTS")" && : >"$RESULTS" || exit 2

note() { printf '%s: %s\n' "$1" "$(printf '%s' "$2" | tr '\n' ' ')" | tee -a "$RESULTS"; }
check() { # name exit-status-of-the-condition
    if [ "$2" -eq 0 ]; then note "check.$1" ok; else note "check.$1" FAILED; FAILED=1; fi
}
finish() { note finished "$(date -u +%FT%TZ)"; exit "$1"; }
limited() { # seconds command...: run it with that timeout, cut to what is left of the deadline
    local want=$1 left=$((DEADLINE - SECONDS - 5))
    shift
    if [ "$left" -lt 1 ]; then echo "gpu_check: out of time, skipped: $*" >&2; return 124; fi
    [ "$left" -lt "$want" ] && want=$left
    timeout -k 5 "$want" "$@"
}
percent() { # a b -> 100*a/b with one decimal, or "none"
    awk -v a="$1" -v b="$2" 'BEGIN { n = "^[0-9]+([.][0-9]+)?$"
        if (a ~ n && b ~ n && b > 0) printf "%.1f\n", 100 * a / b; else print "none" }'
}
container() { # name percent: a slice config (8 GiB of GPU 0 at that share) and a region folder
    local dir=$WORK/$1
    mkdir -p "$dir/region"
    PYTHONPATH=$ROOT "$PY" - "$dir/slice.conf" "$UUID" "$SLICE" "$2" <<'PYEOF' ||
import sys
from nodeagent import sliceconfig as sc
path, uuid, size, pct = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sc.write(path, sc.SliceConfig("gpu-check", (sc.DeviceSlice(uuid, size, pct),)))
PYEOF
        note error "slice config for container $1 not written"
}
in_container() { # name seconds [VAR=value...] command...: run it in that container, under the core
    local dir=$WORK/$1 limit=$2
    shift 2
    limited "$limit" env TRANCHE_SLICE_CONFIG="$dir/slice.conf" TRANCHE_REGION_DIR="$dir/region" \
        LD_PRELOAD="$LIB" "$@"
}

note started "$(date -u +%FT%TZ)"
command -v nvidia-smi >/dev/null || { note error "nvidia-smi not found"; finish 2; }
UUID=$(limited 30 nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | tr -d ' ')
note gpu "$(limited 30 nvidia-smi --query-gpu=name,memory.total,driver_version \
    --format=csv,noheader -i 0 2>&1)"
case $UUID in
GPU-*) ;;
*) note error "no GPU UUID from nvidia-smi -i 0 (got '$UUID')"; finish 2 ;;
esac
# CUDA's device 0 must be the GPU whose UUID the slice names (CUDA's default order is not
# nvidia-smi's): only that one is visible.
export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=$UUID

# Build only the core. Headers: the Makefile's defaults (the pinned wheels in .venv, then
# /usr/local/cuda), else $PY's own nvidia wheels (PyTorch's pip install brings cuda.h), else
# /usr/include.
make_vars=()
mapfile -t wheels < <("$PY" -c 'import importlib.util as u
s = u.find_spec("nvidia")
print("\n".join(s.submodule_search_locations if s else []))' 2>/dev/null)
for pair in CUDA_INCLUDE:cuda_runtime/include/cuda.h NVML_INCLUDE:nvml_dev/include/nvml.h; do
    var=${pair%%:*} rel=${pair#*:}
    [ -n "${!var:-}" ] && continue
    compgen -G "$ROOT/.venv/lib/python3*/site-packages/nvidia/$rel" >/dev/null && continue
    [ -f "/usr/local/cuda/include/${rel##*/}" ] && continue
    for dir in ${wheels[@]+"${wheels[@]/%//${rel%/*}}"} /usr/include; do
        [ -f "$dir/${rel##*/}" ] && { make_vars+=("$var=$dir"); break; }
    done
done
limited 180 make -C "$ROOT/nodeagent/native" -j"$(nproc)" ${make_vars[@]+"${make_vars[@]}"} \
    build/libtranche-test.so >"$WORK/build.log" 2>&1
build_rc=$?
check build $build_rc
[ "$build_rc" -eq 0 ] || note build_log "$(tail -c 800 "$WORK/build.log")"

# Does cuGetProcAddress return the exported symbols the core matches against? (No core here.)
limited 60 "$PY" "$ROOT/tests/gpu/proc_address_probe.py" >"$WORK/proc_address.txt" 2>&1
probe_rc=$?
grep '^proc_address' "$WORK/proc_address.txt" | tee -a "$RESULTS"
grep -q '^proc_address_identity:' "$WORK/proc_address.txt" ||
    note proc_address_identity "none (exit $probe_rc: $(tail -c 300 "$WORK/proc_address.txt"))"
check proc_address_identity $probe_rc
[ "$build_rc" -eq 0 ] || { note error "the core did not build: no slice can be checked"; finish 1; }

note python "$PY"
torch=$(limited 120 "$PY" -c 'import torch
print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' \
    2>/dev/null)
note torch "${torch:-absent}"

container c100 100
smi=$(in_container c100 30 nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits \
    -i 0 | tr -d ' ')
note nvidia_smi_total_mib "${smi:-none}"
[ "$smi" = "$((SLICE >> 20))" ]
check nvidia_smi_shows_slice $?

if [[ $torch != *"available True" ]]; then
    note error "PyTorch with CUDA is not installed here ($PY): torch checks skipped; set PYTHON"
    finish 3
fi

read -r _ free total <<<"$(in_container c100 90 "${PROBE[@]}" meminfo | grep '^meminfo ')"
note torch_mem_get_info_total "${total:-none}"
note torch_mem_get_info_free "${free:-none}"
[ "${total:-}" = "$SLICE" ]
check mem_get_info_shows_slice $?

for alloc in default backend:cudaMallocAsync expandable_segments:True; do
    name=fill-${alloc%%:*}
    container "$name" 100
    conf=()
    [ "$alloc" = default ] || conf=("PYTORCH_CUDA_ALLOC_CONF=$alloc")
    read -r _ filled stop <<<"$(in_container "$name" 90 ${conf[@]+"${conf[@]}"} "${PROBE[@]}" \
        fill | grep '^filled ')"
    note "filled_bytes.$alloc" "${filled:-none}"
    note "fill_stopped_by.$alloc" "${stop:-none}"
    [ -n "${filled:-}" ] && [ "$filled" -le "$SLICE" ] && [ "$filled" -ge $((SLICE - (1 << 30))) ]
    check "cap.$alloc" $?
done

# Two processes of one container share one cap: 5 GiB + 5 GiB must not both fit in 8 GiB.
# The first holds its 5 GiB until its stdin (a FIFO we keep open on fd 9) is closed.
container shared 100
mkfifo "$WORK/hold.in"
exec 9<>"$WORK/hold.in"
in_container shared 120 "${PROBE[@]}" hold 5 <"$WORK/hold.in" >"$WORK/hold.out" 2>&1 9>&- &
HOLDER=$!
while ! grep -qE '^(held|oom)' "$WORK/hold.out" && kill -0 "$HOLDER" 2>/dev/null &&
    [ "$SECONDS" -lt "$DEADLINE" ]; do
    sleep 0.2
done
first=$(awk '$1 == "held" || $1 == "oom" { print $1; exit }' "$WORK/hold.out")
second=$(in_container shared 90 "${PROBE[@]}" hold 5 </dev/null 2>"$WORK/hold2.err" |
    awk '$1 == "held" || $1 == "oom" { print $1; exit }')
exec 9>&-
wait "$HOLDER"
HOLDER=
note two_processes "first=${first:-none} second=${second:-none}"
[ "$first" = held ] || note hold_error "$(tail -c 300 "$WORK/hold.out")"
[ -n "$second" ] || note hold_error "$(tail -c 300 "$WORK/hold2.err")"
[ "$first" = held ] && [ "$second" = oom ]
check shared_cap $?

base=$(limited $((MATMUL_S + 50)) "${PROBE[@]}" matmul "$MATMUL_S" | awk '$1 == "tflops" { print $2 }')
note tflops.no_core "${base:-none}"
ratio_100=none
for pct in 100 50 25; do
    container "mm$pct" "$pct"
    t=$(in_container "mm$pct" $((MATMUL_S + 50)) "${PROBE[@]}" matmul "$MATMUL_S" |
        awk '$1 == "tflops" { print $2 }')
    note "tflops.share_$pct" "${t:-none}"
    ratio=$(percent "$t" "$base")
    note "tflops_percent_of_no_core.share_$pct" "$ratio"
    [ "$pct" = 100 ] && ratio_100=$ratio
    awk -v r="$ratio" -v p="$pct" 'BEGIN { exit !(r != "none" && r - p <= 3 && p - r <= 3) }'
    check "share_$pct" $?
done
note overhead_percent_at_100 "$(awk -v r="$ratio_100" \
    'BEGIN { if (r == "none") print "none"; else printf "%.1f\n", 100 - r }')"
finish $FAILED
