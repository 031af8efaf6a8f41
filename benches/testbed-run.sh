#!/usr/bin/env bash
# Distributed benchmark across hosts: benches/distbench.c (ResNet-50 gradients, push + pull of
# every key per iteration) on a 4-host network test bed (scripts/testbed, links shaped both
# ways, 1 Gbit/s by default), 2 servers on kvtb1 and kvtb2 and 2 workers on kvtb3 and kvtb4,
# for the reference libmxnet.so (ps-lite: scheduler on kvtb1, every process started on its host
# with DMLC_INTERFACE=eth0) and libkvstore.so (MPI: scripts/kvstore-launch -H HOSTFILE
# --launcher ssh) in the same run. Prints each library's s/iter (mean of the workers' medians),
# the ratio libkvstore / ps-lite, the full-duplex link limit (the payload over the busiest link
# direction per step / 119.6 MB/s, a 1 Gbit/s link's TCP goodput), and per-host link
# utilisation sampled every second by `scripts/testbed monitor` (mean and peak Mbit/s while
# the job moved data; the bytes each direction carried). Root only (network namespaces).
#
# With --workers W (default 2) and --servers S (default 2) the bed has S + W hosts, servers
# on kvtb1 .. kvtbS and workers on the next W. With --colocated it has W hosts, each with a
# server and a worker (S = W), as MXNet's launch.py places them (server i and worker i on
# host i; ps-lite's scheduler on kvtb1; libkvstore through a hostfile of 2 slots a host).
# --2bit: 2-bit gradient compression (threshold 0.5) on both libraries (distbench --2bit:
# MXKVStoreSetGradientCompression, which MXNet's set_gradient_compression calls).
# --updater: the servers update each key with a C updater (distbench --updater), as a job
# with the optimizer on the servers: a round is answered after its update.
# --mxnet-placement: a second libkvstore leg with KVSTORE_DIST_BALANCE=0 (small keys on
# (key * 9973) % S, as MXNet), in the same run.
# --base DIR: a leg of another build, the libkvstore.so and libkvstore_mpi.so in DIR (e.g.
# copied from target/release at another commit), after this build's, in the same run: a
# same-run A/B with this build / base. --no-reference: no ps-lite leg (A/B runs).
# --env NAME=VALUE (repeatable): set for this build's libkvstore leg (kvstore-launch --env);
# --env-server NAME:VALUE and --env-worker NAME:VALUE, for its servers or workers only.
#
#   benches/testbed-run.sh [--iters N (default 10)] [--rate 1gbit] [--workers W] [--servers S]
#                          [--colocated] [--2bit] [--updater] [--mxnet-placement] [--base DIR]
#                          [--no-reference] [--env NAME=VALUE] [--env-server NAME:VALUE]
#                          [--env-worker NAME:VALUE] [--no-build] [--keep DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TB="$ROOT/scripts/testbed"
iters=10
rate=1gbit
build=1
keep=
nworkers=2
nservers=2
colocated=0
twobit=
updater=
mxnet_placement=0
base=
reference_leg=1
kv_env=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --iters) iters=${2:?}; shift 2 ;;
        --workers) nworkers=${2:?}; shift 2 ;;
        --servers) nservers=${2:?}; shift 2 ;;
        --colocated) colocated=1; shift ;;
        --2bit) twobit=--2bit; shift ;;
        --updater) updater=--updater; shift ;;
        --mxnet-placement) mxnet_placement=1; shift ;;
        --base) base=${2:?}; shift 2 ;;
        --no-reference) reference_leg=0; shift ;;
        --env) kv_env+=(--env "${2:?}"); shift 2 ;;
        --env-server) kv_env+=(--env-server "${2:?}"); shift 2 ;;
        --env-worker) kv_env+=(--env-worker "${2:?}"); shift 2 ;;
        --rate) rate=${2:?}; shift 2 ;;
        --no-build) build=0; shift ;;
        --keep) keep=${2:?}; shift 2 ;;
        *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
"$TB" check
# A bed left by a killed run is replaced; one with processes on its hosts is someone's: refused.
if [[ -d /run/kvstore-testbed ]]; then
    if [[ -n $(for ns in $(ip netns list | awk '{print $1}' | grep -E '^kvtb[0-9]+$'); do ip netns pids "$ns"; done) ]]; then
        echo "testbed-run: a test bed is up and in use (scripts/testbed status; scripts/testbed down)" >&2
        exit 1
    fi
    "$TB" down >/dev/null
