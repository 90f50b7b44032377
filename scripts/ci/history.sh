#!/usr/bin/env bash
# The nightly gate and history: this job's sweep judged against the nightlies before it (the
# nightly gate, python -m harness.history gate: each point's value against the prediction
# interval of the earlier nightlies, or of a noise floor's σ_apart; inconclusive without either),
# its verdicts and runs then added to the history kept on a data branch (one immutable Parquet
# file per run and per verdict), trend.html drawn (flagged nightlies marked), and the alert check
# (two consecutive bad points after a change point) appended to the job summary. Exit 1 when the
# gate finds a regression or an alert fires.
#   scripts/ci/history.sh results/ci/vllm history results/ci/vllm-trend.html
# Environment: HISTORY_BRANCH (default bench-history), HISTORY_REMOTE (default origin),
# HISTORY_PUSH=1 to push the branch (the nightly job; a pull request never writes it),
# HARNESS_PYTHON (default python3), NOISE_DIR (noise floors, default noise), BENCH_REGRESSION_PCT
# (the gate's margin in %, default 5), GITHUB_STEP_SUMMARY.
#
# Why a data branch and not an artifact chain: artifacts expire (90 days at most) and a chain
# breaks at the first nightly that fails to upload; a branch keeps every run, each addition is a
# commit that can be reviewed or reverted, and two jobs' additions never conflict because no
# file is ever modified (a rejected push is rebased and retried).
set -euo pipefail
results=${1:?usage: scripts/ci/history.sh RESULTS_DIR HISTORY_CHECKOUT TREND_HTML}
dir=${2:?where the history branch is checked out}
html=${3:?trend.html to write}
branch=${HISTORY_BRANCH:-bench-history}
remote=${HISTORY_REMOTE:-origin}
python=${HARNESS_PYTHON:-python3}

# a detached worktree: the branch itself is never checked out here, so nothing holds it
if git fetch -q "$remote" "+refs/heads/$branch:refs/remotes/$remote/$branch" 2>/dev/null; then
  git worktree add -q -f --detach "$dir" "$remote/$branch"
else
  echo "history: no branch $branch on $remote yet: starting it"
  git worktree add -q -f --detach "$dir"
  git -C "$dir" checkout -q --orphan "history-$$"
  git -C "$dir" rm -rq --cached . >/dev/null 2>&1 || true
  find "$dir" -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {} +
fi
summary=()
[ -n "${GITHUB_STEP_SUMMARY:-}" ] && summary=(--markdown "$GITHUB_STEP_SUMMARY")
noise=()
[ -d "${NOISE_DIR:-noise}" ] && noise=(--noise-dir "${NOISE_DIR:-noise}")
set +e
margin=$(awk "BEGIN { print ${BENCH_REGRESSION_PCT:-5} / 100 }")
"$python" -m harness.history gate "$dir/history" "$results" --record --margin "$margin" \
  "${noise[@]}" "${summary[@]}"
gate=$?
set -e
[ "$gate" -gt 1 ] && { echo "error: the nightly gate could not judge $results (exit $gate)" >&2; exit "$gate"; }
"$python" -m harness.history add "$dir/history" "$results"
"$python" -m harness.history trend "$dir/history" --out "$html"
set +e
"$python" -m harness.history check "$dir/history" "${summary[@]}"
check=$?
set -e
git -C "$dir" add history
if ! git -C "$dir" diff --cached --quiet; then
  git -C "$dir" -c user.name="harness history" -c user.email="history@localhost" \
    commit -qm "history: $(basename "$results") $(date -u +%Y-%m-%dT%H:%M:%SZ)"
fi
if [ "${HISTORY_PUSH:-0}" = 1 ]; then
  for attempt in 1 2 3; do
    git -C "$dir" push -q "$remote" "HEAD:refs/heads/$branch" && break
    [ "$attempt" = 3 ] && { echo "error: could not push $branch to $remote" >&2; exit 2; }
    git -C "$dir" pull -q --rebase "$remote" "$branch"
  done
fi
echo "history: $dir/history (branch $branch), trend: $html, gate exit $gate, check exit $check"
[ "$gate" = 1 ] && exit 1
exit $check
