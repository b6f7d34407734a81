#!/usr/bin/env bash
# Instructions per request of every thread of the service, mode by mode,
# counted by callgrind: a table that does not depend on the machine's load.
#
#   cargo build --release            # in benches/service
#   ./instructions.sh                # every mode, ~2 min a mode
#   MODES=untraced,layer,layer-1 ./instructions.sh
#   PAIRS=3 JOBS=2 ./instructions.sh target/release/ringtrace-service-bench
#
# Each mode runs as a child (`ringtrace-service-bench --child MODE`) under
# `valgrind --tool=callgrind --separate-threads=yes` twice: with
# SERVICE_REQUESTS=$HI (default 6000) and with $LO (default 2000). Callgrind
# writes one file per thread; the larger run minus the smaller, divided by
# the requests the service answered in between, is the cost of one request,
# whatever start-up, warm-up and the final flush cost. A child answers
# SERVICE_REQUESTS plus a warm-up of max(SERVICE_REQUESTS / 10, 500)
# requests, all traced: the divisor is (HI + max(HI/10,500)) - (LO + max(LO/10,500)),
# 4100 for the defaults.
#
# Threads: the main thread is the load client; a thread whose file holds
# tokio's multi-thread worker loop is one of the service's two workers;
# every other thread is the tracer's background thread (ringtrace's flusher,
# tracing-chrome's writer). "all threads" is every file, the client's too.
# PAIRS=N runs N pairs per mode and prints their mean (one pair's figures
# move by a few hundred instructions: tokio's workers park and wake with
# the timing); JOBS=N runs N children at once (each runs on one core under
# callgrind); KEEP=DIR keeps callgrind's files there (for
# `callgrind_annotate`: DIR/MODE-REQUESTS-PAIR/cg.out-NN, thread NN) instead
# of a temporary directory. MODES defaults to every mode the binary lists (`--modes`).
# Needs valgrind, awk and GNU xargs.
set -euo pipefail

BIN=${1:-target/release/ringtrace-service-bench}
HI=${HI:-6000}
LO=${LO:-2000}
PAIRS=${PAIRS:-1}
JOBS=${JOBS:-1}
if [[ ! -x $BIN ]]; then
    echo "no executable at $BIN: build it first (cargo build --release)" >&2
    exit 1
fi
if [[ -z ${MODES:-} ]]; then
    MODES=$("$BIN" --modes | paste -sd, -)
fi
warm() { local n=$1 w=$(($1 / 10)); ((w < 500)) && w=500; echo $((n + w)); }
DIV=$(($(warm "$HI") - $(warm "$LO")))
if [[ -n ${KEEP:-} ]]; then
    OUT=$KEEP
    mkdir -p "$OUT"
else
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/ringtrace-instructions.XXXXXX")
    trap 'rm -rf "$OUT"' EXIT
fi

# One child under callgrind: MODE REQUESTS PAIR.
run() {
    local mode=$1 n=$2 pair=$3 dir
    dir="$OUT/$mode-$n-$pair"
    mkdir -p "$dir"
    if ! SERVICE_REQUESTS=$n SERVICE_DIR=$dir valgrind --tool=callgrind \
        --separate-threads=yes --callgrind-out-file="$dir/cg.out" \
        "$BIN" --child "$mode" >"$dir/stdout" 2>"$dir/stderr"; then
        echo "$mode at $n requests failed: see its valgrind log:" >&2
        tail -5 "$dir/stderr" >&2
        return 1
    fi
}
export -f run
export OUT BIN

for ((p = 1; p <= PAIRS; p++)); do
    for m in ${MODES//,/ }; do
        echo "$m $HI $p"
        echo "$m $LO $p"
    done
done | xargs -P "$JOBS" -L 1 bash -c 'run "$@"' _

# Instructions of one run's threads: "workers background all".
threads() {
    local dir=$1 f ir w=0 b=0 a=0
    for f in "$dir"/cg.out-*; do
        ir=$(awk '/^(totals|summary):/ { print $2; exit }' "$f")
        a=$((a + ir))
        if [[ $f == *-01 ]]; then
            :
        elif grep -q 'multi_thread::worker' "$f"; then
            w=$((w + ir))
        else
            b=$((b + ir))
        fi
    done
    echo "$w $b $a"
}

echo
echo "Instructions per request (callgrind, SERVICE_REQUESTS=$HI minus $LO, over $DIV requests; mean of $PAIRS pair(s)); $BIN"
echo
echo "| mode | workers | background (flusher) | all threads | workers over untraced | all threads over untraced |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
base_w="" base_a=""
for m in ${MODES//,/ }; do
    sw=0 sb=0 sa=0
    for ((p = 1; p <= PAIRS; p++)); do
        read -r hw hb ha < <(threads "$OUT/$m-$HI-$p")
        read -r lw lb la < <(threads "$OUT/$m-$LO-$p")
        sw=$((sw + hw - lw)) sb=$((sb + hb - lb)) sa=$((sa + ha - la))
        echo "$m pair $p: workers $hw - $lw, background $hb - $lb, all $ha - $la" >&2
    done
    awk -v m="$m" -v w="$sw" -v b="$sb" -v a="$sa" -v n=$((DIV * PAIRS)) \
        -v bw="$base_w" -v ba="$base_a" 'BEGIN {
        w /= n; b /= n; a /= n
        ow = (bw == "" ? "" : sprintf("%+.1f%%", (w / bw - 1) * 100))
        oa = (ba == "" ? "" : sprintf("%+.1f%%", (a / ba - 1) * 100))
        printf "| %s | %.0f | %.0f | %.0f | %s | %s |\n", m, w, b, a, ow, oa
    }'
    if [[ $m == untraced ]]; then
        base_w=$(awk -v w="$sw" -v n=$((DIV * PAIRS)) 'BEGIN { printf "%.3f", w / n }')
        base_a=$(awk -v a="$sa" -v n=$((DIV * PAIRS)) 'BEGIN { printf "%.3f", a / n }')
    fi
done