fi
[[ $build == 0 ]] || cargo build --release --quiet --workspace
mkdir -p target/bench
reference="${MXNET_LIBRARY:-$(scripts/reference-mxnet.sh)}"
cc -std=c11 -O2 -Wall -Wextra -I include benches/distbench.c "$reference" \
    -Wl,-rpath,"$(dirname "$reference")" -o target/bench/distbench_mx
cc -std=c11 -O2 -Wall -Wextra -I include benches/distbench.c -L target/release -lkvstore \
    -Wl,-rpath,"$ROOT/target/release" -o target/bench/distbench_kv

if [[ -n $keep ]]; then
    mkdir -p "$keep"
    out=$(cd "$keep" && pwd)
else
    out=$(mktemp -d /tmp/testbed-bench-XXXXXX)
fi
if [[ -n $base ]]; then
    [[ -f $base/libkvstore.so && -f $base/libkvstore_mpi.so ]] || { echo "testbed-run: --base needs libkvstore.so and libkvstore_mpi.so in $base" >&2; exit 2; }
    # A copy of the base build's libraries under their run-time name (the soname), the MPI
    # plugin beside them where the library looks for it; the program linked to that copy.
    mkdir -p "$out/base-lib"
    cp "$base/libkvstore.so" "$base/libkvstore_mpi.so" "$out/base-lib/"
    soname=$(objdump -p "$out/base-lib/libkvstore.so" | awk '$1 == "SONAME" {print $2}')
    [[ -z $soname || -e $out/base-lib/$soname ]] || ln -s libkvstore.so "$out/base-lib/$soname"
    cc -std=c11 -O2 -Wall -Wextra -I include benches/distbench.c -L "$out/base-lib" -lkvstore \
        -Wl,-rpath,"$out/base-lib" -o target/bench/distbench_kv_base
