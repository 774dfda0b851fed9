# shellcheck shell=dash
# `cxltier probe` inside the `cxl` lab guest (busybox sh, root, 2 vCPUs under TCG): probing DRAM
# (node0) and the CXL region (node1) completes, node1 is measured on its own with its pages verified
# on node1, a buffer interleaved 3:1 over both lands in that ratio, and the written profile is
# accepted by `cxltier plan --profile`. Every figure taken here is an EMULATOR TIMING: it checks
# behaviour, never performance.
#
# Sourced after lib.sh by the lab suite, or run on its own (`sh /lab/probe.sh`); prints one line
# per check:  CHECK <name> PASS|FAIL @<uptime>s <detail>

# Run on its own, it brings the shared check functions itself.
if ! command -v verdict >/dev/null 2>&1; then
    # shellcheck source=lib.sh
    . /lab/lib.sh
fi

# The JSON on one line without spaces, so that fields can be matched with grep.
flat() { tr -d ' \n' <"$1"; }

check_probe() {
    # Small buffers and short runs: every access to CXL memory is emulated one by one under TCG (8 MiB
    # takes 20 s a probe, 32 MiB 70 s). The probe warns that 8 MiB is under 4x the cache; the checks
    # here are about placement and the profile, not the figures.
    capture probe cxltier probe --nodes 0,1 --buffer 8M --duration 0.2 --runs 3 --mixes R,2:1,2:1nt \
        --out "$T/probe.toml" --json
    # The error, when there is one, is stderr's last line (warnings come before it).
    verdict probe-nodes-0-1-completes "exit $rc (emulator timings): $(tail -n 1 "$T/probe.err" | cut -c1-300)" [ "$rc" = 0 ]
    flat "$T/probe.out" >"$T/probe.flat"
    j=$(cat "$T/probe.flat")
    verdict probe-json-reports-node1 "node1 target in the JSON" \
        grep -q '"name":"node1","policy":"bind","nodes":\[1\]' "$T/probe.flat"
    # Both of node1's buffers (chase and traffic): every checked page on node 1, verified.
    n1=${j#*\"name\":\"node1\"}
    n1=${n1%%\"idle_latency\"*}
    placed=$(echo "$n1" | grep -o '"verified":true,"huge_page_bytes"' | wc -l)
    only1=$(echo "$n1" | grep -o '"pages_per_node":{"1":[0-9]*}' | wc -l)
    verdict probe-node1-pages-on-node1 "$only1 of 2 buffers entirely on node 1, $placed verified" \
        [ "$only1" = 2 -a "$placed" = 2 ]
    lat=$(echo "$n1" | sed -n 's/.*"kind":"\([a-z-]*\)".*/\1/p')
    verdict probe-node1-is-cxl "node1 probed as kind '$lat'" [ "$lat" = cxl ]

    capture probe-plan cxltier plan --profile "$T/probe.toml" --mix R --json
    verdict probe-profile-accepted-by-plan "exit $rc: $(brief "$T/probe-plan.err")" [ "$rc" = 0 ]
    # A profile lists its tiers fastest first by the idle latency measured, and under TCG the
    # emulated CXL node may measure faster than DRAM: either order is the two tiers.
    verdict probe-profile-two-tiers "plan recommends weights over dram and cxl: $(brief "$T/probe-plan.out")" \
        sh -c "tr -d ' \n' <'$T/probe-plan.out' | grep -Eq '\"tiers\":\\[\"(dram\",\"cxl|cxl\",\"dram)\"\\]'"
    capture probe-topo cxltier topo --profile "$T/probe.toml"
    verdict probe-profile-accepted-by-topo "exit $rc: $(brief "$T/probe-topo.err")" [ "$rc" = 0 ]

    # An interleaved buffer (weights 3:1, set for its allocation and restored) with loaded-latency
    # curves, so DRAM alone and DRAM+CXL land on one plot.
    before=$(cat /sys/kernel/mm/mempolicy/weighted_interleave/node0 /sys/kernel/mm/mempolicy/weighted_interleave/node1 | tr '\n' ' ')
    capture probe-wi cxltier probe --nodes 0,1 --weights 3:1 --buffer 8M --duration 0.2 --runs 3 \
        --mixes R --loaded-latency --svg "$T/probe-svg" --json
    verdict probe-interleaved-completes "exit $rc: $(brief "$T/probe-wi.err")" [ "$rc" = 0 ]
    after=$(cat /sys/kernel/mm/mempolicy/weighted_interleave/node0 /sys/kernel/mm/mempolicy/weighted_interleave/node1 | tr '\n' ' ')
    verdict probe-weights-restored "table before '$before', after '$after'" [ "$before" = "$after" ]
    w=$(flat "$T/probe-wi.out")
    wi=${w#*\"name\":\"node0+node1@3:1\"}
    share=${wi#*\"share_per_node\":\{\"0\":}
    share=${share%%[,\}]*}
    verdict probe-interleaved-3-to-1 "node0 share of the interleaved chase buffer: $share (want 0.75 +- 0.05)" \
        awk -v s="${share:-0}" 'BEGIN { exit !(s >= 0.70 && s <= 0.80) }'
    verdict probe-loaded-latency-plot "$(ls "$T/probe-svg" 2>/dev/null | tr '\n' ' ')" \
        grep -q '<svg' "$T/probe-svg/loaded-latency-R.svg"

    # Bad input, refused before measuring.
    capture probe-too-big cxltier probe --nodes 1 --buffer 1G
    verdict probe-buffer-too-big "exit $rc: $(brief "$T/probe-too-big.err")" \
        sh -c "[ $rc = 2 ] && grep -q 'free' '$T/probe-too-big.err'"
}

check_probe
