# Checks inside the `cxl` lab guest for `cxltier ras`, in a boot of its own: the host injects CXL
# errors over QMP while `cxltier ras --watch --json` runs here (lab/src/ras.rs), then judges the
# streamed records (data block ras-watch) against what it injected.
# shellcheck shell=dash
# shellcheck source=lib.sh
. /lab/lib.sh

TR=/sys/kernel/tracing
# How many records the host's injections produce (lab/src/ras.rs: injections()): one per injection.
# One more when the guest found a page of its process on CXL memory for the host to poison.
EXPECTED_RECORDS=7

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
verdict ras-inventory-sees-masked-internal-errors "Linux 6.12 leaves them masked on CXL 2.0 ports" \
    sh -c "[ \$(grep -c '\"aer_internal_errors_masked\": true' '$T/ras-inv.out') = 2 ]"
capture ras-table cxltier ras --no-poison
verdict ras-table-runs "exit $rc: $(brief "$T/ras-table.out")" \
    sh -c "[ $rc = 0 ] && grep -q 'region0' '$T/ras-table.out' && grep -q '0xc0de0000' '$T/ras-table.out'"

# ---- dry run: nothing enabled, nothing written ------------------------------------------------------
before=$(config_sums)
capture ras-dry cxltier ras --watch --dry-run --unmask-internal-errors --quarantine --poison-interval 1
after=$(config_sums)
verdict ras-watch-dry-run-unchanged "exit $rc, AER masks $before -> $after: $(brief "$T/ras-dry.err")" \
    sh -c "[ $rc = 0 ] && [ '$before' = '$after' ] && grep -q 'would' '$T/ras-dry.err'" && no_instances

# ---- the tiered store holding data on the CXL node: the host poisons one of its pages ---------------
# `cxltier serve` with a CXL arena (bound to node 1) and an NVMe log, loaded by YCSB with
# --data-integrity; it follows the quarantine file the watch below writes. Its page's host physical
# address comes from /proc/PID/pagemap, the device address from the region's start (a one-way region:
# DPA = HPA - region start); the host injects poison there.
ifconfig lo 127.0.0.1 up 2>/dev/null || ip link set lo up 2>/dev/null
S=127.0.0.1:6391
rm -f "$T/quarantine.jsonl" /root/ras-nvme
cxltier serve --bind "$S" --dram 8M --cxl 32M --cxl-node 1 --ssd /root/ras-nvme:64M --durability always \
    --max-object 4K --quarantine-file "$T/quarantine.jsonl" >"$T/serve.out" 2>"$T/serve.err" &
victim=$!
up=0
for _ in $(seq 1 100); do
    if printf '*1\r\n$4\r\nPING\r\n' | nc -w 1 127.0.0.1 6391 2>/dev/null | grep -q PONG; then up=1; break; fi
    sleep 0.2
done
capture ras-ycsbload cxltier ycsb load --records 10000 --addr "$S" --data-integrity --json
verdict ras-store-loaded "serve up $up, load exit $rc: $(grep -E '"(operations|errors)"' "$T/ras-ycsbload.out" | tr -d ' \n') $(brief "$T/serve.err")" \
    sh -c "[ $up = 1 ] && [ $rc = 0 ] && grep -q '\"errors\": 0' '$T/ras-ycsbload.out'"
