# Checks inside the `cxl` lab guest for `cxltier ras`, in a boot of its own: the host injects CXL
# errors over QMP while `cxltier ras --watch --json` runs here (lab/src/ras.rs), then judges the
# streamed records (data block ras-watch) against what it injected.
# shellcheck shell=dash
# shellcheck source=lib.sh
. /lab/lib.sh

TR=/sys/kernel/tracing
# How many records the host's injections produce (lab/src/ras.rs: INJECTIONS).
EXPECTED_RECORDS=${RAS_EXPECTED_RECORDS:-7}

no_instances() { ! ls -d "$TR"/instances/cxltier-ras-* >/dev/null 2>&1; }
# The AER mask registers (uncorrectable, correctable) of both devices, found by walking the PCIe
# extended capabilities to AER (id 1).
rd32() { od -An -tx4 -j "$2" -N4 "$1" | tr -d ' '; }
config_sums() {
    for m in /sys/bus/cxl/devices/mem*; do
        _c=$(readlink -f "$m")/../config
        _off=256
        while [ "$_off" -ne 0 ]; do
            _h=$(rd32 "$_c" "$_off")
            [ $((0x$_h & 0xffff)) -eq 1 ] && break
            _off=$(((0x$_h >> 20) & 0xffc))
        done
        printf '%s:%s/%s ' "${m##*/}" "$(rd32 "$_c" $((_off + 8)))" "$(rd32 "$_c" $((_off + 20)))"
    done
}

# ---- inventory and poison list ---------------------------------------------------------------------
capture ras-inv cxltier ras --json
verdict ras-inventory-runs "exit $rc: $(brief "$T/ras-inv.err")" [ "$rc" = 0 ]
verdict ras-inventory-says-system-wide "$(brief "$T/ras-inv.err")" grep -q "tracefs instance" "$T/ras-inv.err"
verdict ras-instance-removed "instances left: $(ls "$TR/instances" | tr '\n' ' ')" no_instances
data ras-inventory "$T/ras-inv.out"
capture ras-table cxltier ras --no-poison
verdict ras-table-runs "exit $rc: $(brief "$T/ras-table.out")" \
    sh -c "[ $rc = 0 ] && grep -q 'region0' '$T/ras-table.out' && grep -q '0xc0de0000' '$T/ras-table.out'"

# ---- dry run: nothing enabled, nothing written ------------------------------------------------------
before=$(config_sums)
capture ras-dry cxltier ras --watch --dry-run --unmask-internal-errors --quarantine --poison-interval 1
after=$(config_sums)
verdict ras-watch-dry-run-unchanged "exit $rc, AER masks $before -> $after: $(brief "$T/ras-dry.err")" \
    sh -c "[ $rc = 0 ] && [ '$before' = '$after' ] && grep -q 'would' '$T/ras-dry.err'" && no_instances

# ---- the watch, while the host injects --------------------------------------------------------------
before=$(config_sums)
cxltier ras --watch --json --count "$EXPECTED_RECORDS" --duration 60 --poison-interval 1 \
    --unmask-internal-errors --quarantine --quarantine-file "$T/quarantine.jsonl" \
    >"$T/watch.out" 2>"$T/watch.err" &
watcher=$!
# Ready once it says it is watching (the events are enabled by then).
n=0
while [ "$n" -lt 300 ] && ! grep -q 'watching CXL events' "$T/watch.err" 2>/dev/null; do
    usleep 100000
    n=$((n + 1))
done
# The host injects when it sees this line (the console passes a line on when the next one comes).
echo "RAS-INJECT-READY"
echo "waiting for the watch to end"
wait "$watcher"
rc=$?
after=$(config_sums)
verdict ras-watch-runs "exit $rc: $(brief "$T/watch.err")" [ "$rc" = 0 ]
verdict ras-watch-says-system-wide "$(brief "$T/watch.err")" \
    sh -c "grep -q 'private tracefs instance' '$T/watch.err' && grep -q 'restored on exit' '$T/watch.err'"
verdict ras-watch-instance-removed "instances left: $(ls "$TR/instances" | tr '\n' ' ')" no_instances
verdict ras-watch-aer-masks-restored "AER masks $before -> $after" [ "$before" = "$after" ]
data ras-watch "$T/watch.out"
[ -f "$T/quarantine.jsonl" ] || : >"$T/quarantine.jsonl"
data ras-quarantine "$T/quarantine.jsonl"

# ---- bad input and privilege ------------------------------------------------------------------------
bad_input ras-unknown-memdev 2 "mem7" cxltier ras --memdev mem7 --no-poison
bad_input ras-bad-memdev-name 2 "memory device name" cxltier ras --memdev banana
bad_input ras-zero-duration 2 "duration" cxltier ras --watch --duration 0
grep -q '^nobody:' /etc/passwd || echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >>/etc/passwd
bad_input ras-watch-needs-root 3 "root" su -s /bin/sh nobody -c 'cxltier ras --watch --duration 1'
bad_input ras-poison-needs-root 3 "root" su -s /bin/sh nobody -c 'cxltier ras'
capture ras-noroot-inventory su -s /bin/sh nobody -c 'cxltier ras --no-poison --json'
verdict ras-inventory-without-root "exit $rc: $(brief "$T/ras-noroot-inventory.err")" \
    sh -c "[ $rc = 0 ] && grep -q '\"memdev\": \"mem0\"' '$T/ras-noroot-inventory.out'"
# No tracefs: unmount it (and debugfs, which would mount it again below itself).
umount /sys/kernel/debug 2>/dev/null
umount "$TR"
bad_input ras-watch-no-tracefs 4 "tracefs" cxltier ras --watch --duration 1
mount -t tracefs tracefs "$TR"
mount -t debugfs debugfs /sys/kernel/debug
exit 0
