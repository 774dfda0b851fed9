# shellcheck shell=dash
# Checks of `cxltier tierd` inside a lab guest (sourced by hmat.sh and cxl.sh after lib.sh).
#
# A workload whose 1 MiB hot set moves every 10 s over 8 MiB, started interleaved over node0 and
# node1, runs under tierd with a DRAM budget of 3 MiB (smaller than its footprint) and a migration
# rate limit of 1 MB/s, until a window that became hot under tierd reaches node0; a second process
# that tierd does not target holds 2 MiB on node1. The guest checks what it can see directly (exit
# statuses, messages, that targets survive tierd and that DAMON is cleaned up); the host judges the JSON (cxltier_lab::tierd): hot set on node0, rate
# limit, budget, the untargeted process untouched, memory intact.

uptime_s() { cut -d' ' -f1 /proc/uptime; }

# wait_for_text FILE TEXT [TENTHS]: until FILE holds TEXT (TENTHS tenths of a second, 90 s by
# default).
wait_for_text() {
    _n=0
    while [ "$_n" -lt "${3:-900}" ] && ! grep -q "$2" "$1" 2>/dev/null; do
        usleep 100000
        _n=$((_n + 1))
    done
}

# wait_for_text_count FILE TEXT N [TENTHS]: until FILE has N lines with TEXT (TENTHS/10 s at most).
wait_for_text_count() {
    _n=0
    while [ "$_n" -lt "${4:-900}" ] && [ "$(grep -c "$2" "$1" 2>/dev/null)" -lt "$3" ]; do
        usleep 100000
        _n=$((_n + 1))
    done
}

# wait_until_hot_on_node0 FILE START [TENTHS]: until the `touch --hot --json` reports in FILE show
# a window that became hot START seconds or more after the workload started (window x 10 s, the
# --shift-every) with at least 90% of its pages on node0 (TENTHS/10 s at most).
wait_until_hot_on_node0() {
    _n=0
    while [ "$_n" -lt "${3:-2400}" ] && ! awk -v start="$2" '
        /"hot_pages_per_node"/ {
            w = $0; sub(/.*"window":/, "", w); sub(/,.*/, "", w)
            p = $0; sub(/.*"hot_pages":/, "", p); sub(/,.*/, "", p)
            h = 0
            if ($0 ~ /"hot_pages_per_node":\{[^}]*"0":/) { h = $0; sub(/.*"hot_pages_per_node":\{[^}]*"0":/, "", h); sub(/[,}].*/, "", h) }
            if (w * 10 >= start + 0 && p + 0 > 0 && h + 0 >= 0.9 * p) found = 1
        }
        END { exit !found }' "$1" 2>/dev/null; do
        usleep 100000
        _n=$((_n + 1))
    done
}

# wait_for FILE: until FILE is non-empty (30 s at most).
wait_for() {
    _n=0
    while [ "$_n" -lt 300 ] && ! [ -s "$1" ]; do
        usleep 100000
        _n=$((_n + 1))
    done
}

