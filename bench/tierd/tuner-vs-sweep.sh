# The guest side of bench/tierd-tuner-vs-sweep (busybox sh in the lab guest, as root): a
# bandwidth-bound stream, `cxltier tierd --tune` on it, the exhaustive `--sweep` on it, and, when
# the two chose different splits, both splits measured again alternately (A B, B A, ...) in
# ROUNDS short windows. The host computes the ratio from the JSON lines printed here.
# shellcheck shell=dash
T=/tmp/tuner-vs-sweep
mkdir -p "$T"
ROUNDS=${ROUNDS:-10}
[ -f /lab/env ] && . /lab/env
cxltier touch 4M --stream --progress-file "$T/progress" --duration 900 >"$T/stream.out" 2>&1 &
stream=$!
n=0
while [ ! -s "$T/progress" ] && [ "$n" -lt 600 ]; do
    usleep 100000
    n=$((n + 1))
done
cxltier tierd --pid "$stream" --tune --progress "file:$T/progress" --measure 1 --json >"$T/tune.out" 2>"$T/tune.err"
echo "TUNE exit $?"
cxltier tierd --pid "$stream" --sweep --progress "file:$T/progress" --measure 1 --json >"$T/sweep.out" 2>"$T/sweep.err"
echo "SWEEP exit $?"
tuned=$(grep '"event":"tuned"' "$T/tune.out" | grep -o '"fast_percent":[0-9]*' | cut -d: -f2)
best=$(grep '"event":"swept"' "$T/sweep.out" | grep -o '"fast_percent":[0-9]*' | cut -d: -f2)
grep '"event":"tuned"' "$T/tune.out" | sed 's/^/TUNED /'
grep '"event":"swept"' "$T/sweep.out" | sed 's/^/SWEPT /'
if [ -n "$tuned" ] && [ -n "$best" ] && [ "$tuned" != "$best" ]; then
    cxltier tierd --pid "$stream" --sweep --splits "$tuned,$best" --rounds "$ROUNDS" --measure 1 \
        --progress "file:$T/progress" --json >"$T/confirm.out" 2>"$T/confirm.err"
    echo "CONFIRM exit $?"
    grep '"event":"swept"' "$T/confirm.out" | sed 's/^/CONFIRMED /'
fi
kill "$stream" 2>/dev/null
wait "$stream" 2>/dev/null
for f in tune.err sweep.err confirm.err; do
    [ -s "$T/$f" ] && sed "s/^/STDERR $f: /" "$T/$f" | tail -n 3
done
exit 0
