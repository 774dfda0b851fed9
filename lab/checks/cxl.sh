# Checks inside the `cxl` lab guest: two emulated CXL type-3 devices; lab/run has created a 256 MiB
# volatile region on mem0, which the kernel onlined as the CPU-less node1.
# shellcheck shell=dash
# shellcheck source=lib.sh
. /lab/lib.sh

check_basics
verdict cxl-region0 "$(cd /sys/bus/cxl/devices && echo *)" [ -e /sys/bus/cxl/devices/region0 ]
verdict dax-target-node1 "target_node $(cat /sys/bus/dax/devices/dax0.0/target_node 2>/dev/null)" \
    [ "$(cat /sys/bus/dax/devices/dax0.0/target_node 2>/dev/null)" = 1 ]
tiers=$(for t in /sys/devices/virtual/memory_tiering/memory_tier*; do printf '%s:%s ' "${t##*/}" "$(cat "$t/nodelist")"; done)
verdict memory-tiers-split "$tiers (DRAM in tier 4, CXL in tier 22)" \
    test -z "${tiers##*memory_tier4:0 *}" -a -z "${tiers##*memory_tier22:1 *}"
check_topo

# The emulated device gives the kernel no performance figures for node1: plan says so and falls back
# to the built-in profile, and --plan refuses with exit 4 rather than guess.
capture plan cxltier plan --mix R
verdict plan-falls-back-without-figures "$(brief "$T/plan.out")" \
    grep -q "built-in profile.*no firmware" "$T/plan.out"
capture applyplan cxltier apply --plan R --dry-run
verdict apply-plan-needs-figures "rc=$rc $(brief "$T/applyplan.err")" \
    sh -c "test $rc = 4 && grep -q 'cannot plan for this machine' '$T/applyplan.err'"
check_apply
check_run
check_show
check_bad_input
# shellcheck source=tierd.sh
. /lab/tierd.sh
check_tierd
check_tierd_tune
check_tierd_weights
# shellcheck source=store.sh
. /lab/store.sh
# shellcheck source=probe.sh
. /lab/probe.sh
# shellcheck source=qsim.sh
. /lab/qsim.sh
exit 0
