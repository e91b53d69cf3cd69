#!/usr/bin/env bash
# Runs on a GPU machine, in one device call, from the repository root:
#   bash scripts/device.sh OUTDIR STEP [STEP ...]
#   bash scripts/device.sh help                  (the steps, their time limits, what each runs)
# Set-up always comes first (the project installed editable, msgspec from a carried .whl/ when
# missing, the C reader checked, OUTDIR/work/env.txt). Then each STEP, in the order given, under
# its own time limit, so that one that hangs leaves the others' results, and all by a deadline
# (570 s from the start; DEVICE_DEADLINE_S), so that the results get packed. A step's output is
# OUTDIR/work/STEP.log, beside the files it writes; steps.txt lists each step's exit code and
# seconds. At the end OUTDIR/work is packed into OUTDIR/results.tgz (the kernel zoo, and a big
# trace recorded because the checkout had none, go beside it as zoo.tgz and big_trace.json.gz).
# OUTDIR should lie outside the checkout (or under the ignored .device/): the suite checks folder
# sizes. The device's copy of the tree has no usable git history: note the commit yourself.
#
# Adding a step: a function step_NAME (runs under the limit, from the repository root, with
# $W = OUTDIR/work, $OUT = OUTDIR and $STEP_LIMIT_S = its limit in this call), one line `defstep NAME LIMIT_S TAIL "what it does"` (TAIL:
# how many lines of its log to print after it), and, if files must be collected or summarised
# whatever happened (also after a timeout), a function after_NAME.
set -u

declare -a ORDER=()
declare -A LIMIT=() TAIL=() WHAT=()
defstep() { ORDER+=("$1"); LIMIT[$1]=$2; TAIL[$1]=$3; WHAT[$1]=$4; }

# --- the steps, in a sensible order for one call (overhead first, on a quiet GPU) -------------

defstep overhead "${OVERHEAD_LIMIT_S:-200}" 11 "plugin overhead: benchmarks/bench_overhead.py, three suite shapes, plain vs --gpu-util, \$OVERHEAD_REPEATS (4) interleaved rounds within \$OVERHEAD_LIMIT_S (200) s (\$OVERHEAD_ARGS: more, e.g. --variant findings_off=--gpu-util-findings=off)"
step_overhead() {
  # OVERHEAD_ARGS: more options, shell-quoted, e.g. --variant counters_on=--gpu-util-counters=auto (the
  # counters' own share) or --variant "all_off=--gpu-util-counters=off --gpu-util-findings=off"
  # OVERHEAD_WARM=1: bytecode written and reused (PYTHONDONTWRITEBYTECODE unset) and one untimed run
  # of each suite and configuration first, as on a machine that ran the suite before
  if [ "${OVERHEAD_WARM:-0}" = 1 ]; then
    unset PYTHONDONTWRITEBYTECODE
    OVERHEAD_ARGS="--warmup ${OVERHEAD_ARGS:-}"
  fi
  eval "python3 benchmarks/bench_overhead.py --out \"\$W\" --repeats \"${OVERHEAD_REPEATS:-4}\" ${OVERHEAD_ARGS:-}"
}

defstep cost_model "${COST_LIMIT_S:-400}" 16 "the plugin's cost as a model: benchmarks/cost_model.py, small suites of 100/300/1,000 tests and launch-bound suites of 200/2,000/20,000 kernels a test, plain / default / lean / counters in interleaved rounds until the step's limit less 25 s (\$COST_LIMIT_S, 400); start-up s, µs per test, µs per kernel beyond plain with 95% intervals (cost/cost.json)"
step_cost_model() {
  # bytecode written and reused (the script's one untimed run per configuration fills the cache)
  unset PYTHONDONTWRITEBYTECODE
  python3 benchmarks/cost_model.py --out "$W/cost" --deadline-s $((${STEP_LIMIT_S:-400} - 25)) ${COST_ARGS:-}
}

defstep cost_acceptance "${COST_ACCEPT_LIMIT_S:-380}" 24 "issue 41's acceptance in one step (~6 min on an H100): benchmarks/cost_model.py --acceptance: plain / default / lean / counters on 500 and 5,000 small tests, a launch-bound pair (200 and 10,000 kernels a test) for µs a kernel, 5 interleaved rounds (fewer if \$COST_ACCEPT_LIMIT_S (380) less 20 s comes first), the counters' thread on 5 tests of 2 s bf16 matmuls; cost.json (self_per_test_us, slope_per_test_us, counters_thread_pct_busy, acceptance) and cost_acceptance.txt, the bars beside the figures (cost_acceptance/)"
step_cost_acceptance() {
  unset PYTHONDONTWRITEBYTECODE  # bytecode written and reused, as on a machine that ran the suite before
  python3 benchmarks/cost_model.py --acceptance --out "$W/cost_acceptance" --deadline-s $((${STEP_LIMIT_S:-380} - 20)) \
    --bootstrap 500 ${COST_ACCEPT_ARGS:-}
}
after_cost_acceptance() {
  [ -f "$W/cost_acceptance/cost_acceptance.txt" ] && tail -n 30 "$W/cost_acceptance/cost_acceptance.txt"
  return 0
}

