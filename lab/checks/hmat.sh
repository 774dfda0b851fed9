# Checks inside the `hmat` lab guest: node1 is a CPU-less memory node described by ACPI HMAT
# (node0: latency 100 ns, bandwidth 100 GB/s; node1: 250 ns, 40 GB/s).
# shellcheck shell=dash
# shellcheck source=lib.sh
. /lab/lib.sh

hmat() {
    cat "/sys/devices/system/node/$1/access0/initiators/$2" 2>/dev/null
}

check_basics
verdict hmat-sysfs-node0 "read_latency $(hmat node0 read_latency) read_bandwidth $(hmat node0 read_bandwidth)" \
    test "$(hmat node0 read_latency)" = 100 -a "$(hmat node0 read_bandwidth)" = 102400
verdict hmat-sysfs-node1 "read_latency $(hmat node1 read_latency) read_bandwidth $(hmat node1 read_bandwidth)" \
    test "$(hmat node1 read_latency)" = 250 -a "$(hmat node1 read_bandwidth)" = 40960
check_topo

# With HMAT figures for both nodes, the planner plans on the live machine, and --plan applies it.
capture plan cxltier plan --mix R --json
verdict plan-live-profile "$(brief "$T/plan.out")" grep -q '"profile": "live"' "$T/plan.out"
before=$(wi_table)
capture applyplan cxltier apply --plan R --dry-run
verdict apply-plan-dry-run "rc=$rc $(brief "$T/applyplan.out")" \
    test "$rc" = 0 -a "$before" = "$(wi_table)" -a -s "$T/applyplan.out"
check_apply
check_run
check_show
check_bad_input
# shellcheck source=tierd.sh
. /lab/tierd.sh
check_tierd
check_tierd_cgroup
# Memory mode: only this topology's guest has the scratch disk (/dev/vda).
check_tierd_memory
# The tuner against the sweep: both nodes are the same emulated RAM here, so every split is about
# as good, and the comparison rests on the alternating medians (docs/tierd.md).
check_tierd_tune
# No CXL here: `cxltier ras` says so with exit status 4 (unsupported platform).
bad_input ras-no-cxl-devices 4 "no CXL memory devices" cxltier ras
bad_input ras-watch-no-cxl-devices 4 "no CXL memory devices" cxltier ras --watch --duration 1
exit 0