fi
monitor_pid=
cleanup() {
    [[ -z $monitor_pid ]] || kill "$monitor_pid" 2>/dev/null || true
    "$TB" down >/dev/null 2>&1 || "$TB" down
    [[ -n $keep ]] || rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[[ $nworkers =~ ^[1-9][0-9]?$ ]] || { echo "testbed-run: --workers needs 1..99" >&2; exit 2; }
[[ $nservers =~ ^[1-9][0-9]?$ ]] || { echo "testbed-run: --servers needs 1..99" >&2; exit 2; }
if [[ $colocated == 1 ]]; then
    nservers=$nworkers
    nhosts=$nworkers
    SERVER_HOSTS=$(for i in $(seq 1 "$nhosts"); do echo -n "kvtb$i "; done)
    WORKER_HOSTS=$SERVER_HOSTS
else
    nhosts=$((nservers + nworkers))
    SERVER_HOSTS=$(for i in $(seq 1 "$nservers"); do echo -n "kvtb$i "; done)
    WORKER_HOSTS=$(for i in $(seq $((nservers + 1)) "$nhosts"); do echo -n "kvtb$i "; done)
fi
"$TB" up "$nhosts" --rate "$rate"
HOSTS=$(for i in $(seq 1 "$nhosts"); do echo -n "kvtb$i "; done)
if [[ $colocated == 1 ]]; then
    # mpirun --map-by node deals the servers' context over the hosts, then the workers' from
    # the first host again: server i and worker i on kvtb(i+1).
    hostfile="$out/hostfile"
    for h in $HOSTS; do echo "$h slots=2"; done >"$hostfile"
else
    hostfile=$("$TB" hostfile)
fi
# A leg's bound: ResNet-50 at 100 Mbit/s takes about 20 s an iteration.
limit_s=$((60 + (iters + 3) * 30))

# LEG: counters before, the monitor in the background.
leg_start() {
    "$TB" bytes >"$out/$1.bytes0"
    "$TB" monitor 1 >"$out/$1.monitor" &
    monitor_pid=$!
}
leg_end() {
    kill "$monitor_pid" 2>/dev/null || true
    wait "$monitor_pid" 2>/dev/null || true
    monitor_pid=
    "$TB" bytes >"$out/$1.bytes1"
}

pslite_leg() {
    local try status
    for try in 1 2; do
        leg_start reference
        local env=(env DMLC_PS_ROOT_URI=198.18.0.1 DMLC_PS_ROOT_PORT=9091 DMLC_NUM_WORKER=$nworkers DMLC_NUM_SERVER=$nservers
            DMLC_INTERFACE=eth0 OMP_NUM_THREADS=1)
        local exe="$ROOT/target/bench/distbench_mx" pids=() workers=()
        timeout -k 5 "$limit_s" "$TB" exec kvtb1 "${env[@]}" DMLC_ROLE=scheduler "$exe" >"$out/ps.scheduler" 2>&1 &
        pids+=($!)
        sleep 0.5
        for h in $SERVER_HOSTS; do
            timeout -k 5 "$limit_s" "$TB" exec $h "${env[@]}" DMLC_ROLE=server "$exe" >"$out/ps.server.$h" 2>&1 &
            pids+=($!)
        done
        for h in $WORKER_HOSTS; do
            timeout -k 5 "$limit_s" "$TB" exec $h "${env[@]}" DMLC_ROLE=worker "$exe" --iters "$iters" $twobit $updater >"$out/ps.worker.$h" 2>&1 &
            workers+=($!)
        done
        status=0
        for p in "${workers[@]}" "${pids[@]}"; do wait "$p" || status=$?; done
        leg_end reference
        for h in $HOSTS; do "$TB" kill $h >/dev/null; done
        cat "$out"/ps.worker.* >"$out/reference.txt"
        if [[ $status == 0 && $(grep -c "s/iter" "$out/reference.txt") == "$nworkers" ]]; then
            return 0
        fi
        echo "testbed-run: ps-lite leg failed (status $status, try $try): $(tail -n 2 "$out"/ps.* | tr '\n' ' ')" >&2
    done
    return 1
}

# LEG EXE [kvstore-launch options]: the libkvstore leg named LEG, running the program EXE.
kv_leg() {
    local leg=$1 exe=$2 status=0
    shift 2
    leg_start "$leg"
    timeout -k 5 "$limit_s" "$TB" run "$ROOT/scripts/kvstore-launch" -n "$nworkers" -s "$nservers" -H "$hostfile" --launcher ssh \
        --timeout $((limit_s - 10)) "$@" "$exe" --iters "$iters" $twobit $updater \
        >"$out/$leg.txt" 2>"$out/$leg.err" || status=$?
    leg_end "$leg"
    if [[ $status != 0 ]]; then
        echo "testbed-run: $leg leg failed (status $status):" >&2
        tail -n 20 "$out/$leg.err" >&2
        return 1
    fi
}

median_of() { sed -n 's/.*median \([0-9.]*\) s\/iter.*/\1/p' "$1" | awk '{s += $1; n++} END {if (n) printf "%.3f", s / n}'; }

# Per host: bytes each direction carried over the leg, and mean / peak Mbit/s over the samples
# in which the bed moved more than 50 Mbit/s in all.
utilisation() {
    local leg=$1
    awk -v leg="$leg" -v monitor="$out/$leg.monitor" '
        FNR == NR { b0[$1] = $2 " " $3; next }
        { split(b0[$1], a, " "); printf "  %s %s: tx %.1f MB, rx %.1f MB", leg, $1, ($2 - a[1]) / 1e6, ($3 - a[2]) / 1e6
          if ($1 in util) printf "; %s", util[$1]
          printf "\n" }
        BEGIN {
            while ((getline line < monitor) > 0) {
                n = split(line, f, " ")
                if (f[1] == "time_s") { for (i = 2; i <= n; i++) col[i] = f[i]; continue }
                tot = 0; for (i = 2; i <= n; i++) tot += f[i]
                if (tot < 50) continue
                active++
                for (i = 2; i <= n; i++) { sum[i] += f[i]; if (f[i] > peak[i]) peak[i] = f[i] }
            }
            for (i = 2; i in col; i += 2) {
                h = col[i]; sub(/\..*/, "", h)
                util[h] = sprintf("tx mean %.0f peak %.0f Mbit/s, rx mean %.0f peak %.0f Mbit/s over %d active s",
                                  active ? sum[i] / active : 0, peak[i], active ? sum[i + 1] / active : 0, peak[i + 1], active)
            }
        }' "$out/$leg.bytes0" "$out/$leg.bytes1"
}

echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg)"
layout="$nworkers workers + $nservers servers"
[[ $colocated == 0 ]] || layout="$layout, a worker and a server on each of $nhosts hosts"
[[ -z $twobit ]] || layout="$layout, 2-bit compression"
[[ -z $updater ]] || layout="$layout, an updater on the servers"
echo "== $layout; links $rate"
echo "== reference libmxnet.so: ps-lite, servers on $SERVER_HOSTS, workers on $WORKER_HOSTS"
legs=
if [[ $reference_leg == 1 ]]; then
    pslite_leg
    sed 's/^/[ps-lite] /' "$out/reference.txt"
    legs=reference
