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
check_apply
check_run
check_show
check_bad_input
exit 0