defstep cost_parts "${COST_PARTS_LIMIT_S:-150}" 60 "where the cost model's figures come from, per part: benchmarks/diagnostics/cupti_launch_cost.py (a launch and a small test's body per CUPTI activity kind and host-wait source, fresh processes, \$COST_PARTS_ROUNDS (2) rounds), gpu_path_costs.py (each per-test read and call in a tight loop), session_phases.py --hooks on the small suite (each hook's µs a test, default / lean / counters) (cost_parts/)"
step_cost_parts() {
  unset PYTHONDONTWRITEBYTECODE
  mkdir -p "$W/cost_parts"
  python3 benchmarks/diagnostics/cupti_launch_cost.py --out "$W/cost_parts" --rounds "${COST_PARTS_ROUNDS:-2}" --launches 10000
  python3 benchmarks/diagnostics/gpu_path_costs.py --out "$W/cost_parts" --launches 10000 | tail -n 45
  python3 benchmarks/diagnostics/session_phases.py --out /tmp/cost_parts --hooks --warmup --no-components \
    --rounds 1 --config "lean=--gpu-util-findings=off --gpu-util-memory=off" --only default --only lean --only counters_on \
    --suite small
  cp /tmp/cost_parts/session_phases.json "$W/cost_parts/"
}

defstep flush_cost 90 8 "a flush's analysis on this host's CPU, by shape (issue 41, part 41f): benchmarks/diagnostics/flush_cost.py --whole, 100 small windows and 20 launch-bound windows of 2,000 kernels (the cost model's launch-bound suite), attribution, findings and a whole ContinuousCapture.flush; minima of 40 runs; then a whole Measuring.flush on the default path (benchmarks/parts/flush_path_cost.py, 100 and 1,000 small windows), then CuptiSource.drain of 100,000 synthetic records, a launch loop's and small tests' (flush_cost.txt: 'whole flush ... µs a window ... µs an event', 'Measuring.flush of N windows: ... µs a window', 'CuptiSource.drain of 100000 records (...): ... ns a record')"
step_flush_cost() {
  python3 benchmarks/diagnostics/flush_cost.py --whole --repeats 40 | tee "$W/flush_cost.txt"
  python3 benchmarks/parts/flush_path_cost.py --windows 100 --flushes 40 | tee -a "$W/flush_cost.txt"
  python3 benchmarks/parts/flush_path_cost.py --windows 1000 --flushes 10 | tee -a "$W/flush_cost.txt"
  for shape in kernels small; do  # CUPTI's drain on synthetic buffers: ours a GPU record, on this host's CPU
    python3 benchmarks/parts/flush_path_cost.py --drain 100000 --drain-shape "$shape" --flushes 7 | tee -a "$W/flush_cost.txt"
  done
}

defstep cost_line "${COST_LINE_LIMIT_S:-200}" 40 "does the summary's measurement-cost line tell the truth, and each hook's µs a test of the per-test path on the GPU: benchmarks/checks/cost_line_check.py --gpu, \$COST_LINE_TESTS (2000) one-kernel tests, plain vs --gpu-util in \$COST_LINE_ROUNDS (5) interleaved rounds (span and CPU-time differences against the printed line; agreement within 20 %: line/diff 0.8-1.2), then one more round with hook_timer (cost_line/cost_line.json, cost_line_hooks.json); about 150 s on an H100"
step_cost_line() {
  unset PYTHONDONTWRITEBYTECODE
  mkdir -p "$W/cost_line"
  python3 benchmarks/checks/cost_line_check.py --gpu --tests "${COST_LINE_TESTS:-2000}" \
    --rounds "${COST_LINE_ROUNDS:-5}" --out "$W/cost_line/cost_line.json"
  python3 benchmarks/checks/cost_line_check.py --gpu --tests "${COST_LINE_TESTS:-2000}" --rounds 1 --hooks \
    --out "$W/cost_line/cost_line_hooks.json" | tail -n 30
}

defstep findings 240 40 "findings rules against workloads with and without each problem: validation/findings_truth.py (traces, live CUPTI windows, kind-38 cost, the plugin on both sources; into findings/)"
step_findings() {
  python3 validation/findings_truth.py "$W/findings"
}

