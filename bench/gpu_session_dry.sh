#!/usr/bin/env bash
# Rehearse a gpu_session.sh command on the build machine before spending device time on it:
# the committed tree is copied to a scratch folder with a stand-in .device/activate.sh (this
# project's .venv, no TVM runtime of the device's, no GPU), the staged folder is linked in, and
# the command runs under a short CALL_BUDGET. Every GPU step then fails fast with its own error
# line; what this checks is the script around them: the archives unpack, each step is reached
# within the budget, the branches taken on missing results, and results.tgz is packed and
# readable by close_digest.py.
#
#   bash bench/gpu_session_dry.sh [COMMAND] [STAGED_FOLDER]   # default: close .gpuclose (~1 min)
#   FIRST_BUDGET=40 bash bench/gpu_session_dry.sh close        # a call cut short, then resumed
set -euo pipefail
ROOT=$(git rev-parse --show-toplevel); cd "$ROOT"
cmd=${1:-close} staged=${2:-.gpuclose}
[ -d "$staged" ] || { echo "no $staged here: stage it first (bench/gpu_session.sh stage-close)" >&2; exit 2; }
venv=${VENV:-$ROOT/.venv}
[ -x "$venv/bin/python" ] || { echo "no virtual environment at $venv (VENV=DIR)" >&2; exit 2; }
dry=$(mktemp -d /tmp/cw-dry.XXXXXX)
trap 'rm -rf "$dry"' EXIT
mkdir "$dry/repo"
git ls-files -z | xargs -0 cp --parents -t "$dry/repo"
ln -s "$ROOT/$staged" "$dry/repo/$staged"
mkdir "$dry/repo/.device"
cat > "$dry/repo/.device/activate.sh" <<EOF
export PATH=$venv/bin:\$PATH PYTHONPATH=\$(pwd) PYTHONUNBUFFERED=1
EOF
# FIRST_BUDGET=N: a first call cut short after N seconds, then the command again on the same
# work folder (a resumable command such as `close` goes on where the first call stopped)
if [ -n "${FIRST_BUDGET:-}" ]; then
  (cd "$dry/repo" && git init -q . &&
    CW_GPU_WORK="$dry/work" OUT="$dry/out" CALL_BUDGET=$FIRST_BUDGET \
    bash bench/gpu_session.sh "$cmd") > "$dry/log-first.txt" 2>&1 || {
    tail -20 "$dry/log-first.txt"; echo "the first call of '$cmd' failed (its log above)" >&2
    exit 1; }
  echo "first call's steps (what each was allowed):"
  grep -E '^== .*(at most [0-9]+s\)|skipped|earlier call)' "$dry/log-first.txt" \
    | sed -E 's/ \([0-9:]+, / (/'
  rm -rf "$dry/out"
  echo "the second call's:"
fi
(cd "$dry/repo" && { [ -d .git ] || git init -q .; } &&
  CW_GPU_WORK="$dry/work" OUT="$dry/out" CALL_BUDGET=${CALL_BUDGET:-300} \
  bash bench/gpu_session.sh "$cmd") > "$dry/log.txt" 2>&1 || {
  tail -20 "$dry/log.txt"; echo "the rehearsal of '$cmd' failed (its log above)" >&2; exit 1; }
echo "steps reached, in order (what each was allowed):"
grep -E '^== .*(at most [0-9]+s\)|skipped|earlier call)' "$dry/log.txt" | sed -E 's/ \([0-9:]+, / (/'
if [ -f "$dry/out/results.tgz" ]; then
  "$venv/bin/python" bench/close_digest.py "$dry/out/results.tgz" > "$dry/digest.txt" 2>&1 ||
    { tail -20 "$dry/digest.txt"; echo "close_digest.py failed on the rehearsal's results" >&2; exit 1; }
  echo "results.tgz: $(tar -tzf "$dry/out/results.tgz" | wc -l) entries; close_digest.py read it"
fi
echo "rehearsal of '$cmd' ran to its end (each GPU step failed fast, as it must without a GPU)"
