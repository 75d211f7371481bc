#!/bin/bash
# One vLLM version's whole sweep on the GPU host, every case in parallel on the one GPU.
#   bash sim/gpu/device_run.sh VERSION CASE...  CASE = MODEL:MODE:MAMBA_CACHE_MODE[:SECOND]
# SECOND is cpu (default: a CPU hit), gpu (a GPU prefix-cache hit, a control run) or
# gpu-noconn (a GPU prefix-cache hit with no KV connector configured at all);
# HF_CHECK=18,32 also has transformers compute the greedy output of those lengths.
#   e.g. bash sim/gpu/device_run.sh 0.24.0 mamba:stock:align mamba:fix-disabled:align
# Needs .vllm-bundle/vllm-VERSION (bash ../shared/vllm-offline/build.sh VERSION .vllm-bundle)
# and $OUT (a folder); writes $OUT/vllm-VERSION-MODEL-MODE[-all].json and $OUT/run-VERSION.log.
# The GPU KV cache is sized by kv_cache_memory_bytes (driver --kv-bytes) so that the
# parallel engines skip vLLM's device-wide memory profiling.
set -u
V=${1:?usage: device_run.sh VERSION CASE...}
shift
[ $# -gt 0 ] || { echo "error: no CASE given" >&2; exit 2; }
[ -d ".vllm-bundle/vllm-$V" ] || { echo "error: .vllm-bundle/vllm-$V is missing" >&2; exit 2; }
OUT=${OUT:?set OUT}
LOG=$OUT/run-$V.log
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >"$LOG" 2>&1
# a site folder of its own per version: installing one version over another's tree on a
# machine that stayed warm leaves the other's modules and dist-info behind
rm -rf "/tmp/vllm-site-$V"
# shellcheck disable=SC1090
source ".vllm-bundle/vllm-$V/install.sh" "/tmp/vllm-site-$V" >>"$LOG" 2>&1 \
  || { echo "error: install failed"; tail -n 20 "$LOG"; exit 1; }
echo "install: $(( $(date +%s) - T0 )) s; PYTHONPATH=$PYTHONPATH" | tee -a "$LOG"
ls -d /tmp/vllm-site-*/vllm-*.dist-info | tee -a "$LOG"
export VLLM_ENABLE_V1_MULTIPROCESSING=0 PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
pids=()
for c in "$@"; do
  IFS=: read -r model mode cm second <<<"$c"
  second=${second:-cpu}
  name=vllm-$V-$model-$mode
  [ "$cm" = align ] || name=$name-$cm
  conn=offload
  [ "$second" = gpu-noconn ] && { second=gpu; conn=none; name=$name-gpuhit-noconn; }
  [ "$conn" = none ] || [ "$second" = cpu ] || name=$name-gpuhit
  timeout "${CASE_TIMEOUT:-420}" python3 sim/gpu/driver.py --model "$model" --mode "$mode" \
    --mamba-cache-mode "$cm" --second "$second" --connector "$conn" --hf-check "${HF_CHECK:-}" --out "$OUT/$name.json" >"/tmp/$name.log" 2>&1 &
  pids+=("$!:$name")
  sleep "${STAGGER:-4}"
done
rc=0
for p in "${pids[@]}"; do
  wait "${p%%:*}"; r=$?
  [ $r -eq 0 ] || rc=1
  { echo "===== ${p#*:} rc=$r"; cat "/tmp/${p#*:}.log"; } >>"$LOG"
  echo "${p#*:} rc=$r"; grep -E '^L=|^HF|Error|error' "/tmp/${p#*:}.log" | tail -n 12
done
echo "total: $(( $(date +%s) - T0 )) s" | tee -a "$LOG"
exit $rc