check_tierd() {
    # The processes below hold their memory until the check kills them: each --hold is a hang
    # guard, longer than any wait of the check. (The untargeted process held 120 s; with tierd's
    # run waiting for its event, a loaded machine — two CPU hogs and a second guest beside — took
    # longer, and it had exited before the check looked at it again.)
    rm -f "$T"/tierd-*.pid
    echo 0 >/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds 2>/dev/null
    cxltier run --bind 1 -- sh -c "echo \$\$ >$T/tierd-other.pid; exec cxltier touch 2M --json --hold 900" \
        >"$T/tierd-other.out" 2>"$T/tierd-other.err" &
    wait_for "$T/tierd-other.out"
    other=$(cat "$T/tierd-other.pid" 2>/dev/null)
    cxltier show --pid "$other" --json >"$T/tierd-other-before.out" 2>&1

    t0=$(uptime_s)
    # Event-driven, not timed: the workload and tierd run until a window that became hot while
    # tierd ran has 90% of its pages on node0 (what the host's check looks for), then tierd and
    # the workload are stopped with SIGTERM. How long that takes is an emulator timing that moves
    # with the host's load; the --duration values and the 240 s wait are hang guards.
    cxltier run --interleave -- sh -c "echo \$\$ >$T/tierd-hot.pid; exec cxltier touch 8M --hot 1M --shift-every 10 --duration 900 --report-every 0.5 --json" \
        >"$T/tierd-hot.out" 2>"$T/tierd-hot.err" &
    hot_runner=$!
    wait_for "$T/tierd-hot.out"
    hot=$(cat "$T/tierd-hot.pid" 2>/dev/null)
    t1=$(uptime_s)
    cxltier tierd --pid "$hot" --dram-budget 3M --max-migrate-rate 1 --interval 500 \
        --duration 600 --json >"$T/tierd.out" 2>"$T/tierd.err" &
    tierd=$!
    wait_until_hot_on_node0 "$T/tierd-hot.out" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" 2400
    # One more tierd report after that, so that its JSON covers the moment seen.
    n=$(grep -c '"status":"running"' "$T/tierd.out")
    wait_for_text_count "$T/tierd.out" '"status":"running"' $((n + 1)) 300
    kill -TERM "$tierd" 2>/dev/null
    wait "$tierd"
    rc=$?
    t2=$(uptime_s)
    verdict tierd-runs "pid $hot, exit $rc: $(brief "$T/tierd.err")" [ "$rc" = 0 ]
    verdict tierd-says-source-and-system-wide "$(grep -o 'access source: [^)]*)' "$T/tierd.err")" \
        sh -c "grep -q 'access source: damon (DAMON.s sysfs interface is present; this kernel has no idle-page tracking)' '$T/tierd.err' && grep -q 'system-wide' '$T/tierd.err' && grep -q '\"source\":\"damon\"' '$T/tierd.out'"
    verdict tierd-stop-leaves-target-running "pid $hot alive after tierd stopped" kill -0 "$hot"
    verdict tierd-damon-removed "nr_kdamonds $(cat /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds)" \
        [ "$(cat /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds)" = 0 ]
    cxltier show --pid "$hot" --json >"$T/tierd-hot-show.out" 2>&1
    cxltier show --pid "$other" --json >"$T/tierd-other-after.out" 2>&1
    # SIGTERM ends the workload the way its --duration would: final integrity check, exit 0.
    kill -TERM "$hot" 2>/dev/null
    wait "$hot_runner"
    hot_rc=$?
    verdict tierd-workload-exits-cleanly "exit $hot_rc: $(brief "$T/tierd-hot.err")" [ "$hot_rc" = 0 ]
    printf '{"workload_start": %s, "tierd_start": %s, "tierd_end": %s}\n' "$t0" "$t1" "$t2" \
        >"$T/tierd-times.out"
    data tierd-times "$T/tierd-times.out"
    data tierd-json "$T/tierd.out"
    data tierd-hot "$T/tierd-hot.out"
    data tierd-hot-show "$T/tierd-hot-show.out"
    data tierd-other-before "$T/tierd-other-before.out"
    data tierd-other-after "$T/tierd-other-after.out"
    kill "$other" 2>/dev/null

    # --dry-run: plans moves (4 MiB interleaved, budget 1 MiB) but moves nothing.
    cxltier run --interleave -- sh -c "echo \$\$ >$T/tierd-dry.pid; exec cxltier touch 4M --json --hold 600" \
        >"$T/tierd-dry-target.out" 2>&1 &
    wait_for "$T/tierd-dry-target.out"
    dry=$(cat "$T/tierd-dry.pid" 2>/dev/null)
    cxltier show --pid "$dry" --json >"$T/tierd-dry-before.out" 2>&1
    capture tierd-dry cxltier tierd --pid "$dry" --dram-budget 1M --interval 300 --duration 3 --dry-run --json
    cxltier show --pid "$dry" --json >"$T/tierd-dry-after.out" 2>&1
    planned=$(grep -o '"planned_demotions":[0-9]*' "$T/tierd-dry.out" | cut -d: -f2 | sort -n | tail -1)
    moved=$(grep -o '"migrated_bytes":[0-9]*' "$T/tierd-dry.out" | cut -d: -f2 | sort -n | tail -1)
    if [ "$rc" = 0 ] && [ "${planned:-0}" -gt 0 ] && [ "${moved:-x}" = 0 ] &&
        cmp -s "$T/tierd-dry-before.out" "$T/tierd-dry-after.out"; then
        pass tierd-dry-run-moves-nothing "would demote $planned pages, moved $moved bytes, placement unchanged"
    else
        fail tierd-dry-run-moves-nothing "exit $rc, planned '$planned', moved '$moved', placement $(cmp "$T/tierd-dry-before.out" "$T/tierd-dry-after.out" >/dev/null && echo unchanged || echo CHANGED): $(tail -2 "$T/tierd-dry.err" | tr '\n' ' ')"
    fi
    kill "$dry" 2>/dev/null

    # The rate limit, with demand it must hold back: 8 MiB all on node0 under a budget of 1 MiB
    # is 7 MiB of demotions owed at once, more than the bucket (2 s of rate) and the 4 s run
    # can pay at 1 MB/s. The main run above may never ask for more than the bucket holds.
    cxltier run --bind 0 -- sh -c "echo \$\$ >$T/tierd-rate.pid; exec cxltier touch 8M --json --hold 600" \
        >"$T/tierd-rate-target.out" 2>&1 &
    wait_for "$T/tierd-rate-target.out"
    rated=$(cat "$T/tierd-rate.pid" 2>/dev/null)
    capture tierd-rate cxltier tierd --pid "$rated" --dram-budget 1M --max-migrate-rate 1 \
        --interval 500 --duration 4 --json
    verdict tierd-rate-runs "pid $rated, exit $rc: $(brief "$T/tierd-rate.err")" [ "$rc" = 0 ]
    data tierd-rate-json "$T/tierd-rate.out"
    kill "$rated" 2>/dev/null

    # Huge pages: a target whose 8 MiB are all hot and in transparent huge pages (--huge; the
    # guest runs with THP "always"), all on node1, under a 3 MiB budget. The kernel moves a huge
    # page whole, so tierd must count each at its 2 MiB: one fits, a second does not, and no
    # report may show more than the budget on node0. (Planned 4 KiB by 4 KiB, each promotion
    # moved 2 MiB and the target ended with all its huge pages on node0.) Event-driven: until
    # tierd has promoted something, then one more report; 120 s is a hang guard.
    cxltier run --bind 1 -- sh -c "echo \$\$ >$T/tierd-huge.pid; exec cxltier touch 8M --huge --hot 8M --duration 900 --report-every 1 --json" \
        >"$T/tierd-huge-target.out" 2>"$T/tierd-huge-target.err" &
    huge_runner=$!
    wait_for "$T/tierd-huge-target.out"
    hugepid=$(cat "$T/tierd-huge.pid" 2>/dev/null)
    cxltier tierd --pid "$hugepid" --dram-budget 3M --interval 500 --duration 600 --json \
        >"$T/tierd-huge.out" 2>"$T/tierd-huge.err" &
    tierd=$!
    wait_for_text "$T/tierd-huge.out" '"promoted_pages":[1-9]' 1200
    n=$(grep -c '"status":"running"' "$T/tierd-huge.out")
    wait_for_text_count "$T/tierd-huge.out" '"status":"running"' $((n + 1)) 300
    kill -TERM "$tierd" 2>/dev/null
    wait "$tierd"
    rc=$?
    most=$(grep -o '"fast_bytes":[0-9]*' "$T/tierd-huge.out" | cut -d: -f2 | sort -n | tail -1)
    huge=$(grep -o '"huge_pages":[0-9]*' "$T/tierd-huge.out" | cut -d: -f2 | sort -n | tail -1)
    promoted=$(grep -o '"promoted_pages":[0-9]*' "$T/tierd-huge.out" | cut -d: -f2 | sort -n | tail -1)
    if [ "$rc" = 0 ] && [ "${huge:-0}" -gt 0 ] && [ "${promoted:-0}" -gt 0 ] &&
        [ "${most:-99999999}" -le 3145728 ]; then
        pass tierd-huge-pages-keep-the-budget "$huge huge pages seen, $promoted pages promoted, at most $most bytes on node0 (budget 3145728)"
    else
        fail tierd-huge-pages-keep-the-budget "exit $rc, huge pages '$huge', promoted '$promoted', at most '$most' bytes on node0 (budget 3145728): $(brief "$T/tierd-huge.err")"
    fi
    kill -TERM "$hugepid" 2>/dev/null
    wait "$huge_runner"
    hrc=$?
    verdict tierd-huge-workload-intact "exit $hrc: $(brief "$T/tierd-huge-target.err")" [ "$hrc" = 0 ]

    # A target that exits: tierd reports it and ends by itself. The target ends once tierd has
    # reported an interval (a target that ended on its own clock could be gone before tierd
    # looked, on a loaded host: then there is nothing to follow, and no exit to report).
    cxltier touch 1M --json --hold 600 >"$T/tierd-short.out" 2>&1 &
    short=$!
    # --duration is a hang guard: tierd must end by itself when the target does.
    cxltier tierd --pid "$short" --interval 300 --duration 600 --json \
        >"$T/tierd-exit.out" 2>"$T/tierd-exit.err" &
    tierd=$!
    wait_for_text "$T/tierd-exit.out" '"status":"running"' 1200
    kill -TERM "$short" 2>/dev/null
    wait "$short"
    wait "$tierd"
    rc=$?
    if [ "$rc" = 0 ] && grep -q '"status":"exited"' "$T/tierd-exit.out" &&
        grep -q '"reason":"targets_exited"' "$T/tierd-exit.out"; then
        pass tierd-target-exit-handled "exit 0, target reported exited: $(brief "$T/tierd-exit.err")"
    else
        fail tierd-target-exit-handled "exit $rc: $(brief "$T/tierd-exit.out") $(brief "$T/tierd-exit.err")"
    fi
    wait "$short" 2>/dev/null

    bad_input tierd-no-such-pid 2 "no process" cxltier tierd --pid 999999 --duration 1
    bad_input tierd-bad-budget 2 "dram_budget" cxltier tierd --pid 1 --dram-budget lots
    # Debian's 6.12 kernel is built without CONFIG_IDLE_PAGE_TRACKING: asking for that source is
    # refused as unsupported (exit 4), naming the option; an unknown source is bad input.
    bad_input tierd-idle-page-unsupported 4 "CONFIG_IDLE_PAGE_TRACKING" \
        cxltier tierd --pid 1 --access-source idle-page --duration 1
    bad_input tierd-bad-access-source 2 "auto, damon or idle-page" \
        cxltier tierd --pid 1 --access-source idle --duration 1
}

