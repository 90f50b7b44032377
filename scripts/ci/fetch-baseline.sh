#!/usr/bin/env bash
# The baseline: the same sweep's results from the latest successful run of this workflow on the
# default branch, downloaded with the GitHub CLI into <dest>. None (a first run, or an expired
# artifact) leaves <dest> absent and says so; it is not an error.
#   GH_TOKEN=… scripts/ci/fetch-baseline.sh results-vllm-nightly baseline/vllm
# Environment: WORKFLOW (default gpu-benchmark.yml), BRANCH (default main), GITHUB_REPOSITORY.
set -euo pipefail
artifact=${1:?usage: scripts/ci/fetch-baseline.sh ARTIFACT_NAME DEST}
dest=${2:?destination folder}
workflow=${WORKFLOW:-gpu-benchmark.yml}
branch=${BRANCH:-main}
repo_args=()
[ -n "${GITHUB_REPOSITORY:-}" ] && repo_args=(--repo "$GITHUB_REPOSITORY")

run_id=$(gh run list "${repo_args[@]}" --workflow "$workflow" --branch "$branch" --status success \
           --limit 1 --json databaseId --jq '.[0].databaseId // empty')
if [ -z "$run_id" ]; then
  echo "no baseline: no successful run of $workflow on $branch yet"
  exit 0
fi
tmp=$(mktemp -d)
if ! gh run download "$run_id" "${repo_args[@]}" --name "$artifact" --dir "$tmp" 2>/dev/null; then
  rm -rf "$tmp"
  echo "no baseline: run $run_id of $workflow on $branch has no artifact $artifact (expired, or that engine did not run)"
  exit 0
fi
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$tmp" "$dest"
echo "baseline: $artifact of run $run_id ($workflow on $branch) in $dest"