defstep findings_savings 90 12 "each findings saving estimate against the time its fix saves (pinned copies, TF32, one sync instead of N, a CUDA graph): validation/findings_truth.py --parts savings (findings_savings/savings.json, summary.txt)"
step_findings_savings() {
  python3 validation/findings_truth.py "$W/findings_savings" --parts savings
}

defstep where 120 30 "where the findings point (issue 42): validation/where/where_truth.py, a planted-cause suite (.item() loops of the issue's table, pageable copies, a slow host helper, a 6,000-launch loop) and the main job's problem/fix pairs under pytest --gpu-util, each finding's first place against the planted line and each pair's saving against its measured difference, plus the places' cost (sync/copy µs with the frame reader on and off, the sampler's share of a core); ~60 s (where/where.json, where.md, planted/, pairs/)"
step_where() {
  # WHERE_DUMP=1: each flush's findings inputs and results kept as where/planted/dump/ and where/pairs/dump/
  # (validation/where/dump_windows.py, replayed on the CPU with its load()); WHERE_PROBE=1: the raw
  # callback waits of the read-back loops too (validation/where/waits_probe.py, ~15 s, where/probe.json)
  python3 validation/where/where_truth.py "$W/where"
  local rc=$?
  [ "${WHERE_PROBE:-0}" = 1 ] && timeout 60 python3 validation/where/waits_probe.py "$W/where/probe.json"
  return $rc
}

defstep timm_findings 240 20 "findings ranked on timm's model tests (every 40th forward/backward test, ~65, COLUMNS=80; needs .timm/ at the repo root): benchmarks/thirdparty/timm_findings.py, with findings_savings' estimates merged (timm_findings/findings_rank.json, gpu_util/, report.html, pytest.log)"
step_timm_findings() {
  python3 benchmarks/thirdparty/timm_findings.py --out "$W/timm_findings" --timm .timm --timeout 220 \
    --estimates "$W/findings_savings/savings.json"
}

defstep memory 40 12 "GPU memory truth: validation/memory_truth.py"
step_memory() {
  python3 validation/memory_truth.py --out "$W"
}

defstep hardware 130 30 "hardware counters truth: validation/hardware_truth.py (SM/tensor/DRAM/energy on known workloads, the first test that brings CUDA up, PM vs GPM, the sampler's cost; overhead_ratio from the overhead step's overhead.json when it ran first)"
step_hardware() {
  python3 validation/hardware_truth.py "$W" --budget-s "${HARDWARE_BUDGET_S:-100}"
}

defstep counter_thread "${COUNTER_THREAD_LIMIT_S:-100}" 24 "issue 41's counters line (~90 s; \$COUNTER_THREAD_LIMIT_S, 100): benchmarks/checks/counter_thread_cost.py: the busy suite (5 tests of 2 s bf16 matmuls) under --gpu-util --gpu-util-counters=auto and plain --gpu-util (the thread's % of one core, bar 5; the counters' start-up on the tests' thread, bar 0.15 s, and on the sampler's thread; per-test SM/tensor), then in one process the plugin's open_counters (start-up split), then PM sampling variants while bf16 matmuls run (hardware buffer, image, poll interval, 10 ms, idle): the thread's CPU split into DecodeData / evaluation / Python, per-poll decode wall and CPU, errors (counter_thread/counter_thread_cost.json, counter_thread_cost.txt)"
step_counter_thread() {
  unset PYTHONDONTWRITEBYTECODE  # bytecode written and reused, as on a machine that ran the suite before
  python3 benchmarks/checks/counter_thread_cost.py --out "$W/counter_thread" --budget-s $((${STEP_LIMIT_S:-100} - 12))
}
after_counter_thread() {
  [ -f "$W/counter_thread/counter_thread_cost.txt" ] && cat "$W/counter_thread/counter_thread_cost.txt"
  return 0
}

defstep examples 40 25 "main job with the HTML report: pytest --gpu-util --gpu-util-html examples/ (examples_*.json/csv/html)"
step_examples() {
  rm -rf .gpu_util
  python3 -m pytest --gpu-util --gpu-util-html examples/ -p no:cacheprovider
}
after_examples() {
  cp .gpu_util/gpu_util.json "$W/examples_gpu_util.json" 2>/dev/null
  cp .gpu_util/gpu_util.csv "$W/examples_gpu_util.csv" 2>/dev/null
  cp .gpu_util/report.html "$W/examples_report.html" 2>/dev/null
  cp .gpu_util/timelines.json.gz "$W/examples_timelines.json.gz" 2>/dev/null
  cp .gpu_util/metric_table_*.csv "$W/" 2>/dev/null
  return 0
}

