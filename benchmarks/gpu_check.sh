#!/usr/bin/env bash
# GPU acceptance: on any machine with CUDA, run what CI (CPU only) cannot, and append the results to
# results/benchmarks.md. Run it whenever a GPU machine is at hand, from the project's root, in the
# project's environment (or with PYTHONPATH=$PWD where fl_bench is not installed):
#
#   bash benchmarks/gpu_check.sh            # everything; GPU_CHECK_QUICK=1 for shorter benchmark rows
#
# 1. the CUDA cases of the test suite (batched trips, CUDA graphs and bf16 on cuda: tests/clients)
# 2. a CUDA-graph run and a bf16-mixed run end to end, against the fp32 run's accuracy
# 3. resume on CUDA: a run killed after a checkpoint and resumed ends as the uninterrupted one
# 4. two processes with NCCL (needs 2 GPUs) against one process: the same trips.csv
# 5. the benchmark rows: trips/s of the CNN, CelebA CNN and logistic regression on CUDA, and of the
#    CNN and LSTM with 1 and 2 processes
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
report=results/benchmarks.md
python=${PYTHON:-python}
status=0
gpus=$($python -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
if [ "$gpus" = 0 ]; then
    echo "gpu_check: torch sees no CUDA GPU here: nothing to check" >&2
    exit 1
fi
log() { echo "- $*" | tee -a "$out/lines"; }
run() {  # run NAME OVERRIDES...: one fl_bench run in $out/NAME; its summary's key numbers
    local name=$1; shift
    if $python -m fl_bench progress=false "hydra.run.dir=$out/$name" "$@" >"$out/$name.log" 2>&1; then
        $python - "$out/$name/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"accuracy {s['final_val_accuracy']:.4f}, {s['trips_trained'] / s['simulate_seconds']:.0f} trips/s, "
      f"device {s['device']}, batched {s['vmap_clients']}, graphs {s['cuda_graphs']}, processes {s['processes']}")
EOF
    else
        echo "FAILED (see $out/$name.log)"; status=1
    fi
}
same() {  # same A B FILE: whether two runs wrote the same FILE
    if cmp -s "$out/$1/$3" "$out/$2/$3"; then echo "identical $3"; else echo "DIFFERENT $3"; status=1; fi
}

{
echo
echo "## GPU acceptance ($(date -u +%Y-%m-%d), $($python -c "import torch; print(torch.cuda.get_device_name(0))"), $gpus GPU(s), torch $($python -c "import torch; print(torch.__version__)"))"
echo
echo "\`bash benchmarks/gpu_check.sh\`:"
echo
} >>"$out/lines"

if $python -m pytest -q -p no:cacheprovider tests/clients >"$out/tests.log" 2>&1; then
    log "CUDA test cases (tests/clients, cuda parametrisations included): $(tail -1 "$out/tests.log")"
else
    log "CUDA test cases FAILED: $(tail -1 "$out/tests.log")"; status=1
fi

workload=(dataset=mnist1d model=mlp max_trips=4000 eval_every=1000 accelerator=cuda vmap_clients=true)
log "fp32, batched on CUDA: $(run fp32 "${workload[@]}" cuda_graphs=false)"
log "CUDA graphs: $(run graphs "${workload[@]}" cuda_graphs=true)"
log "bf16-mixed: $(run bf16 "${workload[@]}" cuda_graphs=false precision=bf16-mixed)"

log "uninterrupted on CUDA: $(run whole "${workload[@]}" max_trips=20000)"
# SIGTERM after 15 s (what SLURM sends before preemption): the run checkpoints and exits 130; the same
# command goes on from the checkpoint
timeout --preserve-status -s TERM 15 $python -m fl_bench progress=false "hydra.run.dir=$out/cut" "${workload[@]}" max_trips=20000 \
    >"$out/cut.log" 2>&1
log "interrupted (exit $?) and resumed on CUDA: $(run cut "${workload[@]}" max_trips=20000) ($(same whole cut metrics.csv))"

if [ "$gpus" -ge 2 ]; then
    nccl=(dataset=mnist1d model=mlp max_trips=2000 eval_every=500 accelerator=gpu)
    log "NCCL, 1 process: $(run nccl1 "${nccl[@]}" devices=1)"
    log "NCCL, 2 processes: $(run nccl2 "${nccl[@]}" devices=2) ($(same nccl1 nccl2 trips.csv))"
else
    log "NCCL with 2 processes: not run (one GPU here; NCCL needs a GPU per process)"
fi

# The whole matrix is 48 processes (over 5 minutes on an H200 machine); quick: one algorithm, one concurrency
matrix=(--trips '{"logreg": 20000, "cnn": 3000, "cnn4": 3000}' --concurrency 100 1000)
[ "${GPU_CHECK_QUICK:-0}" = 1 ] && matrix=(--trips '{"logreg": 4000, "cnn": 600, "cnn4": 600}' --concurrency 100 \
    --algorithms fedbuff)
if $python benchmarks/throughput.py --accelerator cuda --workloads logreg cnn cnn4 "${matrix[@]}" \
        --markdown "$out/throughput.md" >"$out/throughput.log" 2>&1; then
    { echo; echo "Trips/s on CUDA (benchmarks/throughput.py):"; echo; cat "$out/throughput.md"; } >>"$out/lines"
else
    log "throughput FAILED (see $out/throughput.log)"; status=1
fi
for workload in cnn lstm; do
    log "$workload, 1 vs 2 processes on CUDA: $($python benchmarks/processes.py --workload "$workload" \
        --accelerator gpu --devices 1 $([ "$gpus" -ge 2 ] && echo 2) 2>&1 | tail -1)"
done

cat "$out/lines" >>"$report"
cat "$out/lines"
echo "gpu_check: appended to $report; logs in $out" >&2
exit $status