# The tuner: a bandwidth-bound loop (cxltier touch --stream, its bytes read as the progress
# signal) tuned from the planner's split, then a sweep of four splits (--splits) on the same
# guest; the host checks that each converged on a split it measured (lab/src/tierd.rs).
check_tierd_tune() {
    rm -f "$T/progress"
    cxltier touch 4M --stream --progress-file "$T/progress" --duration 300 >"$T/stream.out" 2>&1 &
    stream=$!
    wait_for "$T/progress"
    capture tierd-tune cxltier tierd --pid "$stream" --tune --progress "file:$T/progress" --measure 1 --json
    verdict tierd-tune-runs "exit $rc: $(brief "$T/tierd-tune.err")" \
        sh -c "[ $rc = 0 ] && grep -q '\"event\":\"tuned\"' '$T/tierd-tune.out'"
    # Four splits, not all eleven: each costs a second of measuring and the moves before it (about
    # 5 s on emulated CXL memory); the checks are about behaviour, and bench/tierd-tuner-vs-sweep
    # sweeps all eleven.
    capture tierd-sweep cxltier tierd --pid "$stream" --sweep --splits 0,30,60,100 \
        --progress "file:$T/progress" --measure 1 --json
    verdict tierd-sweep-runs "exit $rc: $(brief "$T/tierd-sweep.err")" \
        sh -c "[ $rc = 0 ] && grep -q '\"event\":\"swept\"' '$T/tierd-sweep.out'"
    # How close the tuned split comes to the sweep's best is a comparison of two noisy emulator
    # measurements: bench/tierd-tuner-vs-sweep measures it; the suite checks what always holds.
    verdict tierd-tune-leaves-target-running "pid $stream" kill -0 "$stream"
    verdict tierd-tune-pid-policy-named "$(grep -o "memory policy is [a-z-]*: its new allocations keep that policy" "$T/tierd-tune.err")" \
        grep -q "memory policy is default: its new allocations keep that policy" "$T/tierd-tune.err"
    kill "$stream" 2>/dev/null
    wait "$stream" 2>/dev/null
    data tierd-tune "$T/tierd-tune.out"
    data tierd-sweep "$T/tierd-sweep.out"
    bad_input tierd-tune-bad-progress 2 "progress" cxltier tierd --pid 1 --tune --progress http://x
}

# Weights for the new allocations of a target tierd starts itself, with continuous tuning: the
# stream starts under weighted interleave; once tuned, the kernel's table holds the tuned ratio
# while tierd runs, a buffer the target allocates after that follows it, and when tierd stops
# (SIGTERM) the old table is back and the target still runs. tierd is stopped once the check has
# seen what it needs (tuned, the fresh buffer, a watch window), not after a fixed --duration: how
# long the climb takes is an emulator timing (each step moves pages on emulated CXL memory), and a
# loaded machine once needed more than the 40 s this check used to give it. The --duration and
# the waits below are hang guards.
check_tierd_weights() {
    rm -f "$T/wprogress" "$T/fresh-go"
    set_wi 1 1
    before=$(wi_table)
    cxltier tierd --tune --continuous --progress "file:$T/wprogress" --measure 1 --duration 600 --json \
        -- cxltier touch 4M --stream --progress-file "$T/wprogress" --duration 900 --fresh 2M \
        --fresh-when "$T/fresh-go" --json >"$T/tierd-wi.out" 2>"$T/tierd-wi.err" &
    tierd=$!
    wait_for_text "$T/tierd-wi.out" '"event":"tuned"' 6000
    during=$(wi_table)
    touch "$T/fresh-go"
    wait_for_text "$T/tierd-wi.out" '"event":"fresh_buffer"' 1200
    wait_for_text "$T/tierd-wi.out" '"event":"watch"' 1200
    kill -TERM "$tierd" 2>/dev/null
    wait "$tierd"
    rc=$?
    after=$(wi_table)
    target=$(grep -o '"event":"tuned","pid":[0-9]*' "$T/tierd-wi.out" | head -1 | grep -o '[0-9]*$')
    verdict tierd-continuous-runs "exit $rc, $(grep -c '"event":"watch"' "$T/tierd-wi.out") watch windows, $(grep -c '"event":"tuned"' "$T/tierd-wi.out") climbs: $(brief "$T/tierd-wi.err")" \
        sh -c "[ $rc = 0 ] && grep -q '\"event\":\"watch\"' '$T/tierd-wi.out' && grep -q '\"reason\":\"signal\"' '$T/tierd-wi.out'"
    verdict tierd-weights-said-on-stderr "$(grep -o 'changed a system-wide setting[^;]*' "$T/tierd-wi.err" | tail -1)" \
        grep -q 'changed a system-wide setting' "$T/tierd-wi.err"
    verdict tierd-weights-restored "before: $before; while tuned: $during; after: $after" [ "$before" = "$after" ]
    verdict tierd-weights-target-left-running "pid $target" kill -0 "${target:-999999}"
    kill "${target:-999999}" 2>/dev/null
    printf '{"before": "%s", "during": "%s", "after": "%s"}\n' "$before" "$during" "$after" >"$T/tierd-wi-table.out"
    data tierd-wi "$T/tierd-wi.out"
    data tierd-wi-table "$T/tierd-wi-table.out"

    # --dry-run: says what it would write (2:1 -> 1:1 here), writes nothing.
    rm -f "$T/wprogress"
    set_wi 2 1
    before=$(wi_table)
    capture tierd-wi-dry cxltier tierd --tune --dry-run --progress "file:$T/wprogress" --measure 1 \
        --tune-start 1:1 --duration 3 -- cxltier touch 1M --stream --progress-file "$T/wprogress" --duration 6
    verdict tierd-weights-dry-run "exit $rc, table $before -> $(wi_table): $(grep -o 'would set[^;]*' "$T/tierd-wi-dry.err" | head -1); $(grep -v 'would set' "$T/tierd-wi-dry.err" | tail -2 | tr '\n' ' ')" \
        sh -c "[ $rc = 0 ] && [ '$before' = '$(wi_table)' ] && grep -q 'would set.*node0 2 -> 1' '$T/tierd-wi-dry.err' && ! grep -q 'changed a system-wide' '$T/tierd-wi-dry.err'"
    set_wi 1 1
}

