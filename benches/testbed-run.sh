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
# With --workers W (default 2) the bed has 2 + W hosts, workers on kvtb3 .. kvtb(2+W).
#
#   benches/testbed-run.sh [--iters N (default 10)] [--rate 1gbit] [--workers W] [--no-build] [--keep DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TB="$ROOT/scripts/testbed"
iters=10
rate=1gbit
build=1
keep=
nworkers=2
while [[ $# -gt 0 ]]; do
    case $1 in
        --iters) iters=${2:?}; shift 2 ;;
        --workers) nworkers=${2:?}; shift 2 ;;
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
monitor_pid=
cleanup() {
    [[ -z $monitor_pid ]] || kill "$monitor_pid" 2>/dev/null || true
    "$TB" down >/dev/null 2>&1 || "$TB" down
    [[ -n $keep ]] || rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[[ $nworkers =~ ^[1-9][0-9]?$ ]] || { echo "testbed-run: --workers needs 1..99" >&2; exit 2; }
"$TB" up $((2 + nworkers)) --rate "$rate"
WORKER_HOSTS=$(for i in $(seq 3 $((2 + nworkers))); do echo -n "kvtb$i "; done)
HOSTS="kvtb1 kvtb2 $WORKER_HOSTS"
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
        local env=(env DMLC_PS_ROOT_URI=198.18.0.1 DMLC_PS_ROOT_PORT=9091 DMLC_NUM_WORKER=$nworkers DMLC_NUM_SERVER=2
            DMLC_INTERFACE=eth0 OMP_NUM_THREADS=1)
        local exe="$ROOT/target/bench/distbench_mx" pids=() workers=()
        timeout -k 5 "$limit_s" "$TB" exec kvtb1 "${env[@]}" DMLC_ROLE=scheduler "$exe" >"$out/ps.scheduler" 2>&1 &
        pids+=($!)
        sleep 0.5
        for h in kvtb1 kvtb2; do
            timeout -k 5 "$limit_s" "$TB" exec $h "${env[@]}" DMLC_ROLE=server "$exe" >"$out/ps.server.$h" 2>&1 &
            pids+=($!)
        done
        for h in $WORKER_HOSTS; do
            timeout -k 5 "$limit_s" "$TB" exec $h "${env[@]}" DMLC_ROLE=worker "$exe" --iters "$iters" >"$out/ps.worker.$h" 2>&1 &
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

kv_leg() {
    local status=0
    leg_start libkvstore
    timeout -k 5 "$limit_s" "$TB" run "$ROOT/scripts/kvstore-launch" -n "$nworkers" -s 2 -H "$("$TB" hostfile)" --launcher ssh \
        --timeout $((limit_s - 10)) "$ROOT/target/bench/distbench_kv" --iters "$iters" \
        >"$out/libkvstore.txt" 2>"$out/libkvstore.err" || status=$?
    leg_end libkvstore
    if [[ $status != 0 ]]; then
        echo "testbed-run: libkvstore leg failed (status $status):" >&2
        tail -n 20 "$out/libkvstore.err" >&2
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
echo "== reference libmxnet.so: ps-lite, servers on kvtb1 kvtb2, workers on $WORKER_HOSTS, links $rate"
pslite_leg
sed 's/^/[ps-lite] /' "$out/reference.txt"
echo "== libkvstore.so: MPI (scripts/kvstore-launch --launcher ssh), the same placement"
kv_leg
sed 's/^/[libkvstore] /' "$out/libkvstore.txt"
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"

ref=$(median_of "$out/reference.txt")
ours=$(median_of "$out/libkvstore.txt")
# Payload per step over the busiest link direction: a worker sends its push and receives its
# pull; a server receives W/S pushes' parts and sends as many pulls' (2 workers, 2 servers: the
# same). A 1 Gbit/s link carries 119.6 MB/s of TCP payload (network.md); scaled for other rates.
read -r push pull < <(sed -n 's/.*per step: push \([0-9.]*\) MB + pull \([0-9.]*\) MB.*/\1 \2/p' "$out/libkvstore.txt" | head -n 1)
goodput=$(awk -v r="$rate" 'BEGIN { v = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u)
    m = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : 1; printf "%.1f", 119.6 * v * m / 1e9 }')
# A server's link carries W/S workers' parts each way (2 servers; keys spread evenly assumed).
busiest=$(awk -v a="$push" -v b="$pull" -v w="$nworkers" 'BEGIN {m = (a > b) ? a : b; f = w / 2; printf "%.1f", (f > 1) ? m * f : m}')
limit=$(awk -v m="$busiest" -v g="$goodput" 'BEGIN {printf "%.3f", m / g}')
echo "s/iter (mean of the $nworkers workers' medians over $iters iterations): ps-lite $ref, libkvstore $ours"
echo "ratio libkvstore / ps-lite: $(awk -v a="$ours" -v b="$ref" 'BEGIN {printf "%.3f", a / b}')"
echo "full-duplex link limit: $busiest MB per step over the busiest link direction / $goodput MB/s = $limit s/iter (ps-lite at $(awk -v a="$ref" -v l="$limit" 'BEGIN {printf "%.2f", a / l}')x it, libkvstore at $(awk -v a="$ours" -v l="$limit" 'BEGIN {printf "%.2f", a / l}')x)"
echo "link use per host (whole leg, warm-up and init included):"
utilisation reference
utilisation libkvstore