victim_dpa=
victim_serial=
rstart=$(cat /sys/bus/cxl/devices/region0/resource)
rsize=$(cat /sys/bus/cxl/devices/region0/size)
# The first present page of the process's anonymous memory inside region0 (bound to node 1, its
# touched buffer is there).
find_victim_page() {
    while read -r range perms _off _dev _inode path; do
        [ "$perms" = rw-p ] && [ -z "$path" ] || continue
        s=${range%-*}
        e=${range#*-}
        i=0
        while [ "$i" -lt 64 ] && [ $((0x$s + i * 4096)) -lt $((0x$e)) ]; do
            va=$((0x$s + i * 4096))
            # dd seeks; od and hexdump would read their way to the offset (pagemap has size 0).
            entry=$(dd if="/proc/$1/pagemap" bs=8 skip=$((va / 4096)) count=1 2>/dev/null | od -An -tx8 | tr -d ' ')
            i=$((i + 1))
            [ -n "$entry" ] && [ $(((0x$entry >> 63) & 1)) = 1 ] || continue
            hpa=$(((0x$entry & 0x7fffffffffffff) * 4096))
            if [ "$hpa" -ge $((rstart)) ] && [ "$hpa" -lt $((rstart + rsize)) ]; then
                echo "$hpa $va"
                return 0
            fi
        done
    done <"/proc/$1/maps"
    return 1
}
# The device backing region0: the host poisons the page there, and keeps the fatal error away from
# it (a fatal error takes CXL.mem down while the kernel uses the memory as system RAM).
decoder=$(cat /sys/bus/cxl/devices/region0/target0)
port=$(basename "$(dirname "$(readlink -f "/sys/bus/cxl/devices/$decoder")")")
memdev=$(basename "$(readlink -f "/sys/bus/cxl/devices/$port/uport")")
victim_serial=$(cat "/sys/bus/cxl/devices/$memdev/serial")
victim_hpa=
[ -n "$victim" ] && victim_hpa=$(find_victim_page "$victim" | cut -d' ' -f1)
[ -n "$victim_hpa" ] && victim_dpa=$(printf '0x%x' $((victim_hpa - rstart)))
[ -n "$victim_dpa" ] && EXPECTED_RECORDS=8
verdict ras-victim-page-on-cxl "pid $victim (cxltier serve), hpa $(printf '0x%x' "${victim_hpa:-0}"), dpa $victim_dpa on $memdev ($victim_serial)" \
    test -n "$victim_dpa" -a -n "$victim_serial"

# ---- the watch, while the host injects --------------------------------------------------------------
# Each record the watch prints is also passed on to the console as `RAS-RECORD <json>`, as it comes:
# the host injects the next error only when it has seen the record of the one before (lab/src/ras.rs),
# so no two injections are ever in flight at once. --count ends the watch after the last record;
# --duration is only a hang guard.
before=$(config_sums)
: >"$T/watch.out"
rm -f "$T/watch.rc"
{
    cxltier ras --watch --json --count "$EXPECTED_RECORDS" --duration 600 --poison-interval 1 \
        --unmask-internal-errors --quarantine --quarantine-file "$T/quarantine.jsonl" 2>"$T/watch.err"
    echo $? >"$T/watch.rc"
} | while IFS= read -r rec; do
    printf '%s\n' "$rec" >>"$T/watch.out"
    printf 'RAS-RECORD %s\n' "$rec"
    # The console passes a line on when the next one comes (lab/run): this one pushes the record.
    echo "ras: record $(wc -l <"$T/watch.out") of $EXPECTED_RECORDS passed on"
done &
watcher=$!
# Ready once it says it is watching (the events are enabled by then).
n=0
while [ "$n" -lt 300 ] && ! grep -q 'watching CXL events' "$T/watch.err" 2>/dev/null; do
    usleep 100000
    n=$((n + 1))
done
# The host injects when it sees this line (the console passes a line on when the next one comes).
echo "RAS-INJECT-READY $victim_serial ${victim_dpa:--} ${victim:--}"
echo "waiting for the watch to end"
wait "$watcher"
rc=$(cat "$T/watch.rc" 2>/dev/null || echo "none (the watch did not finish)")
after=$(config_sums)
verdict ras-watch-runs "exit $rc: $(brief "$T/watch.err")" [ "$rc" = 0 ]
verdict ras-watch-says-system-wide "$(brief "$T/watch.err")" \
    sh -c "grep -q 'private tracefs instance' '$T/watch.err' && grep -q 'restored on exit' '$T/watch.err'"
verdict ras-watch-instance-removed "instances left: $(ls "$TR/instances" | tr '\n' ' ')" no_instances
verdict ras-watch-aer-masks-restored "AER masks $before -> $after" [ "$before" = "$after" ]
data ras-watch "$T/watch.out"
data ras-watch-err "$T/watch.err"
verdict ras-victim-survives-soft-offline "the server holding the poisoned page still runs after its page was soft-offlined" \
    kill -0 "$victim"
# The server polls the quarantine file from its background tick: the poisoned objects are served from
# their NVMe copy, the page is retired, and every read returns the right bytes. Read back only once
# the server says it applied every range the watch wrote (INFO poison), not after a fixed pause: on a
# busy machine the server's tick can come seconds later, and the read-back must not race it.
[ -f "$T/quarantine.jsonl" ] || : >"$T/quarantine.jsonl"
qranges=$(grep -c . "$T/quarantine.jsonl")
pinfo() { sed -n "s/^$1://p" "$T/ras-info.out"; }
n=0
while :; do
    printf '*2\r\n$4\r\nINFO\r\n$6\r\npoison\r\n' | nc -w 2 127.0.0.1 6391 | tr -d '\r' >"$T/ras-info.out"
    applied=$(pinfo quarantine_ranges_applied)
    failed=$(pinfo quarantine_ranges_failed)
    [ $((${applied:-0} + ${failed:-0})) -ge "$qranges" ] && break
    # Hang guard (120 s), not a timing assertion: the check below reports what the server said.
    [ "$n" -ge 1200 ] && break
    usleep 100000
    n=$((n + 1))
done
echo "ras: the server applied ${applied:-0} of $qranges quarantined ranges (${failed:-0} failed) after $n polls"
verdict ras-store-restores-poisoned-keys "$(pinfo quarantine_ranges_applied) of $qranges ranges applied, $(pinfo poison_keys_restored) keys restored, $(pinfo poison_keys_lost) lost, $(pinfo tier_cxl_retired_bytes) CXL bytes retired: $(grep 'poisoned memory' "$T/serve.err" | tr '\n' ' ' | cut -c1-300)" \
    sh -c "[ '$(pinfo poison_keys_restored)' -ge 1 ] && [ '$(pinfo poison_keys_lost)' = 0 ] && [ '$(pinfo tier_cxl_retired_bytes)' -ge 4096 ]"
capture ras-ycsbrun cxltier ycsb run --workload c --records 10000 --ops 2000 --addr "$S" --data-integrity --json
verdict ras-store-reads-correct-data-after-poison "exit $rc: $(grep -E '"(operations|errors|verify_errors|first_error)"' "$T/ras-ycsbrun.out" | tr -d ' \n') $(brief "$T/ras-ycsbrun.err")" \
    sh -c "[ $rc = 0 ] && grep -q '\"operations\": 2000' '$T/ras-ycsbrun.out' && grep -q '\"verify_errors\": 0' '$T/ras-ycsbrun.out' && grep -q '\"errors\": 0' '$T/ras-ycsbrun.out'"
kill "$victim" 2>/dev/null
wait "$victim" 2>/dev/null
data ras-quarantine "$T/quarantine.jsonl"
data ras-serve-err "$T/serve.err"
# The kernel's side of the injections (the console silences it): for diagnosis on the host.
dmesg | grep -Ei 'cxl|aer|pcieport|mem[0-9]|poison|offline' | tail -n 80 >"$T/dmesg.out"
data ras-dmesg "$T/dmesg.out"

# ---- tierd and the quarantine file: a target's page on a quarantined frame is moved off -------------
# The range is written here and not offlined (as a tool that does not offline would leave it): tierd
# must move the page to a healthy frame on another node and report the node's quarantined range.
rm -f "$T/tq.pid" "$T/tq.out" "$T/tierd-q.jsonl"
cxltier run --bind 1 -- sh -c "echo \$\$ >$T/tq.pid; exec cxltier touch 1M --json --hold 60" \
    >"$T/tq.out" 2>"$T/tq.err" &
tq_runner=$!
n=0
while [ "$n" -lt 300 ] && ! [ -s "$T/tq.out" ]; do
    usleep 100000
    n=$((n + 1))
done
tq=$(cat "$T/tq.pid" 2>/dev/null)
tq_page=
[ -n "$tq" ] && tq_page=$(find_victim_page "$tq")
tq_hpa=${tq_page% *}
tq_va=${tq_page#* }
frame_of() {
    entry=$(dd if="/proc/$1/pagemap" bs=8 skip=$(($2 / 4096)) count=1 2>/dev/null | od -An -tx8 | tr -d ' ')
    echo $(((0x$entry & 0x7fffffffffffff) * 4096))
}
[ -n "$tq_page" ] && printf '{"start":%s,"end":%s,"memdev":"%s","node":1}\n' "$tq_hpa" $((tq_hpa + 4096)) "$memdev" >"$T/tierd-q.jsonl"
capture tierd-q cxltier tierd --pid "${tq:-0}" --json --duration 4 --interval 500 --quarantine-file "$T/tierd-q.jsonl"
tq_after=
[ -n "$tq_page" ] && tq_after=$(frame_of "$tq" "$tq_va")
qline=$(grep '"event":"quarantine"' "$T/tierd-q.out" | tail -1)
verdict ras-tierd-moves-page-off-quarantined-frame "pid $tq va $tq_va: frame $(printf '0x%x' "${tq_hpa:-0}") -> $(printf '0x%x' "${tq_after:-0}"), exit $rc: $(echo "$qline" | cut -c1-240) $(brief "$T/tierd-q.err")" \
    sh -c "[ $rc = 0 ] && [ -n '$tq_after' ] && [ '$tq_after' != '$tq_hpa' ] && [ '$tq_after' != 0 ] && echo '$qline' | grep -Eq '\"moved_off_pages_total\":[1-9]'"
verdict ras-tierd-reports-quarantined-node "$(echo "$qline" | cut -c1-200)" \
    sh -c "echo '$qline' | grep -q '\"nodes\":{\"1\":{\"ranges\":1,\"bytes\":4096}}'"
verdict ras-tierd-quarantine-target-survives "the target still runs after its page was moved" kill -0 "${tq:-0}"
kill "$tq" 2>/dev/null
wait "$tq_runner" 2>/dev/null

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