defstep sample 60 62 "the README's sample and docs/img/report.png from one run: pytest --gpu-util --gpu-util-html examples/ at COLUMNS=80 (sample/: examples_80.log, gpu_util/ with report.html, env.txt); then, on a CPU machine, copy work/ to benchmarks/results/DATE_GPU/ and run python scripts/render_sample.py benchmarks/results/DATE_GPU/sample/examples_80.log (about 20 s)"
step_sample() {
  # the README shows this log's GPU section; scripts/render_sample.py renders README.md's sample block
  # and docs/img/report.png from this one run (sample/gpu_util/report.html), so the two cannot disagree
  rm -rf .gpu_util "$W/sample"
  mkdir -p "$W/sample"
  COLUMNS=80 python3 -m pytest --gpu-util --gpu-util-html examples/ -p no:cacheprovider 2>&1 | tee "$W/sample/examples_80.log"
  return "${PIPESTATUS[0]}"
}
after_sample() {
  cp -r .gpu_util "$W/sample/gpu_util" 2>/dev/null
  cp "$W/env.txt" "$W/sample/env.txt" 2>/dev/null
  return 0
}

defstep examples_truth 120 45 "the main job's story: validation/examples_truth.py runs pytest --gpu-util --gpu-util-html examples/ at COLUMNS=80 in a temporary folder; each problem example exactly its finding, each fix none, the fix's figure moved (examples_truth/: examples.json, examples_80.log, examples_report.html, gpu_util.json)"
step_examples_truth() {
  python3 validation/examples_truth.py "$W/examples_truth" --columns 80
}

defstep gates 120 4 "gates: save a baseline of examples/, then a deliberately slower matmul test, then unchanged code (gate_*.log)"
step_gates() {
  python3 -m pytest examples -q -p no:cacheprovider --gpu-util --gpu-util-save main >"$W/gate_save.log" 2>&1
  echo "save rc=$?"
  GPUUTIL_EXAMPLE_SLOW=1 python3 -m pytest examples -q -p no:cacheprovider --gpu-util --gpu-util-compare main \
    --gpu-util-fail gpu_busy_ms:25% >"$W/gate_compare.log" 2>&1
  echo "compare (slower matmul) rc=$?"
  tail -n 25 "$W/gate_compare.log"
  python3 -m pytest examples -q -p no:cacheprovider --gpu-util --gpu-util-compare main \
    --gpu-util-fail gpu_busy_ms:25% >"$W/gate_compare_clean.log" 2>&1
  echo "compare (unchanged code) rc=$?"
  tail -n 4 "$W/gate_compare_clean.log"
}

defstep why 120 10 "a red gate that explains itself: validation/gates/why_truth.py, a 7-test suite run once, then 5 times with one planted change per test (bf16 -> fp32 no TF32, fused -> two ops, .item() in the loop, pinned -> pageable copy, matmul size doubled; two unchanged), each gated against the first (why/why.json: each case's first line and explained_pct >= 80, unchanged_flagged 0; ~60 s)"
step_why() {
  WHY_TIMEOUT_S=40 python3 validation/gates/why_truth.py "$W/why" --runs "${WHY_RUNS:-5}" \
    --deadline-s $((${STEP_LIMIT_S:-120} - 25))
}
after_why() {
  rm -rf "$W/why/suite/__pycache__" 2>/dev/null
  return 0
}

defstep history 240 24 "run history: validation/history_noise.py, 8 runs of a small suite into a history, the history gate on unchanged and 5x slower code, false alarms counted (history_noise/)"
step_history() {
  python3 validation/history_noise.py --out "$W/history_noise" --runs "${HISTORY_RUNS:-8}"
}
after_history() {
  rm -f "$W/history_noise/suite/"*.pyc 2>/dev/null
  return 0
}

defstep duty 90 0 "duty-cycle ground truth: validation/ground_truth.py --sections duty (into duty/)"
step_duty() {
  python3 validation/ground_truth.py --out "$W/duty" --sections duty
}
after_duty() {
  grep -A8 "Duty cycle" "$W/duty/ground_truth.md" 2>/dev/null | tail -n 5 | cut -d'|' -f1-3,13-18
}

defstep ground_truth 300 40 "ground truth, every section: validation/ground_truth.py (duty, categories, timing)"
step_ground_truth() {
  python3 validation/ground_truth.py --out "$W"
}

defstep zoo 100 22 "kernel zoo: validation/record_zoo.py, one trace per op family (OUTDIR/zoo.tgz)"
step_zoo() {
  python3 validation/record_zoo.py --out "$W"
}
after_zoo() {
  [ -d "$W/zoo" ] && tar czf "$OUT/zoo.tgz" -C "$W" zoo && rm -rf "$W/zoo" "$W/zoo.tgz"
  return 0
}