# --cgroup follows the cgroup: a process that joins while tierd runs becomes a target, one that
# leaves is reported once as `left` and never again (and its metric series are dropped);
# --metrics-addr serves Prometheus text on loopback (fetched with busybox wget); without root tierd refuses with exit 3.
check_tierd_cgroup() {
    # The guest's loopback interface starts down.
    ifconfig lo 127.0.0.1 up 2>/dev/null || ip link set lo up
    grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup
    cg=/sys/fs/cgroup/tierd-lab
    mkdir -p "$cg"
    cxltier touch 2M --json --hold 600 >"$T/cg-a.out" 2>&1 &
    a=$!
    echo "$a" >"$cg/cgroup.procs"
    wait_for "$T/cg-a.out"
    # tierd is stopped (SIGTERM) once the metrics were fetched: with a fixed --duration 14 a loaded
    # machine reached the fetch after tierd had ended, and wget found nothing listening. The
    # --duration is a hang guard.
    cxltier tierd --cgroup "$cg" --interval 300 --duration 600 --metrics-addr 127.0.0.1:9464 --json \
        >"$T/tierd-cg.out" 2>"$T/tierd-cg.err" &
    tierd=$!
    wait_for_text "$T/tierd-cg.out" "\"pid\":$a," 300
    cxltier touch 2M --json --hold 600 >"$T/cg-b.out" 2>&1 &
    b=$!
    echo "$b" >"$cg/cgroup.procs"
    wait_for_text "$T/tierd-cg.out" "\"pid\":$b,\"status\":\"running\"" 300
    echo "$a" >/sys/fs/cgroup/cgroup.procs
    wait_for_text "$T/tierd-cg.out" "\"pid\":$a,\"status\":\"left\"" 300
    # One more report after a left, so that the metrics show it as gone (interval 300 ms).
    n=$(grep -c '"pid":' "$T/tierd-cg.out")
    wait_for_text_count "$T/tierd-cg.out" '"pid":' $((n + 2)) 600
    wget -q -O "$T/tierd-metrics.out" http://127.0.0.1:9464/metrics
    wrc=$?
    kill -TERM "$tierd" 2>/dev/null
    wait "$tierd"
    rc=$?
    # Reports of a after the one saying it left (there must be none).
    after_left=$(sed -n "/\"pid\":$a,\"status\":\"left\"/,\$p" "$T/tierd-cg.out" | grep -c "\"pid\":$a,")
    verdict tierd-cgroup-follows-members \
        "exit $rc; b=$b joined: $(grep -c "\"pid\":$b,\"status\":\"running\"" "$T/tierd-cg.out") reports; a=$a left: $(grep -c "\"pid\":$a,\"status\":\"left\"" "$T/tierd-cg.out") report(s), $((after_left - 1)) after; $(grep -o 'joined \[[0-9,]*\], left \[[0-9,]*\]' "$T/tierd-cg.err" | tr '\n' ' ')" \
        sh -c "[ $rc = 0 ] && grep -q '\"pid\":$b,\"status\":\"running\"' '$T/tierd-cg.out' && [ $after_left = 1 ] && kill -0 $a && kill -0 $b"
    verdict tierd-metrics-served \
        "wget exit $wrc: $(grep -c '^cxltier_tierd_' "$T/tierd-metrics.out" 2>/dev/null) samples; $(grep -c "pid=\"$a\"" "$T/tierd-metrics.out" 2>/dev/null) series of a; $(grep "^cxltier_tierd_targets" "$T/tierd-metrics.out" 2>/dev/null | tr '\n' ' ')" \
        sh -c "[ $wrc = 0 ] && grep -q '^cxltier_tierd_resident_bytes{pid=\"$b\"' '$T/tierd-metrics.out' && ! grep -q 'pid=\"$a\"' '$T/tierd-metrics.out' && grep -q '^cxltier_tierd_targets 1\$' '$T/tierd-metrics.out' && grep -q '^cxltier_tierd_targets_departed_total{reason=\"left\"} 1\$' '$T/tierd-metrics.out' && grep -q '^cxltier_build_info{' '$T/tierd-metrics.out'"
    kill "$a" "$b" 2>/dev/null
    wait "$a" "$b" 2>/dev/null
    rmdir "$cg" 2>/dev/null
    grep -q '^nobody:' /etc/passwd || echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >>/etc/passwd
    bad_input tierd-needs-root 3 "root" su -s /bin/sh nobody -c 'cxltier tierd --pid 1 --duration 1'
}

