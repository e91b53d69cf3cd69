#!/usr/bin/env bash
# The whole suite under load (issue 44): N runs in a row with pytest-xdist while two busy loops keep
# two cores busy, at today's versions and/or at the declared floors. Writes the command and each
# run's summary line to OUT (default benchmarks/results/<date>_dev/under_load.txt).
#
#   scripts/under_load.sh [--runs N] [--workers N] [--busy N] [--floors] [--today-only] [--out FILE] [-- PYTEST ARGS]
#
# --floors adds N runs of the lowest-versions nox session (noxfile.py's tests-lowest; needs nox and
# uv, as .ci/run installs them) after today's. --today-only is the default; --floors-only skips
# today's runs; PYTEST ARGS (e.g. test paths) go to every run. The busy loops are this script's children, stopped by a trap on any exit.
# Expected time: about 3-6 minutes a run of the suite with -n 8 on a 2-core machine under load.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=3 workers=8 busy=2 today=1 floors=0 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --busy) busy="$2"; shift 2 ;;
    --floors) floors=1; shift ;;
    --floors-only) floors=1; today=0; shift ;;
    --today-only) floors=0; today=1; shift ;;
    --out) out="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "under_load.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out="benchmarks/results/$(date -u +%Y-%m-%d)_dev/under_load.txt"
python=.venv/bin/python
[ -x "$python" ] || { echo "under_load.sh: no .venv (python3 -m venv .venv && .venv/bin/pip install -e '.[test,docs]')" >&2; exit 2; }

busy_pids=()
stop_busy() {
  for pid in "${busy_pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${busy_pids[@]}"; do wait "$pid" 2>/dev/null; done
  busy_pids=()
}
trap stop_busy EXIT
trap 'stop_busy; exit 130' INT TERM
for _ in $(seq "$busy"); do
  python3 -c "while True: pass" &
  busy_pids+=("$!")
done

mkdir -p "$(dirname "$out")"
logs="$(mktemp -d)"
{
  echo "# The whole suite under load: $runs runs in a row, -n $workers, $busy busy loops (python3 -c 'while True: pass')"
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(uname -srm), commit $(git rev-parse --short HEAD 2>/dev/null)"
} > "$out"
failed=0
run_one() {  # label, command...
  local label="$1"; shift
  echo "\$ $*" >> "$out"
  for i in $(seq "$runs"); do
    local log="$logs/$label-$i.log"
    "$@" > "$log" 2>&1
    local rc=$?
    local summary
    summary="$(grep -E '(passed|failed|error).* in [0-9.]+s' "$log" | tail -1)"
    echo "$label run $i (exit $rc): ${summary:-no summary line; last lines: $(tail -3 "$log" | tr '\n' ' ')}" | tee -a "$out"
    if [ "$rc" -ne 0 ]; then
      failed=1
      grep -E '^(FAILED|ERROR) ' "$log" | head -20 >> "$out"
      # the failures' own lines, kept beside OUT (the log itself goes with the temporary folder)
      sed -n '/= FAILURES =/,/short test summary/p;/= ERRORS =/,/short test summary/p' "$log" | head -400 \
        > "${out%.txt}_${label}_run${i}_failures.log"
    fi
  done
}
if [ "$today" -eq 1 ]; then
  # (pytest's cache stays on: the floors' session compares its skipped tests with this run's)
  run_one today "$python" -m pytest -q -n "$workers" "$@"
fi
if [ "$floors" -eq 1 ]; then
  run_one floors .venv/bin/nox -s tests-lowest -- -n "$workers" "$@"
fi
rm -rf "$logs"
echo "wrote $out"
exit "$failed"