defstep cli 120 8 "gpuutil analyze as a whole process against the seed, plain JSON: benchmarks/bench_cli_process.py (cli_plain/)"
step_cli() {
  # whether the plain-Python analysis ran its C parts (else its Python passes: same figures, slower)
  python3 -c "from pytest_gpuutil.analysis.intervals import _figures, _unions; print('analysis C parts: built')" \
    >"$W/analysis_c_parts.txt" 2>/dev/null || echo "analysis C parts: not built (the Python passes)" >"$W/analysis_c_parts.txt"
  python3 benchmarks/bench_cli_process.py --repeats 11 --out "$W/cli_plain"
}

defstep cli_gz 90 8 "the same on the gzip'd trace (cli_gz/)"
step_cli_gz() {
  python3 benchmarks/bench_cli_process.py --repeats 7 --keep-gzip --out "$W/cli_gz"
}

defstep c_reader 60 10 "the C reader alone on the 55.7 MB trace, by thread count: benchmarks/bench_c_reader.py"
step_c_reader() {
  python3 benchmarks/bench_c_reader.py --out "$W"
}

defstep speed 300 10 "analysis speed on the recorded 40k-kernel trace: benchmarks/bench_analyze_speed.py (recorded first if the checkout has none)"
step_speed() {
  if [ ! -f benchmarks/data/h200_40k_kernels.json.gz ]; then
    timeout 180 python3 benchmarks/data/record_big_trace.py --out "$W"
    echo "record rc=$?"
    mv "$W/big_trace.json.gz" "$OUT/" 2>/dev/null
    gunzip -c "$OUT/big_trace.json.gz" >/tmp/big_trace.json
  else
    gunzip -c benchmarks/data/h200_40k_kernels.json.gz >/tmp/big_trace.json
  fi
  python3 benchmarks/bench_analyze_speed.py /tmp/big_trace.json --out "$W" --repeats 9 --label real
}

defstep tests 240 0 "the project's whole test suite, GPU tests included (-n 8)"
step_tests() {
  python3 -m pytest tests -q -p no:cacheprovider -rs -n 8
}
after_tests() {
  grep -E "passed|failed" "$W/tests.log" | tail -n 3
  grep -E "^FAILED|^ERROR" "$W/tests.log" | head -n 10
  return 0
}

defstep tests_gpu 300 3 "the GPU test modules alone: profiler, CUPTI, memory, timing, reader paths, hardware counters, child processes, limits in pytest, pytest-benchmark interop"
step_tests_gpu() {
  python3 -m pytest tests/capture/test_profiler_gpu.py tests/capture/test_cupti_gpu.py tests/capture/test_memory_gpu.py \
    tests/capture/test_timing.py tests/traces/test_reader_paths.py \
    tests/hardware/test_counters_gpu.py tests/hardware/test_cuda_context.py tests/children/test_children_gpu.py \
    tests/gates/test_gates_in_pytest.py tests/report/test_benchmark_interop.py \
    -q -p no:cacheprovider -rs --durations=10
}

defstep two_gpus 120 22 "two GPUs of one host: pytest -n 2 --gpu-util --gpu-util-pin examples/, each test's GPU (gpus.txt)"
step_two_gpus() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  nvidia-smi -L
  rm -rf .gpu_util
  python3 -m pytest -n 2 --gpu-util --gpu-util-pin examples/ -p no:cacheprovider
}
after_two_gpus() {
  cp .gpu_util/gpu_util.json "$W/two_gpus_gpu_util.json" 2>/dev/null
  cp .gpu_util/gpu_util.csv "$W/two_gpus_gpu_util.csv" 2>/dev/null
  [ -f .gpu_util/gpu_util.json ] || return 0
  python3 - <<'PY' | tee "$W/gpus.txt"
import json
doc = json.load(open(".gpu_util/gpu_util.json"))
print("machine:", doc["machine_info"]["gpu_count"], "x", doc["machine_info"]["gpu_model"])
for g in doc["gpus"]:
    print("GPU", g["gpu"], "busy_ms", round(g["busy_ms"], 3), "tests", g["tests"], "workers", g["workers"])
for t in doc["tests"]:
    print(t["worker"], sorted(t["gpu_busy_us_by_device"]), t["test"].split("::")[-1])
PY
}