# Memory mode (--nvme): the hmat guest has a 256 MiB scratch disk, /dev/vda (lab/run). A workload
# of 32 MiB whose 1 MiB hot set moves runs under tierd with budgets of 8 MiB DRAM and 4 MiB CXL:
# the rest must go to swap on the disk while tierd runs (bytes on "nvme" > 0), the swap area must
# be gone once tierd stops (SIGTERM), the workload must keep running and end with every page as
# it last wrote it (`touch --hot` checks each page at its end: exit 0), and --dry-run must change
# nothing (/proc/swaps as before, no page swapped). tierd is stopped once the check has seen what
# it needs; the --duration values and waits are hang guards.
# mem_target NAME [CGROUP]: start the 32 MiB workload (in CGROUP from its start, so that its
# memory is charged there); its pid in $target, its runner in $target_runner.
mem_target() {
    sh -c 'if [ -n "$1" ]; then echo $$ >"$1/cgroup.procs"; fi
        exec cxltier touch 32M --hot 1M --shift-every 5 --duration 900 --report-every 1 --json' \
        mem_target "${2:-}" >"$T/$1-target.out" 2>"$T/$1-target.err" &
    target_runner=$!
    target=$target_runner
    wait_for "$T/$1-target.out"
}

vm_swap_kb() { awk '/^VmSwap:/ { print $2 }' "/proc/$1/status"; }

# mem_run NAME NVME: tierd in memory mode on $target until its JSON shows bytes on nvme, then
# SIGTERM; sets rc, swaps_during and nvme_max.
mem_run() {
    cxltier tierd --pid "$target" --dram-budget 8M --cxl-budget 4M --nvme "$2" --max-stall-pct 20 \
        --interval 500 --duration 600 --json >"$T/$1.out" 2>"$T/$1.err" &
    _tierd=$!
    wait_for_text "$T/$1.out" '"nvme":[1-9]' 1800
    # And a stall measured (from the second interval on).
    wait_for_text "$T/$1.out" '"stall_some_pct":[0-9]' 300
    swaps_during=$(tail -n +2 /proc/swaps | awk '{print $1}' | tr '\n' ' ')
    kill -TERM "$_tierd" 2>/dev/null
    wait "$_tierd"
    rc=$?
    nvme_max=$(grep -o '"nvme":[0-9]*' "$T/$1.out" | cut -d: -f2 | sort -n | tail -1)
}

