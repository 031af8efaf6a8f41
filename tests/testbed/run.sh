#!/usr/bin/env bash
# Distributed jobs across hosts on the network test bed (scripts/testbed): 4 hosts as network
# namespaces with 1 Gbit/s links, a dist_sync job of 2 servers (kvtb1, kvtb2) and 2 workers
# (kvtb3, kvtb4) started by `scripts/kvstore-launch -H HOSTFILE --launcher ssh`, MPI over TCP
# between hosts. ctests/dist_rounds.c checks every pulled value itself; each case below also
# compares the workers' results with the undisturbed run's:
#   1. undisturbed: rc 0, every value right, servers and workers on the hosts expected;
#   2. a slowed link: a server host's link cut to 100 Mbit/s (10x) for 4 s mid-job: rc 0, the
#      same results;
#   3. a short partition: a server host cut off for 6 s (less than any timeout) mid-job, then
#      reconnected: rc 0, the same results;
#   4. a killed host: every process of a server host killed mid-job: the job ends within 15 s,
#      non-zero, with a message naming the host, and no process is left on any host;
#   5. a long partition: a server host cut off for good: Open MPI's oob keepalive (the bed's
#      10 s + 3 x 2 s) ends the job within 30 s, non-zero, naming the host; no process is left
#      on any host, the cut-off one included;
#   6. the same ended by the library (only when it has KVSTORE_DIST_TIMEOUT, documented in
#      docs/environment.md), with KVSTORE_DIST_TIMEOUT=5 and Open MPI's keepalive pushed out to
#      26 s: every rank ends non-zero within the timeout + 6 s (the cut-off server by itself),
#      a message names the unreachable host or rank, and no process is left on any host.
# Skipped, with the reason, where network namespaces cannot be made (not root, no `ip netns`);
# KVSTORE_REQUIRE_TESTBED=1 (set by scripts/test.sh) makes that a failure. The bed is always
# torn down (scripts/testbed down), also on failure. About a minute and a half.
#
#   tests/testbed/run.sh [--no-build] [--keep DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TB="$ROOT/scripts/testbed"

build=1
keep=
while [[ $# -gt 0 ]]; do
    case $1 in
        --no-build) build=0; shift ;;
        --keep) keep=${2:?--keep needs a directory}; shift 2 ;;
        *) echo "usage: tests/testbed/run.sh [--no-build] [--keep DIR]" >&2; exit 2 ;;
    esac
done

if ! why=$("$TB" check 2>&1); then
    if [[ -n ${KVSTORE_REQUIRE_TESTBED:-} && ${KVSTORE_REQUIRE_TESTBED} != 0 ]]; then
        echo "testbed tests: FAILED (KVSTORE_REQUIRE_TESTBED=1): $why" >&2
        exit 1
    fi
    echo "skipped: testbed tests: $why"
    exit 0
fi
if ! command -v mpirun >/dev/null; then
    echo "testbed tests: FAILED: mpirun not found (apt-get install openmpi-bin)" >&2
    exit 1
fi
# A bed left by a killed run is replaced; one with processes on its hosts is someone's: refused.
if [[ -d /run/kvstore-testbed ]]; then
    if [[ -n $(for ns in $(ip netns list | awk '{print $1}' | grep -E '^kvtb[0-9]+$'); do ip netns pids "$ns"; done) ]]; then
        echo "testbed tests: FAILED: a test bed is up and in use (scripts/testbed status; scripts/testbed down)" >&2
        exit 1
    fi
    "$TB" down >/dev/null
fi

[[ $build == 0 ]] || cargo build --release --quiet --workspace
mkdir -p target/testbed
cc -std=c11 -Wall -Wextra -Werror -O2 -pthread -I include ctests/dist_rounds.c -L target/release -lkvstore \
    -Wl,-rpath,"$ROOT/target/release" -lm -o target/testbed/dist_rounds
PROG="$ROOT/target/testbed/dist_rounds"

if [[ -n $keep ]]; then
    rm -rf "$keep"
    mkdir -p "$keep"
    runs=$(cd "$keep" && pwd)