defstep first_run 150 20 "what a new user meets first: validation/first_run.py (examples at COLUMNS=80/200/100 with the HTML page, missing baselines; first_run/: examples_COLUMNS.log; the README's sample comes from the sample step)"
step_first_run() {
  python3 validation/first_run.py "$W/first_run"
}
after_first_run() {
  cp .gpu_util/gpu_util.json "$W/first_run/examples_gpu_util.json" 2>/dev/null
  cp .gpu_util/report.html "$W/first_run/examples_report.html" 2>/dev/null
  return 0
}

defstep children 180 45 "child processes against CUDA-event truth, one GPU (about 1.5 minutes; SIGTERM'd Pool and Process, overlapping ranks and their shares, a child SIGKILLed 1 s after it synchronized): validation/children_truth.py (children/children.json; its table last)"
step_children() {
  python3 validation/children_truth.py --out "$W/children"
}

defstep children_2gpu 200 45 "the same on two GPUs: torchrun with NCCL, one rank per GPU (all-reduces and matmuls; each GPU's row against its rank's truth, and the union), a forked child on GPU 1 (children_2gpu/children.json, case torchrun_nccl_two_gpus)"
step_children_2gpu() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  python3 validation/children_truth.py --out "$W/children_2gpu" --two-gpu
}

defstep interference 120 14 "the hardware-counter sampler's parts against the main thread's workloads, \$INTERFERENCE_ROUNDS (6) rounds: benchmarks/diagnostics/counter_interference.py (interference/)"
step_interference() {
  python3 benchmarks/diagnostics/counter_interference.py --out "$W/interference" --rounds "${INTERFERENCE_ROUNDS:-6}"
}

defstep per_test_path 300 90 "where the per-test path's time goes on the GPU: benchmarks/diagnostics/gpu_path_costs.py (a launch with and without CUPTI, each per-test call), then session_phases.py --hooks --warmup over the overhead suites \$PHASE_SUITES (all three), plain / default / counters_on, \$PHASE_ROUNDS (2) rounds, bytecode written and reused (per_test_path/)"
step_per_test_path() {
  unset PYTHONDONTWRITEBYTECODE
  mkdir -p "$W/per_test_path"
  python3 benchmarks/diagnostics/gpu_path_costs.py --out "$W/per_test_path" | tail -n 40
  local suite suites=()
  for suite in ${PHASE_SUITES:-small launch_bound gpu_bound}; do suites+=(--suite "$suite"); done
  python3 benchmarks/diagnostics/session_phases.py --out /tmp/per_test_path --hooks --warmup --no-components \
    --rounds "${PHASE_ROUNDS:-2}" --only default --only counters_on "${suites[@]}"
  cp /tmp/per_test_path/session_phases.json "$W/per_test_path/"
}

defstep in_test_probe 120 40 "why the in-test path costs more in a suite than in a loop (issue 41i): benchmarks/checks/in_test_gpu_probe.py, pytest --gpu-util over \$PROBE_TESTS (300) small tests a run, six variants (the sampler's C or Python wait, no places, no switch interval, the driver's synchronize, lean), \$PROBE_ROUNDS (2) interleaved rounds within 90 s (in_test_probe/)"
step_in_test_probe() {
  unset PYTHONDONTWRITEBYTECODE
  python3 benchmarks/checks/in_test_gpu_probe.py --out "$W/in_test_probe" --tests "${PROBE_TESTS:-300}" \
    --rounds "${PROBE_ROUNDS:-2}" --budget-s 90
}

defstep floor_probe "${FLOOR_LIMIT_S:-480}" 14 "the floor under issue 41's self-timed bars: benchmarks/checks/floor_probe.py, a plugin doing only the calls a measured test needs in its call (torch's synchronize and CUPTI's clock at both edges; with memory the allocator's reset and read), and the least columnar path that still writes the per-test files (columnar_floor_plugin.py), self-timed, beside plain and ours (default, lean) on 500 and 5,000 small tests, \$FLOOR_ROUNDS (5) interleaved rounds within \$FLOOR_LIMIT_S (480) less 20 s; \$FLOOR_CONFIGS picks configurations (floor_probe/)"
step_floor_probe() {
  unset PYTHONDONTWRITEBYTECODE
  python3 benchmarks/checks/floor_probe.py --out "$W/floor_probe" --rounds "${FLOOR_ROUNDS:-5}" \
    ${FLOOR_CONFIGS:+--configs "$FLOOR_CONFIGS"} --deadline-s $((${STEP_LIMIT_S:-480} - 20))
  for run in "$W"/floor_probe/work/columnar_*_small_500; do  # what the columnar floor wrote (500 tests): its CSV, 3 spool lines
    [ -f "$run/gpu_util.csv" ] || continue
    mkdir -p "$W/floor_probe/sample/${run##*/}"
    cp "$run/gpu_util.csv" "$W/floor_probe/sample/${run##*/}/"
    head -n 3 "$run/gpu_util.spooled.jsonl" > "$W/floor_probe/sample/${run##*/}/spool_head.jsonl"
  done
  rm -rf "$W/floor_probe/work"
}