check_tierd_memory() {
    swaps_before=$(cat /proc/swaps)
    page_cluster_before=$(cat /proc/sys/vm/page-cluster)

    # --dry-run: says what it would do, does none of it.
    mem_target tierd-mem-dry
    capture tierd-mem-dry cxltier tierd --pid "$target" --dram-budget 8M --cxl-budget 4M \
        --nvme /dev/vda --interval 500 --duration 3 --dry-run --json
    planned=$(grep -o '"planned_pageouts":[0-9]*' "$T/tierd-mem-dry.out" | cut -d: -f2 | sort -n | tail -1)
    verdict tierd-memory-dry-run-changes-nothing \
        "exit $rc, would page out ${planned:-?} pages, VmSwap $(vm_swap_kb "$target") kB, $(grep -c 'would swapon' "$T/tierd-mem-dry.err") swapon said; $(brief "$T/tierd-mem-dry.err")" \
        sh -c "[ $rc = 0 ] && [ '$swaps_before' = \"\$(cat /proc/swaps)\" ] && [ \"${planned:-0}\" -gt 0 ] && [ \"$(vm_swap_kb "$target")\" = 0 ] && grep -q 'would swapon /dev/vda with priority' '$T/tierd-mem-dry.err' && grep -q 'would tune /proc/sys/vm/page-cluster' '$T/tierd-mem-dry.err' && [ \"\$(cat /proc/sys/vm/page-cluster)\" = '$page_cluster_before' ]"
    kill -TERM "$target_runner" 2>/dev/null
    wait "$target_runner" 2>/dev/null

    # The block device.
    mem_target tierd-mem
    mem_run tierd-mem /dev/vda
    verdict tierd-memory-pages-out-to-nvme \
        "exit $rc, most bytes on nvme ${nvme_max:-none}, swaps while running: $swaps_during; $(brief "$T/tierd-mem.err")" \
        sh -c "[ $rc = 0 ] && [ \"${nvme_max:-0}\" -gt 0 ] && echo '$swaps_during' | grep -q /dev/vda"
    verdict tierd-memory-swap-gone-after-stop \
        "/proc/swaps after: $(tail -n +2 /proc/swaps | tr '\n' ' '); $(grep -o '"event":"swap_teardown"[^}]*' "$T/tierd-mem.out")" \
        sh -c "[ '$swaps_before' = \"\$(cat /proc/swaps)\" ] && grep -q '\"swapped_off\":true' '$T/tierd-mem.out'"
    verdict tierd-memory-target-still-running "pid $target, VmSwap now $(vm_swap_kb "$target") kB" kill -0 "$target"
    # Swap readahead (vm.page-cluster, system-wide) is tuned while tierd runs, said, reported in
    # every interval line, and put back when it stops.
    ra_values=$(grep -o '"swap_readahead":{"page_cluster":[0-9]*' "$T/tierd-mem.out" | cut -d: -f3 | sort -u | tr '\n' ' ')
    verdict tierd-memory-readahead-restored \
        "vm.page-cluster before $page_cluster_before, after $(cat /proc/sys/vm/page-cluster), during: ${ra_values:-none}; $(grep -o 'tune /proc/sys/vm/page-cluster[^)]*)' "$T/tierd-mem.err" | head -1)" \
        sh -c "[ \"\$(cat /proc/sys/vm/page-cluster)\" = '$page_cluster_before' ] && [ -n '$ra_values' ] && grep -q 'tune /proc/sys/vm/page-cluster' '$T/tierd-mem.err' && grep -q 'page-cluster restored to $page_cluster_before' '$T/tierd-mem.err'"
    verdict tierd-memory-sla-reads-pressure "$(grep -o 'SLA: memory pressure read from [^ ]*' "$T/tierd-mem.err")" \
        sh -c "grep -q 'SLA: memory pressure read from' '$T/tierd-mem.err' && grep -q '\"stall_some_pct\":[0-9]' '$T/tierd-mem.out'"
    # SIGTERM ends the workload as its --duration would: every page checked, exit 0 when intact.
    kill -TERM "$target_runner" 2>/dev/null
    wait "$target_runner"
    trc=$?
    verdict tierd-memory-workload-intact "exit $trc: $(tail -1 "$T/tierd-mem-target.out" | cut -c1-200) $(brief "$T/tierd-mem-target.err")" [ "$trc" = 0 ]
    data tierd-mem-json "$T/tierd-mem.out"

    # zswap as a compressed tier between memory and the disk (--zswap 10): turned on for the run
    # (said), pages go into its pool (the interval lines' zswap.stored_pages), and its settings
    # are as they were once tierd stops; the workload is intact.
    zswap_before=$(cat /sys/module/zswap/parameters/enabled /sys/module/zswap/parameters/max_pool_percent | tr '\n' ' ')
    mem_target tierd-memzswap
    cxltier tierd --pid "$target" --dram-budget 8M --cxl-budget 4M --nvme /dev/vda --zswap 10 \
        --interval 500 --duration 600 --json >"$T/tierd-memzswap.out" 2>"$T/tierd-memzswap.err" &
    _tierd=$!
    wait_for_text "$T/tierd-memzswap.out" '"stored_pages":[1-9]' 1800
    zswap_during=$(cat /sys/module/zswap/parameters/enabled /sys/module/zswap/parameters/max_pool_percent | tr '\n' ' ')
    kill -TERM "$_tierd" 2>/dev/null
    wait "$_tierd"
    rc=$?
    stored_max=$(grep -o '"stored_pages":[0-9]*' "$T/tierd-memzswap.out" | cut -d: -f2 | sort -n | tail -1)
    zswap_after=$(cat /sys/module/zswap/parameters/enabled /sys/module/zswap/parameters/max_pool_percent | tr '\n' ' ')
    verdict tierd-memory-zswap \
        "exit $rc, zswap before '$zswap_before' during '$zswap_during' after '$zswap_after', most pages stored in an interval ${stored_max:-none}; $(grep -m1 -o 'set /sys/module/zswap/parameters/enabled[^(]*' "$T/tierd-memzswap.err"); $(brief "$T/tierd-memzswap.err")" \
        sh -c "[ $rc = 0 ] && [ \"${stored_max:-0}\" -gt 0 ] && [ '$zswap_during' = 'Y 10 ' ] && [ '$zswap_after' = '$zswap_before' ] && grep -q 'zswap: /sys/module/zswap/parameters/enabled restored to' '$T/tierd-memzswap.err'"
    kill -TERM "$target_runner" 2>/dev/null
    wait "$target_runner"
    trc=$?
    verdict tierd-memory-zswap-workload-intact "exit $trc: $(tail -1 "$T/tierd-memzswap-target.out" | cut -c1-200)" [ "$trc" = 0 ]

    # DAMOS instead of process_madvise (--pageout-with damos): a pageout scheme in the target's
    # kdamond, its size quota set to tierd's figure each interval, pages the coldest regions out;
    # the pages land in swap, the counts come from the scheme's own statistics, and the workload
    # is intact.
    mem_target tierd-memdamos
    cxltier tierd --pid "$target" --dram-budget 8M --cxl-budget 4M --nvme /dev/vda \
        --pageout-with damos --interval 500 --duration 600 --json \
        >"$T/tierd-memdamos.out" 2>"$T/tierd-memdamos.err" &
    _tierd=$!
    wait_for_text "$T/tierd-memdamos.out" '"pageout_pages_total":[1-9]' 1800
    wait_for_text "$T/tierd-memdamos.out" '"nvme":[1-9]' 600
    kill -TERM "$_tierd" 2>/dev/null
    wait "$_tierd"
    rc=$?
    damos_total=$(grep -o '"pageout_pages_total":[0-9]*' "$T/tierd-memdamos.out" | cut -d: -f2 | sort -n | tail -1)
    damos_nvme=$(grep -o '"nvme":[0-9]*' "$T/tierd-memdamos.out" | cut -d: -f2 | sort -n | tail -1)
    verdict tierd-memory-damos-pageout \
        "exit $rc, pages out by DAMOS ${damos_total:-none}, most bytes on nvme ${damos_nvme:-none}; $(grep -o 'paged out (a DAMOS[^)]*)' "$T/tierd-memdamos.err"); $(brief "$T/tierd-memdamos.err")" \
        sh -c "[ $rc = 0 ] && [ \"${damos_total:-0}\" -gt 0 ] && [ \"${damos_nvme:-0}\" -gt 0 ] && grep -q 'paged out (a DAMOS pageout scheme' '$T/tierd-memdamos.err'"
    kill -TERM "$target_runner" 2>/dev/null
    wait "$target_runner"
    trc=$?
    verdict tierd-memory-damos-workload-intact "exit $trc: $(tail -1 "$T/tierd-memdamos-target.out" | cut -c1-200)" [ "$trc" = 0 ]

    # The SLA held to the workload's own progress (--max-slowdown-pct with --progress, as the
    # tuner reads it): a stream publishing the bytes it has read runs under tierd; the interval
    # lines carry its rate, its slowdown against its best rate and the goal, pages go to swap, and
    # every whole pass of the stream still sums to its pattern's sum.
    sh -c 'exec cxltier touch 32M --stream --progress-file "$1" --duration 900 --json' \
        slowdown "$T/stream.progress" >"$T/tierd-memslow-target.out" 2>"$T/tierd-memslow-target.err" &
    target_runner=$!
    target=$target_runner
    wait_for_text "$T/tierd-memslow-target.out" '"event":"ready"' 600
    cxltier tierd --pid "$target" --dram-budget 8M --cxl-budget 4M --nvme /dev/vda \
        --max-slowdown-pct 20 --progress "file:$T/stream.progress" --interval 500 --duration 600 \
        --json >"$T/tierd-memslow.out" 2>"$T/tierd-memslow.err" &
    _tierd=$!
    wait_for_text "$T/tierd-memslow.out" '"slowdown_pct":[0-9]' 600
    wait_for_text "$T/tierd-memslow.out" '"nvme":[1-9]' 1800
    kill -TERM "$_tierd" 2>/dev/null
    wait "$_tierd"
    rc=$?
    slow_values=$(grep -o '"slowdown_pct":[0-9.]*' "$T/tierd-memslow.out" | cut -d: -f2 | tr '\n' ' ' | cut -c1-120)
    slow_nvme=$(grep -o '"nvme":[0-9]*' "$T/tierd-memslow.out" | cut -d: -f2 | sort -n | tail -1)
    verdict tierd-memory-slowdown-goal \
        "exit $rc, slowdown per interval: ${slow_values:-none}; most bytes on nvme ${slow_nvme:-none}; $(grep -o 'stays within [0-9]*% of its best rate' "$T/tierd-memslow.err"); $(brief "$T/tierd-memslow.err")" \
        sh -c "[ $rc = 0 ] && [ -n '$slow_values' ] && [ \"${slow_nvme:-0}\" -gt 0 ] && grep -q '\"max_slowdown_pct\":20' '$T/tierd-memslow.out' && grep -q 'stays within 20% of its best rate' '$T/tierd-memslow.err'"
    kill -TERM "$target_runner" 2>/dev/null
    wait "$target_runner"
    trc=$?
    verdict tierd-memory-slowdown-workload-intact "exit $trc: $(tail -1 "$T/tierd-memslow-target.out" | cut -c1-200)" [ "$trc" = 0 ]

    # The same in chunks (a policy that tracks every target in chunks from a sample of its
    # pages, as tierd does above 256 MiB by default): the lines say so, cold chunks go to the
    # CXL node and to NVMe, and the workload is intact.
    printf '[tracking]\nsampled_above_mib = 0\n' >"$T/chunks.toml"
    mem_target tierd-memchunks
    cxltier tierd --pid "$target" --dram-budget 8M --cxl-budget 4M --nvme /dev/vda \
        --policy "$T/chunks.toml" --interval 500 --duration 600 --json \
        >"$T/tierd-memchunks.out" 2>"$T/tierd-memchunks.err" &
    _tierd=$!
    wait_for_text "$T/tierd-memchunks.out" '"nvme":[1-9]' 1800
    wait_for_text "$T/tierd-memchunks.out" '"cxl":[1-9]' 600
    # The three tiers at once, by where the pages are (the workload's own move_pages query and
    # VmSwap): a window that turned hot after tierd started is on node0, other pages are on the
    # CXL node, and some are in swap.
    started=$(grep -c '"hot_pages_per_node"' "$T/tierd-memchunks-target.out")
    wait_until_hot_on_node0 "$T/tierd-memchunks-target.out" $((started + 10)) 1200
    last=$(grep '"hot_pages_per_node"' "$T/tierd-memchunks-target.out" | tail -1)
    hot0=$(echo "$last" | sed -n 's/.*"hot_pages_per_node":{[^}]*"0":\([0-9]*\).*/\1/p')
    all1=$(echo "$last" | sed -n 's/.*"pages_per_node":{[^}]*"1":\([0-9]*\).*/\1/p')
    swap_kb=$(vm_swap_kb "$target")
    verdict tierd-memory-three-tiers \
        "hot window pages on node0 ${hot0:-none}, pages on node1 ${all1:-none}, VmSwap ${swap_kb:-?} kB: $(echo "$last" | cut -c1-200)" \
        sh -c "[ \"${hot0:-0}\" -gt 0 ] && [ \"${all1:-0}\" -gt 0 ] && [ \"${swap_kb:-0}\" -gt 0 ]"
    kill -TERM "$_tierd" 2>/dev/null
    wait "$_tierd"
    rc=$?
    nvme_max=$(grep -o '"nvme":[0-9]*' "$T/tierd-memchunks.out" | cut -d: -f2 | sort -n | tail -1)
    cxl_max=$(grep -o '"cxl":[0-9]*' "$T/tierd-memchunks.out" | cut -d: -f2 | sort -n | tail -1)
    sampled=$(grep -o '"sampled":{[^}]*}' "$T/tierd-memchunks.out" | tail -1)
    verdict tierd-memory-in-chunks \
        "exit $rc, most bytes on nvme ${nvme_max:-none}, on cxl ${cxl_max:-none}, $sampled; $(brief "$T/tierd-memchunks.err")" \
        sh -c "[ $rc = 0 ] && [ \"${nvme_max:-0}\" -gt 0 ] && [ \"${cxl_max:-0}\" -gt 0 ] && echo '$sampled' | grep -q '\"chunk_bytes\":[1-9]' && ! grep -q '\"status\":\"running\".*\"sampled\":null' '$T/tierd-memchunks.out' && [ '$swaps_before' = \"\$(cat /proc/swaps)\" ]"
    kill -TERM "$target_runner" 2>/dev/null
    wait "$target_runner"
    trc=$?
    verdict tierd-memory-in-chunks-workload-intact "exit $trc: $(tail -1 "$T/tierd-memchunks-target.out" | cut -c1-200)" [ "$trc" = 0 ]
    data tierd-memchunks-json "$T/tierd-memchunks.out"

    # A full NVMe tier: a 2 MiB area for a workload 20 MiB over its budget. Offloading stops and
    # is reported (`nvme_full`, no page advised out while full), tierd keeps running, the target
    # too, and its data is intact.
    mem_target tierd-memfull
    cxltier tierd --pid "$target" --dram-budget 8M --cxl-budget 4M --nvme /dev/vda:2M \
        --interval 500 --duration 600 --json >"$T/tierd-memfull.out" 2>"$T/tierd-memfull.err" &
    _tierd=$!
    wait_for_text "$T/tierd-memfull.out" '"nvme_full":true' 1800
    n=$(grep -c '"nvme_full":true' "$T/tierd-memfull.out")
    wait_for_text_count "$T/tierd-memfull.out" '"nvme_full":true' $((n + 2)) 600
    full_lines=$(grep -c '"nvme_full":true' "$T/tierd-memfull.out")
    tierd_alive=no
    kill -0 "$_tierd" 2>/dev/null && tierd_alive=yes
    kill -TERM "$_tierd" 2>/dev/null
    wait "$_tierd"
    rc=$?
    paged_while_full=$(grep '"nvme_full":true' "$T/tierd-memfull.out" | grep -c '"pageout_pages":[1-9]')
    verdict tierd-memory-full-nvme-stops-offloading \
        "exit $rc, tierd running while full: $tierd_alive, $full_lines full interval(s), $paged_while_full with pageouts; $(brief "$T/tierd-memfull.err")" \
        sh -c "[ $rc = 0 ] && [ $tierd_alive = yes ] && [ $full_lines -gt 0 ] && [ $paged_while_full = 0 ] && kill -0 $target && [ '$swaps_before' = \"\$(cat /proc/swaps)\" ]"
    kill -TERM "$target_runner" 2>/dev/null
    wait "$target_runner"
    trc=$?
    verdict tierd-memory-full-nvme-workload-intact "exit $trc: $(tail -1 "$T/tierd-memfull-target.out" | cut -c1-200)" [ "$trc" = 0 ]

    # --cgroup: memory.high is the DRAM + CXL budget and memory.swap.max the swap area's size
    # while tierd runs, the previous values once it stopped (--dry-run writes none); the SLA
    # reads the cgroup's memory.pressure.
    grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup
    grep -qw memory /sys/fs/cgroup/cgroup.subtree_control ||
        echo +memory >/sys/fs/cgroup/cgroup.subtree_control
    mcg=/sys/fs/cgroup/tierd-mem
    mkdir -p "$mcg"
    high_before=$(cat "$mcg/memory.high")
    swapmax_before=$(cat "$mcg/memory.swap.max")
    mem_target tierd-memcg "$mcg"
    capture tierd-memcg-dry cxltier tierd --cgroup "$mcg" --dram-budget 8M --cxl-budget 4M \
        --nvme /dev/vda --interval 500 --duration 2 --dry-run --json
    verdict tierd-memory-cgroup-dry-run \
        "exit $rc, memory.high $high_before -> $(cat "$mcg/memory.high"); $(grep -o 'would set [^(]*' "$T/tierd-memcg-dry.err" | tr '\n' ' ')" \
        sh -c "[ $rc = 0 ] && [ \"\$(cat $mcg/memory.high)\" = '$high_before' ] && [ \"\$(cat $mcg/memory.swap.max)\" = '$swapmax_before' ] && grep -q 'would set $mcg/memory.high to 12582912 bytes' '$T/tierd-memcg-dry.err' && grep -q '\"event\":\"memcg_limits\"' '$T/tierd-memcg-dry.out' && grep '\"event\":\"memcg_limits\"' '$T/tierd-memcg-dry.out' | grep -q '\"dry_run\":true'"
    cxltier tierd --cgroup "$mcg" --dram-budget 8M --cxl-budget 4M --nvme /dev/vda --max-stall-pct 20 \
        --interval 500 --duration 600 --json >"$T/tierd-memcg.out" 2>"$T/tierd-memcg.err" &
    _tierd=$!
    wait_for_text "$T/tierd-memcg.out" '"nvme":[1-9]' 1800
    wait_for_text "$T/tierd-memcg.out" '"refaults":[0-9]' 300
    high_during=$(cat "$mcg/memory.high")
    swapmax_during=$(cat "$mcg/memory.swap.max")
    kill -TERM "$_tierd" 2>/dev/null
    wait "$_tierd"
    rc=$?
    swapmax_said=$(grep -o '"bytes":[0-9]*,"file":"memory.swap.max"' "$T/tierd-memcg.out" | grep -o '[0-9]*' | head -1)
    verdict tierd-memory-cgroup-limits \
        "exit $rc; memory.high $high_before -> $high_during -> $(cat "$mcg/memory.high"); memory.swap.max $swapmax_before -> $swapmax_during (said ${swapmax_said:-none}) -> $(cat "$mcg/memory.swap.max"); $(grep -o '"event":"memcg_restore"[^]]*' "$T/tierd-memcg.out")" \
        sh -c "[ $rc = 0 ] && [ '$high_during' = 12582912 ] && [ '$swapmax_during' = '${swapmax_said:-none}' ] && [ \"\$(cat $mcg/memory.high)\" = '$high_before' ] && [ \"\$(cat $mcg/memory.swap.max)\" = '$swapmax_before' ] && grep -q '\"event\":\"memcg_restore\"' '$T/tierd-memcg.out' && [ '$swaps_before' = \"\$(cat /proc/swaps)\" ]"
    verdict tierd-memory-cgroup-pressure-and-refaults \
        "$(grep -o 'SLA: memory pressure read from [^ ]*' "$T/tierd-memcg.err"); refaults $(grep -o '"refaults":[0-9]*' "$T/tierd-memcg.out" | cut -d: -f2 | tr '\n' ' ' | cut -c1-80)" \
        sh -c "grep -q 'SLA: memory pressure read from $mcg/memory.pressure' '$T/tierd-memcg.err' && grep -q '\"refaults\":[0-9]' '$T/tierd-memcg.out'"
    kill -TERM "$target_runner" 2>/dev/null
    wait "$target_runner"
    trc=$?
    verdict tierd-memory-cgroup-workload-intact "exit $trc: $(tail -1 "$T/tierd-memcg-target.out" | cut -c1-200)" [ "$trc" = 0 ]
    rmdir "$mcg" 2>/dev/null
    data tierd-memcg-json "$T/tierd-memcg.out"

    # A swap file on a filesystem on the same disk.
    if mkfs_ext2=$(command -v mke2fs || command -v mkfs.ext2) && grep -qw ext2 /proc/filesystems; then
        mkdir -p /mnt/nvme
        "$mkfs_ext2" -q /dev/vda >"$T/mkfs.out" 2>&1 && mount -t ext2 /dev/vda /mnt/nvme
        mem_target tierd-memf
        mem_run tierd-memf /mnt/nvme/tierd.swap:64M
        verdict tierd-memory-swap-file \
            "exit $rc, most bytes on nvme ${nvme_max:-none}, swaps while running: $swaps_during; file left: $(ls /mnt/nvme); $(brief "$T/tierd-memf.err")" \
            sh -c "[ $rc = 0 ] && [ \"${nvme_max:-0}\" -gt 0 ] && echo '$swaps_during' | grep -q /mnt/nvme/tierd.swap && [ ! -e /mnt/nvme/tierd.swap ] && [ '$swaps_before' = \"\$(cat /proc/swaps)\" ] && kill -0 $target"
        kill -TERM "$target_runner" 2>/dev/null
        wait "$target_runner"
        trc=$?
        verdict tierd-memory-swap-file-workload-intact "exit $trc" [ "$trc" = 0 ]
        umount /mnt/nvme
    else
        fail tierd-memory-swap-file "the guest has no mke2fs/mkfs.ext2 or no ext2 in /proc/filesystems"
        fail tierd-memory-swap-file-workload-intact "not run"
    fi
    bad_input tierd-memory-needs-budget 2 "dram-budget" cxltier tierd --pid 1 --nvme /dev/vda
}