else
    runs=$(mktemp -d /tmp/testbed-tests-XXXXXX)
fi
cleanup() {
    "$TB" down >/dev/null 2>&1 || "$TB" down
    [[ -n $keep ]] || rm -rf "$runs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$TB" up 4 --rate 1gbit >/dev/null
HOSTFILE=$("$TB" hostfile)
# 30 rounds of 4 MiB (key 1, split over both servers) and a small key, 150 ms apart: about 6 s.
ROUNDS=30
ELEMENTS=1048576
PAUSE_MS=150
failures=0
fail() {
    echo "FAILED: $*" >&2
    failures=$((failures + 1))
}
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN {printf "%.1f", a - b}'; }

# Starts a job in the background: NAME [extra kvstore-launch arguments]; sets JOB_PID, JOB_OUT.
start_job() {
    local name=$1
    shift
    JOB_OUT="$runs/$name"
    mkdir -p "$JOB_OUT"
    # timeout -k: a cut-off mpirun ignores a plain TERM (network.md).
    timeout -k 5 90 "$TB" run "$ROOT/scripts/kvstore-launch" -n 2 -s 2 -H "$HOSTFILE" --launcher ssh --timeout 80 \
        --env "DIST_DIFF_OUT=$JOB_OUT" --env MXNET_KVSTORE_BIGARRAY_BOUND=1000 --env KVSTORE_DIST_EXIT_TIMEOUT=30 "$@" \
        "$ROOT/tests/testbed/rank.sh" "$PROG" $ROUNDS $ELEMENTS $PAUSE_MS >"$JOB_OUT/stdout" 2>"$JOB_OUT/stderr" &
    JOB_PID=$!
    JOB_START=$(now)
}

# Waits for the job; sets JOB_RC and JOB_SECONDS.
wait_job() {
    JOB_RC=0
    wait "$JOB_PID" || JOB_RC=$?
    JOB_SECONDS=$(since "$JOB_START")
}

# Waits until worker 0 has finished round $1 (at most 40 s); false if the job ended first.
wait_round() {
    local deadline=$((SECONDS + 40))
    while ((SECONDS < deadline)); do
        grep -q "^round $1: key 2" "$JOB_OUT/worker-0.txt" 2>/dev/null && return 0
        kill -0 "$JOB_PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# The processes of every host, "host: pid comm ..." (empty when none is left).
bed_processes() {
    local h
    for h in kvtb1 kvtb2 kvtb3 kvtb4; do
        local pids
        pids=$(ip netns pids "$h" 2>/dev/null | paste -sd, -)
        [[ -z $pids ]] || echo "$h: $(ps -o pid=,comm= -p "$pids" 2>/dev/null | tr -s ' \n' '  ')"
    done
}

# Waits up to $1 seconds for every host to be empty; false, saying what is left, otherwise.
no_process_left() {
    local deadline=$((SECONDS + $1)) left
    while ((SECONDS < deadline)); do
        left=$(bed_processes)
        [[ -z $left ]] && return 0
        sleep 0.2
    done
    echo "processes left on the bed after $1 s:" >&2
    bed_processes >&2
    return 1
}

job_log() { tail -n 25 "$JOB_OUT/stdout" "$JOB_OUT/stderr" >&2; }

# The workers' results of job $1 equal the undisturbed job's.
same_results() {
    local r
    for r in 0 1; do
        if ! cmp -s "$runs/undisturbed/worker-$r.txt" "$runs/$1/worker-$r.txt"; then
            fail "$1: worker $r's results differ from the undisturbed job's:"
            diff "$runs/undisturbed/worker-$r.txt" "$runs/$1/worker-$r.txt" | head -n 10 >&2 || true
            return 1
        fi
    done
}

passed_job() { # NAME: rc 0, both workers ok and done
    if [[ $JOB_RC != 0 ]] || [[ $(grep -c "^worker [01] ok$" "$JOB_OUT/stdout") != 2 ]]; then
        fail "$1: the job failed (status $JOB_RC)"
        job_log
        return 1
    fi
}

# ---- 1. undisturbed, and where the processes run ----
start_job undisturbed
placement=
if wait_round 2; then
    for h in kvtb1 kvtb2 kvtb3 kvtb4; do
        roles=""
        for pid in $(ip netns pids "$h"); do
            [[ $(cat "/proc/$pid/comm" 2>/dev/null) == dist_rounds ]] || continue
            roles+=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^DMLC_ROLE=//p')
        done
        placement+="$h=$roles "
    done
fi
wait_job
if passed_job undisturbed; then
    if [[ $placement != "kvtb1=server kvtb2=server kvtb3=worker kvtb4=worker " ]]; then
        fail "undisturbed: processes placed as '$placement', expected servers on kvtb1 and kvtb2, workers on kvtb3 and kvtb4"
    else
        echo "testbed: undisturbed job across 4 hosts passed in $JOB_SECONDS s ($placement)"
    fi
fi
base_seconds=$JOB_SECONDS
no_process_left 10 || fail "undisturbed: processes left"

# ---- 2. a slowed link ----
start_job slowed
if wait_round 3; then
    "$TB" rate kvtb1 100mbit >/dev/null
    t_cut=$(now)
    sleep 4
    "$TB" rate kvtb1 1gbit >/dev/null
fi
wait_job
if passed_job "slowed link" && same_results slowed; then
    echo "testbed: link of server host kvtb1 at 100 Mbit/s for 4 s: rc 0, same results, $JOB_SECONDS s (undisturbed $base_seconds s)"
fi
no_process_left 10 || fail "slowed link: processes left"

# ---- 3. a short partition ----
start_job partition
if wait_round 3; then
    "$TB" cut kvtb2 >/dev/null
    sleep 6
    "$TB" restore kvtb2 >/dev/null
fi
wait_job
if passed_job "short partition" && same_results partition; then
    echo "testbed: server host kvtb2 cut off for 6 s: rc 0, same results, $JOB_SECONDS s (undisturbed $base_seconds s)"
fi
no_process_left 10 || fail "short partition: processes left"

# ---- 4. a killed host ----
# Open MPI names the dead peer either by host ("Peer host: kvtb2", "on node kvtb2") or, when a
# rank's reconnection fails first, by address only ("connect() to 198.18.0.2:1025 failed").
NAMES_KVTB2='kvtb2|198\.18\.0\.2([^0-9]|$)'

# Waits for the job after a fault at time $1 on kvtb2: it must end non-zero within $2 s with a
# message naming the host. $3 labels failures, $4 says what happened in the success line.
ends_naming_kvtb2() {
    local fault=$1 limit=$2 label=$3 what=$4 took
    wait_job
    took=$(since "$fault")
    if [[ $JOB_RC == 0 ]]; then
        fail "$label: the job ended with status 0"
    elif awk -v t="$took" -v l="$limit" 'BEGIN {exit !(t > l)}'; then
        fail "$label: the job took $took s to end after the fault (status $JOB_RC)"
    elif ! grep -Eq "$NAMES_KVTB2" "$JOB_OUT/stdout" "$JOB_OUT/stderr"; then
        fail "$label: no message names host kvtb2 (or its address 198.18.0.2)"
        job_log
    else
        echo "testbed: $what: the job ended in $took s, status $JOB_RC: $(grep -h -E -m1 "$NAMES_KVTB2" "$JOB_OUT/stderr" "$JOB_OUT/stdout" | head -n 1 | sed 's/^ *//')"
    fi
}
start_job killed
if wait_round 3; then
    "$TB" kill kvtb2 >/dev/null
    ends_naming_kvtb2 "$(now)" 15 "killed host" "every process of server host kvtb2 killed"
else
    wait_job
    fail "killed host: the job ended before round 3 (status $JOB_RC)"
    job_log
fi
no_process_left 15 || fail "killed host: processes left"

# ---- 5. a long partition, ended by Open MPI ----
# The bed's oob keepalive (10 s + 3 x 2 s) notices the cut-off daemon: the job ends non-zero
# naming the host, and the cut-off host's daemon and ranks end too (it lost mpirun).
start_job long-partition-mpi
if wait_round 3; then
    "$TB" cut kvtb2 >/dev/null
    ends_naming_kvtb2 "$(now)" 30 "long partition (Open MPI)" "server host kvtb2 cut off for good, Open MPI's keepalive"
    # Checked before the cable goes back: the cut-off host must empty itself.
    no_process_left 20 || fail "long partition (Open MPI): processes left"
    "$TB" restore kvtb2 >/dev/null
else
    wait_job
    fail "long partition (Open MPI): the job ended before round 3 (status $JOB_RC)"
    job_log
fi
no_process_left 10 || fail "long partition (Open MPI): processes left"

# ---- 6. a long partition, ended by the library: needs KVSTORE_DIST_TIMEOUT ----
# Open MPI's keepalive is pushed out to 20 s + 6 s here, so only the library's timeout can end
# the ranks within the limit.
if grep -q '`KVSTORE_DIST_TIMEOUT`' docs/environment.md; then
    limit=5
    bound=$((limit + 6))
    start_job long-partition --env "KVSTORE_DIST_TIMEOUT=$limit" --mca oob_tcp_keepalive_time 20
    if wait_round 3; then
        "$TB" cut kvtb2 >/dev/null
        t_cut=$(now)
        # Every dist_rounds process, on every host, must end by itself within the bound.
        ended=
        while awk -v t="$(since "$t_cut")" -v l=$bound 'BEGIN {exit !(t <= l)}'; do
            if [[ -z $(bed_processes | grep -w dist_rounds || true) ]]; then
                ended=$(since "$t_cut")
                break
            fi
            sleep 0.2
        done
        [[ -n $ended ]] || still=$(bed_processes | tr '\n' ' ')
        wait_job
        statuses=$(cat "$JOB_OUT"/rc.* 2>/dev/null | sort || true)
        if [[ -z $ended ]]; then
            fail "long partition (KVSTORE_DIST_TIMEOUT=$limit): ranks still running $bound s after the cut: $still"
        elif [[ $JOB_RC == 0 ]]; then
            fail "long partition (KVSTORE_DIST_TIMEOUT=$limit): the job ended with status 0"
        elif grep -q " 0$" <<<"$statuses"; then
            fail "long partition (KVSTORE_DIST_TIMEOUT=$limit): a rank ended with status 0: $statuses"
        elif ! grep -q "^kvtb2 server [1-9]" <<<"$statuses"; then
            fail "long partition (KVSTORE_DIST_TIMEOUT=$limit): the cut-off server (kvtb2) did not end by itself non-zero: ${statuses:-no rank recorded its end}"
        elif ! grep -Eq "$NAMES_KVTB2|rank 1\b|server 1\b" "$JOB_OUT/stdout" "$JOB_OUT/stderr"; then
            fail "long partition (KVSTORE_DIST_TIMEOUT=$limit): no message names the unreachable host kvtb2 (server rank 1)"
            job_log
        else
            echo "testbed: server host kvtb2 cut off for good, KVSTORE_DIST_TIMEOUT=$limit: every rank ended within $ended s, job status $JOB_RC; rank statuses: $(tr '\n' ';' <<<"$statuses")"
        fi
        no_process_left 40 || fail "long partition (KVSTORE_DIST_TIMEOUT=$limit): processes left"
        "$TB" restore kvtb2 >/dev/null
    else
        wait_job
        fail "long partition (KVSTORE_DIST_TIMEOUT): the job ended before round 3 (status $JOB_RC)"
        job_log
    fi
    no_process_left 10 || fail "long partition (KVSTORE_DIST_TIMEOUT): processes left"
else
    echo "skipped: testbed long partition with KVSTORE_DIST_TIMEOUT: this library does not have it (docs/environment.md)"
fi

if ((failures)); then
    echo "testbed tests: $failures FAILED (outputs: ${keep:-removed; rerun with --keep DIR})" >&2
    exit 1
fi
echo "testbed tests: passed"