fi
echo "== libkvstore.so: MPI (scripts/kvstore-launch --launcher ssh), the same placement"
kv_leg libkvstore "$ROOT/target/bench/distbench_kv" ${kv_env[@]+"${kv_env[@]}"}
sed 's/^/[libkvstore] /' "$out/libkvstore.txt"
legs="$legs libkvstore"
if [[ -n $base ]]; then
    echo "== the base build's libkvstore.so ($base), the same placement"
    kv_leg base "$ROOT/target/bench/distbench_kv_base"
    sed 's/^/[base] /' "$out/base.txt"
    legs="$legs base"
fi
if [[ $mxnet_placement == 1 ]]; then
    echo "== libkvstore.so with KVSTORE_DIST_BALANCE=0 (small keys placed as MXNet)"
    kv_leg mxnet-placement "$ROOT/target/bench/distbench_kv" --env KVSTORE_DIST_BALANCE=0
    sed 's/^/[libkvstore, MXNet placement] /' "$out/mxnet-placement.txt"
    legs="$legs mxnet-placement"
fi
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"

ref=
[[ $reference_leg == 0 ]] || ref=$(median_of "$out/reference.txt")
ours=$(median_of "$out/libkvstore.txt")
# Payload per step over the busiest link direction, keys spread evenly over the servers (P:
# the push or pull payload of one worker). Apart: a worker's link carries P; a server's, W/S
# workers' parts of P. Colocated on N hosts: a host sends its worker's parts for the N - 1
# other servers and its server's answers to the N - 1 other workers ((push + pull) (N-1)/N
# each way; the parts for its own server stay on the host). A 1 Gbit/s link carries 119.6 MB/s
# of TCP payload (network.md); scaled for other rates.
read -r push pull < <(sed -n 's/.*per step: push \([0-9.]*\) MB + pull \([0-9.]*\) MB.*/\1 \2/p' "$out/libkvstore.txt" | head -n 1)
goodput=$(awk -v r="$rate" 'BEGIN { v = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u)
    m = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : 1; printf "%.1f", 119.6 * v * m / 1e9 }')
busiest=$(awk -v a="$push" -v b="$pull" -v w="$nworkers" -v s="$nservers" -v c="$colocated" 'BEGIN {
    m = (a > b) ? a : b; f = w / s
    if (c) printf "%.1f", (a + b) * (w - 1) / w; else printf "%.1f", (f > 1) ? m * f : m }')
limit=$(awk -v m="$busiest" -v g="$goodput" 'BEGIN {printf "%.3f", m / g}')
times() { awk -v a="$1" -v l="$limit" 'BEGIN {printf "%.2f", a / l}'; }
echo "s/iter (mean of the $nworkers workers' medians over $iters iterations): ps-lite ${ref:-(not run)}, libkvstore $ours"
[[ -z $ref ]] || echo "ratio libkvstore / ps-lite: $(awk -v a="$ours" -v b="$ref" 'BEGIN {printf "%.3f", a / b}')"
echo "full-duplex link limit: $busiest MB per step over the busiest link direction / $goodput MB/s = $limit s/iter (${ref:+ps-lite at $(times "$ref")x it, }libkvstore at $(times "$ours")x)"
if [[ -n $base ]]; then
    b=$(median_of "$out/base.txt")
    echo "base build: $b s/iter (${ref:+$(awk -v a="$b" -v r="$ref" 'BEGIN {printf "%.3f", a / r}') of ps-lite, }$(times "$b")x the limit); this build / base: $(awk -v a="$ours" -v b="$b" 'BEGIN {printf "%.3f", a / b}')"
fi
if [[ $mxnet_placement == 1 ]]; then
    mx=$(median_of "$out/mxnet-placement.txt")
    echo "libkvstore with MXNet's placement: $mx s/iter (${ref:+$(awk -v a="$mx" -v b="$ref" 'BEGIN {printf "%.3f", a / b}') of ps-lite, }$(awk -v a="$mx" -v l="$limit" 'BEGIN {printf "%.2f", a / l}')x the limit; balanced / MXNet's: $(awk -v a="$ours" -v b="$mx" 'BEGIN {printf "%.3f", a / b}'))"
fi
echo "link use per host (whole leg, warm-up and init included):"
for leg in $legs; do utilisation "$leg"; done
