#!/bin/bash
# Runs the real-GPU measurements on the lent GPU machine, writing into
# $OUT (docs/experiments.md, "The model against an H100"):
#   run.sh quick     every code path with tiny counts (a check before spending device time)
#   run.sh profile   step 1: kernel shapes (shapes.json, env.json) and ncu's per-kernel DRAM bytes
#                    and SM throughput (ncu.csv)
#   run.sh coloc     step 2: co-location rows (coloc.json, coloc.csv)
# Each stays well inside the device's 10 minutes per command (timeouts below).
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY="python3 $D/colocate.py"
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum
METRICS=$METRICS,sm__throughput.avg.pct_of_peak_sustained_elapsed
METRICS=$METRICS,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed
METRICS=$METRICS,sm__warps_active.avg.pct_of_peak_sustained_active
METRICS=$METRICS,launch__grid_size,launch__block_size,launch__registers_per_thread
METRICS=$METRICS,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
METRICS=$METRICS,launch__occupancy_limit_warps,launch__occupancy_limit_blocks

# ncu WORKLOAD SECONDS [LAUNCHES]: one unit of WORKLOAD under ncu, its kernels' metrics as CSV.
ncu_one() {
	local w=$1 limit=$2 count=${3:-}
	local extra=()
	[ -n "$count" ] && extra=(--launch-count "$count")
	timeout "$limit" ncu --profile-from-start off --clock-control none --cache-control none \
		--metrics "$METRICS" "${extra[@]}" -f -o "/tmp/ncu_$w" \
		$PY --phase ncu-target --workload "$w" $QUICK >"/tmp/ncu_$w.log" 2>&1
	echo "ncu $w: exit $? ($(tail -1 /tmp/ncu_$w.log))"
	{
		echo "### $w"
		ncu --import "/tmp/ncu_$w.ncu-rep" --csv --page raw --metrics "$METRICS" 2>&1
	} >>"$OUT/ncu.csv"
}

QUICK=
case ${1:-} in
quick)
	QUICK=--quick
	$PY --self-test
	timeout 150 $PY --quick --phase shapes --out "$OUT" 2>&1 | tee "$OUT/quick-shapes.log" | tail -20
	ncu_one gemm 90
	timeout 240 $PY --quick --phase coloc --out "$OUT" 2>&1 | tee "$OUT/quick-coloc.log" | tail -60
	;;
profile)
	timeout 200 $PY --phase shapes --out "$OUT" 2>&1 | tee "$OUT/shapes.log"
	ncu_one gemm 60
	ncu_one bw 60
	ncu_one resnet18-b1-nocudnn 100
	ncu_one llm-decode 100
	ncu_one resnet50-train-nocudnn 150 400
	;;
coloc)
	timeout 560 $PY --phase coloc --out "$OUT" "${@:2}" 2>&1 | tee "$OUT/coloc.log"
	;;
*)
	echo "usage: run.sh quick|profile|coloc [colocate.py args]" >&2
	exit 2
	;;
esac
