#!/usr/bin/env bash
# make test-integration: plan every case of cases.txt for every runtime, export it, and feed the export to
# that runtime's own parser/config class (tests/integration/check_RUNTIME.py), each runtime installed at
# pinned versions from the package registry into .venv-it/RUNTIME (CPU only). Prints 'N passed, M failed'.
# RUNTIMES="megatron deepspeed" limits the set; a runtime whose requirements do not install fails.
# IT_PRUNE=1 (CI) removes each runtime's venv once its exports are checked: the torch CUDA wheels make
# megatron's and torchtitan's venvs ~6 GB each, and all five together (~16 GB) once filled a CI disk.
set -uo pipefail
cd "$(dirname "$0")/../.."
BP=${BP:-.venv/bin/baige-plan}
RUNTIMES=${RUNTIMES:-"megatron deepspeed torchtitan paddle flagscale"}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
pass=0; fail=0; skipped=0

venv_for() {   # venv_for RUNTIME -> path of its python, (re)built when its requirements change
  local rt=$1 req=tests/integration/requirements-$1.txt dir=.venv-it/$1
  local want py=""; want=$(sed -n 's/^# *python: *//p' "$req" | head -1); want=${want:-python3}
  # an interpreter that really runs (pyenv shims exist for versions that are not active)
  for cand in "$want" "$(basename "$want")" /root/.pyenv/versions/*/bin/"$(basename "$want")"; do
    if "$cand" -c 'import sys' >/dev/null 2>&1; then py=$cand; break; fi
  done
  [ -n "$py" ] || { echo "no working $want for $1" >&2; return 1; }
  local stamp; stamp=$(sha256sum "$req" | cut -c1-16)
  if [ ! -x "$dir/bin/python" ] || [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$dir"
    "$py" -m venv "$dir" >&2 || return 1
    "$dir/bin/pip" install -q --no-cache-dir --upgrade pip >&2 || true
    # no cache: a cached copy of the CUDA wheels would double the disk they take
    DS_BUILD_OPS=0 "$dir/bin/pip" install -q --no-cache-dir -r "$req" >&2 || { rm -rf "$dir"; return 1; }
    echo "$stamp" > "$dir/.stamp"
  fi
  echo "$dir/bin/python"
}

prune() { [ "${IT_PRUNE:-0}" = 1 ] && rm -rf ".venv-it/$1"; true; }

for rt in $RUNTIMES; do
  [ -f "tests/integration/check_$rt.py" ] || { echo "FAIL $rt: no tests/integration/check_$rt.py"; fail=$((fail+1)); continue; }
  t0=$(date +%s)
  if ! py=$(venv_for "$rt"); then
    echo "FAIL $rt: requirements-$rt.txt did not install ($(df -h . | awk 'NR==2{print $4}') free on disk)"
    fail=$((fail+1)); continue
  fi
  echo "== $rt: venv ready in $(( $(date +%s) - t0 )) s" >&2
  dirs=()
  while IFS='|' read -r name args; do
    name=$(echo "$name" | xargs); [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
    d="$WORK/$rt/$name"; mkdir -p "$d"
    # shellcheck disable=SC2086
    $BP plan $args --runtime "$rt" --out "$d/plan.yaml" --format json >/dev/null 2>"$d/plan.err"
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "skip $rt/$name: plan exit $rc: $(grep -v '^note:' "$d/plan.err" | head -1)" >&2
      skipped=$((skipped+1)); continue
    fi
    if ! $BP export "$d/plan.yaml" --to "$rt" --out-dir "$d" >/dev/null 2>"$d/export.err"; then
      echo "FAIL $rt/$name: export: $(tail -1 "$d/export.err")"; fail=$((fail+1)); continue
    fi
    dirs+=("$d")
  done < tests/integration/cases.txt
  [ ${#dirs[@]} -eq 0 ] && { prune "$rt"; continue; }
  t1=$(date +%s)
  out=$("$py" "tests/integration/check_$rt.py" "${dirs[@]}" 2>&1)
  echo "$out" | grep -vE '^[0-9]+ passed, [0-9]+ failed' | sed "s#$WORK/##g"
  p=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1/p' | tail -1)
  f=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\2/p' | tail -1)
  if [ -z "$p" ]; then echo "FAIL $rt: check printed no summary"; fail=$((fail+1)); prune "$rt"; continue; fi
  pass=$((pass+p)); fail=$((fail+f))
  echo "== $rt: checked ${#dirs[@]} exports in $(( $(date +%s) - t1 )) s" >&2
  prune "$rt"
done
echo "integration ($skipped case/runtime pairs the runtime cannot run were skipped):"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
