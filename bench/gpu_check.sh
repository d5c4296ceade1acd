#!/usr/bin/env bash
# GPU check for the interception core on a machine with a real NVIDIA GPU (e.g. an H200).
# Builds the core against the real driver, then with PyTorch checks an 8 GiB slice:
# allocation caps (default allocator, cudaMallocAsync, expandable_segments), mem_get_info and
# nvidia-smi inside the slice, two processes sharing one cap, matmul throughput at 25/50/100 %
# and the core's overhead at 100 %. Finishes in well under 8 minutes.
#
#   bench/gpu_check.sh RESULTS_FILE
#
# Every figure is written as "key: value" to RESULTS_FILE; the exit status is non-zero if a
# check failed (the figures are still written).
set -uo pipefail
RESULTS=${1:?usage: bench/gpu_check.sh RESULTS_FILE}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
WORK=$(mktemp -d)
SLICE=$((8 << 30))
FAILED=0
: >"$RESULTS"
note() { echo "$1: $2" | tee -a "$RESULTS"; }
check() { # name condition-exit-status
    if [ "$2" -eq 0 ]; then note "check.$1" ok; else note "check.$1" FAILED; FAILED=1; fi
}

note started "$(date -u +%FT%TZ)"
command -v nvidia-smi >/dev/null || { note error "nvidia-smi not found"; exit 2; }
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | tr -d ' ')
note gpu "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader -i 0)"

# Build only the core: its headers come from the pinned wheels or /usr/local/cuda.
make -C "$ROOT/nodeagent/native" -j"$(nproc)" build/libtranche.so >"$WORK/build.log" 2>&1
check build $?
LIB=$ROOT/nodeagent/native/build/libtranche.so
"$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null
HAVE_TORCH=$?
note torch "$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo absent)"

container() { # name percent -> prints the env assignments for a container
    local dir=$WORK/$1
    mkdir -p "$dir/region"
    PYTHONPATH=$ROOT "$PY" - "$dir/slice.conf" "$UUID" "$SLICE" "$2" <<'PYEOF'
import sys
from nodeagent import sliceconfig as sc
path, uuid, size, pct = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sc.write(path, sc.SliceConfig("gpu-check", (sc.DeviceSlice(uuid, size, pct),)))
PYEOF
    echo "TRANCHE_SLICE_CONFIG=$dir/slice.conf TRANCHE_REGION_DIR=$dir/region LD_PRELOAD=$LIB"
}
run_in() { # container-env... command
    local envs=$1; shift
    env $envs "$@"
}

C100=$(container c100 100)
smi=$(run_in "$C100" nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0)
note nvidia_smi_total_mib "$smi"
[ "$smi" = "8192" ]; check nvidia_smi_shows_slice $?

if [ "$HAVE_TORCH" -ne 0 ]; then
    note error "PyTorch with CUDA is not installed here: torch checks skipped"
    exit 3
fi
PROBE="$PY $ROOT/tests/gpu/torch_probe.py"

read -r _ free total < <(run_in "$C100" timeout 120 $PROBE meminfo)
note torch_mem_get_info_total "$total"
[ "$total" = "$SLICE" ]; check mem_get_info_shows_slice $?

for alloc in default "backend:cudaMallocAsync" "expandable_segments:True"; do
    c=$(container "fill-${alloc%%:*}" 100)
    filled=$(run_in "$c PYTORCH_CUDA_ALLOC_CONF=${alloc/default/}" timeout 120 $PROBE fill | awk '{print $2}')
    note "filled_bytes.$alloc" "${filled:-none}"
    [ -n "$filled" ] && [ "$filled" -le "$SLICE" ] && [ "$filled" -ge $((SLICE - (1 << 30))) ]
    check "cap.$alloc" $?
done

# Two processes of one container share one cap: 5 GiB + 5 GiB must not both fit in 8 GiB.
C2=$(container shared 100)
coproc HOLD { run_in "$C2" timeout 120 $PROBE hold 5; }
read -r first _ <&"${HOLD[0]}"
second=$(run_in "$C2" timeout 120 $PROBE hold 5 </dev/null 2>&1 | head -c 300)
echo >&"${HOLD[1]}"; exec {HOLD[1]}>&-
note two_processes "first=$first second=$(echo "$second" | tail -c 120 | tr '\n' ' ')"
[ "$first" = "held" ] && echo "$second" | grep -q "OutOfMemory"; check shared_cap $?

base=$(timeout 120 $PROBE matmul 8 | awk '{print $2}')
note tflops.no_core "$base"
for pct in 100 50 25; do
    c=$(container "mm$pct" "$pct")
    t=$(run_in "$c" timeout 120 $PROBE matmul 8 | awk '{print $2}')
    note "tflops.share_$pct" "$t"
    ratio=$("$PY" -c "print(round(100 * $t / $base, 1))")
    note "tflops_percent_of_no_core.share_$pct" "$ratio"
    [ "$pct" = 100 ] && ratio_100=$ratio
    "$PY" -c "import sys; sys.exit(0 if abs($ratio - $pct) <= 3 else 1)"
    check "share_$pct" $?
done
note overhead_percent_at_100 "$("$PY" -c "print(round(100 - ${ratio_100:-0}, 2))")"
note finished "$(date -u +%FT%TZ)"
exit $FAILED