defstep launch_cost 200 10 "what CUPTI's activity tracing adds to each kernel launch and to a small test's body, each configuration in a fresh process: benchmarks/diagnostics/cupti_launch_cost.py (launch_cost/)"
step_launch_cost() {
  python3 benchmarks/diagnostics/cupti_launch_cost.py --out "$W/launch_cost" --rounds "${LAUNCH_ROUNDS:-3}"
}

defstep counter_costs 300 40 "where the plugin's and the hardware counters' cost goes: benchmarks/diagnostics/counter_interference.py (sampler parts against the main thread; skipped with SPY_ONLY=1), then py-spy (a carried .whl/py_spy-*.whl) over the overhead suites \$SPY_SUITES (all three) in \$SPY_CONFIGS (plain default counters_on), \$SPY_RUNS (2) runs each; SPY_WARM=1: bytecode written and reused, one untimed run first (counter_costs/)"
step_counter_costs() {
  mkdir -p "$W/counter_costs/spy"
  [ "${SPY_ONLY:-0}" = 1 ] ||
    python3 benchmarks/diagnostics/counter_interference.py --out "$W/counter_costs" --rounds "${INTERFERENCE_ROUNDS:-3}"
  python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .whl/py_spy-*.whl >/dev/null 2>&1
  local spy=/tmp/pyspy/bin/py-spy suite cfg r args first=1
  [ -x "$spy" ] || { echo "no py-spy"; return 0; }
  [ "${SPY_WARM:-0}" = 1 ] && { unset PYTHONDONTWRITEBYTECODE; first=0; }
  for r in $(seq "$first" "${SPY_RUNS:-2}"); do
    for suite in ${SPY_SUITES:-small launch_bound gpu_bound}; do
      for cfg in ${SPY_CONFIGS:-plain default counters_on}; do
        case $cfg in
          plain) args="" ;;
          default) args="--gpu-util --gpu-util-dir=/tmp/spy_out" ;;
          counters_on) args="--gpu-util --gpu-util-dir=/tmp/spy_out --gpu-util-counters=auto" ;;
        esac
        local file=$PWD/benchmarks/overhead_suites/test_${suite/small/small_ops}.py
        (cd /tmp && PYTHONPATH=$OLDPWD/benchmarks/diagnostics${PYTHONPATH:+:$PYTHONPATH} "$spy" record -r 400 --threads \
          --idle -f raw -o "$W/counter_costs/spy/$suite.$cfg.$r.txt" -- python3 -m pytest "$file" -q -p no:cacheprovider \
          -p phase_timer --rootdir "$(dirname "$file")" $args) >"$W/counter_costs/spy/$suite.$cfg.$r.log" 2>&1
        echo "$suite $cfg $r rc=$? $(grep -E 'passed in' "$W/counter_costs/spy/$suite.$cfg.$r.log" | tail -n 1)"
      done
    done
  done
  rm -f "$W"/counter_costs/spy/*.0.*  # the untimed first run of SPY_WARM
}

# --- set-up, the runner, packing ----------------------------------------------------------------

SETUP_LIMIT=120
# seconds from the start by which every step has ended (a device call has at most 600 s), and the
# margin kept for packing; DEVICE_DEADLINE_S sets the deadline
DEADLINE=${DEVICE_DEADLINE_S:-570}
PACK_MARGIN=15

setup() {
  export PYTHONUNBUFFERED=1
  if ! python3 -c "import msgspec" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/msgspec-*.whl &&
      export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  timeout "$SETUP_LIMIT" python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$W/install.log" 2>&1 ||
    { echo "editable install failed"; cat "$W/install.log"; }
  # the C reader: built by the install where the image has a compiler and Python's headers; else the
  # copy built on the development machine for this Python (.whl/so312, carried), said so in c_reader.txt
  local check="from pytest_gpuutil.traces.reader import c_reader_available as a; raise SystemExit(not a())"
  if python3 -c "$check" 2>/dev/null; then
    echo "C reader: built by the install" >"$W/c_reader.txt"
  elif cp .whl/so312/_scan.cpython-312-x86_64-linux-gnu.so pytest_gpuutil/traces/ 2>/dev/null && python3 -c "$check"; then
    echo "C reader: the install built none; using the copy built on the development machine" >"$W/c_reader.txt"
  else
    echo "C reader: not available (pure-Python readers)" >"$W/c_reader.txt"
  fi
  cat "$W/c_reader.txt"
  nvidia-smi >"$W/nvidia-smi.txt" 2>&1
  # env.txt: torch, CUDA, GPU and count, Python, CPUs on the first line (a machine without torch or
  # CUDA says so there); the other libraries' versions and the CPU model after it
  python3 - <<'PY' | tee "$W/env.txt"
import importlib, os, platform
def version(name):
    try:
        return getattr(importlib.import_module(name), "__version__", "?")
    except Exception:
        return "-"
try:
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA GPU"
    first = ["torch", torch.__version__, "cuda", str(torch.version.cuda), gpu, "x", str(torch.cuda.device_count())]
except Exception as exc:
    first = ["torch", f"not importable ({type(exc).__name__})"]
print(*first, "python", platform.python_version(), "cpus", len(os.sched_getaffinity(0)))
print(*(f"{name} {version(name)}" for name in ("triton", "pytest", "numpy", "msgspec")))
PY
  lscpu 2>/dev/null | grep -E "Model name|^CPU\(s\)" | tee -a "$W/env.txt"
}

run_step() {
  local name=$1 began=$SECONDS rc limit=${LIMIT[$1]} left
  # the call's deadline: a step gets what is left of it (less a margin for packing), if that is less
  left=$((DEADLINE - SECONDS - PACK_MARGIN))
  [ "$left" -lt "$limit" ] && limit=$left
  echo
  if [ "$limit" -lt 5 ]; then
    echo "=== $name: skipped, the call's deadline of $DEADLINE s is near"
    printf '%-14s skipped (deadline)\n' "$name" >>"$W/steps.txt"
    return 1
  fi
  echo "=== $name: ${WHAT[$name]} (limit $limit s, $(date +%T))"
  STEP_LIMIT_S=$limit timeout -k 10 "$limit" bash "$SELF" __step "$name" >"$W/$name.log" 2>&1
  rc=$?
  [ "$rc" -eq 124 ] && echo "($name stopped at its limit of $limit s)" >>"$W/$name.log"
  echo "$name rc=$rc" >>"$W/$name.log"
  [ "${TAIL[$name]}" -gt 0 ] && tail -n "${TAIL[$name]}" "$W/$name.log"
  if declare -F "after_$name" >/dev/null; then
    "after_$name" 2>&1 | tee -a "$W/$name.log"
  fi
  printf '%-14s rc=%-4s %4d s\n' "$name" "$rc" $((SECONDS - began)) >>"$W/steps.txt"
  echo "$name rc=$rc ($((SECONDS - began)) s)"
  return "$rc"
}

usage() {
  echo "usage: bash scripts/device.sh OUTDIR STEP [STEP ...]   (set-up always runs first; 'setup' alone runs only it)"
  echo "       bash scripts/device.sh help"
  echo
  printf '%-14s %7s  %s\n' step "limit s" "what it runs"
  printf '%-14s %7s  %s\n' setup "$SETUP_LIMIT" "install editable, msgspec from .whl/, C reader check; env.txt, nvidia-smi.txt, c_reader.txt"
  local name
  for name in "${ORDER[@]}"; do
    printf '%-14s %7s  %s\n' "$name" "${LIMIT[$name]}" "${WHAT[$name]}"
  done
}

main() {
  case "${1:-help}" in
    help | -h | --help) usage; return 0 ;;
    __step) cd "$ROOT" && "step_$2"; return ;;  # one step, under run_step's time limit
  esac
  if [ $# -lt 2 ]; then
    usage >&2
    return 2
  fi
  local out=$1 name total=$SETUP_LIMIT failed=0
  shift
  for name in "$@"; do
    [ "$name" = setup ] && continue
    if [ -z "${LIMIT[$name]+set}" ]; then
      echo "device.sh: unknown step '$name' (bash scripts/device.sh help lists the steps)" >&2
      return 2
    fi
    total=$((total + ${LIMIT[$name]}))
  done
  if [ "$total" -gt "$DEADLINE" ]; then
    echo "device.sh: the set-up's and these steps' limits add up to $total s: steps still running at $DEADLINE s are cut short, later ones skipped"
  fi
  mkdir -p "$out/work" || return 2
  OUT=$(cd "$out" && pwd)
  W=$OUT/work
  export OUT W
  cd "$ROOT" || return 2
  echo "=== setup ($(date +%T))"
  setup
  for name in "$@"; do
    [ "$name" = setup ] && continue
    run_step "$name" || failed=1
  done
  echo
  cat "$W/steps.txt" 2>/dev/null
  tar czf "$OUT/results.tgz" -C "$W" . && rm -rf "$W"
  ls -la "$OUT"
  return "$failed"
}

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
ROOT=$(dirname "$(dirname "$SELF")")
main "$@"
