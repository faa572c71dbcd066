#!/bin/bash
# berth's whole test suite, from a fresh clone of a Debian 12 machine:
#
#   sudo bash tests/run.sh
#
# Root is needed only for the set-up (packages, the unprivileged test user,
# two loopback registries, fixture images); every berth command in the
# end-to-end tests runs as that unprivileged user. CI runs exactly this
# (.ci/run).
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ $(id -u) != 0 ]]; then
    echo "tests/run.sh: run as root (sudo): the set-up installs packages, creates the" >&2
    echo "unprivileged test user and starts registries; berth itself runs unprivileged." >&2
    exit 1
fi

bash tests/setup/setup.sh
trap 'bash tests/setup/teardown.sh >/dev/null 2>&1 || true' EXIT

echo "== lint: shellcheck and flake8 (tests/lint.sh)"
bash tests/lint.sh
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo build; the Slurm test cluster with berth's SPANK plugin"
cargo build --workspace --locked
bash tests/setup/slurm_plugin.sh target/debug
echo "== cargo test"
# BERTH_IT_REQUIRED: end-to-end tests fail instead of skipping when the
# fixture environment is missing.
log=$(mktemp)
status=0
BERTH_IT_REQUIRED=1 cargo test --workspace --locked 2>&1 | tee "$log" || status=$?
# The run tests again on a node as issue 20 describes it: no usable FUSE
# (images unpacked) and a user without subordinate ids (root emulation).
echo "== cargo test, the run tests with the fallbacks forced (BERTH_IT_FALLBACKS)"
BERTH_IT_REQUIRED=1 BERTH_IT_FALLBACKS=1 cargo test -p berth --test it --locked -- runtime_run:: 2>&1 \
    | tee -a "$log" || status=$?
# The run tests once more with every root served by fuse-overlayfs, as
# writable runs are where the kernel refuses overlayfs in user namespaces.
echo "== cargo test, the run tests through fuse-overlayfs (BERTH_IT_OVERLAY=fuse)"
BERTH_IT_REQUIRED=1 BERTH_IT_OVERLAY=fuse cargo test -p berth --test it --locked -- runtime_run:: 2>&1 \
    | tee -a "$log" || status=$?
# The cluster again as many sites run it: each step in a cgroup of its own
# that Slurm kills whole at the step's end (proctrack/cgroup), and named
# containers of global scope (container_scope=global in plugstack.conf);
# their tests, then the cluster as it was.
echo "== cargo test, the Slurm tests with proctrack/cgroup and container_scope=global"
BERTH_SLURM_PROCTRACK=cgroup BERTH_SPANK_ARGS=container_scope=global \
    bash tests/setup/slurm_plugin.sh target/debug
BERTH_IT_REQUIRED=1 cargo test -p berth --test it --locked -- --ignored slurm_global:: slurm_cgroup:: 2>&1 \
    | tee -a "$log" || status=$?
bash tests/setup/slurm_plugin.sh target/debug
# One closing line for the whole suite (cargo prints one per test binary,
# the last of which is a doc-test binary with nothing in it).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) n += $i } }
     END { printf "tests: %d passed, %d failed, %d ignored\n", p, f, n }' "$log"
rm -f "$log"

# The Debian package, built from this build, installed and used as a site
# would (berth doctor, a pull and a run as the test user, the plugin from
# its installed path under Slurm), then purged.
echo "== the .deb package (tests/package.sh)"
if bash tests/package.sh target/debug; then
    echo "package: ok"
else
    echo "package: failed"
    status=1
fi

# The documentation: the book builds without a warning, and its examples
# marked as tested run as the test user (tests/docs.sh).
echo "== the documentation (tests/docs.sh)"
if bash tests/docs.sh target/debug; then
    echo "docs: ok"
else
    echo "docs: failed"
    status=1
fi

# The fuzz targets, briefly (tests/fuzz.sh: 10 s each; the reliability
# run gives them longer). BERTH_SKIP_FUZZ=1 skips it.
if [[ ${BERTH_SKIP_FUZZ:-0} != 1 ]]; then
    echo "== fuzz targets, 10 s each (tests/fuzz.sh)"
    fuzz_status=0
    bash tests/fuzz.sh --seconds 10 || fuzz_status=$?
    case $fuzz_status in
        0) echo "fuzz (short): ok" ;;
        3) echo "fuzz (short): skipped (nightly or cargo-fuzz could not be installed)" ;;
        *) echo "fuzz (short): failed"; status=1 ;;
    esac
fi

# Benchmarks are not tests (no pass or fail on time), but one short round of
# each runs here so that the suite cannot rot: the scripts, their peers'
# set-up, the result files and the report generator. Debug binaries are
# enough for that. BERTH_SKIP_BENCH_SMOKE=1 skips it.
if [[ ${BERTH_SKIP_BENCH_SMOKE:-0} != 1 ]]; then
    echo "== benchmark smoke run (bench/run.sh --smoke)"
    bench_status=0
    bash bench/run.sh --smoke --bin-dir target/debug || bench_status=$?
    if ((bench_status == 0)); then
        echo "benchmarks (smoke): ok"
    else
        echo "benchmarks (smoke): failed"
        status=1
    fi
fi
exit "$status"
