# shellcheck shell=dash
# `cxltier qsim` inside the `cxl` lab guest: the state vector's chunks are bound per chunk over
# DRAM (node0) and the CXL region (node1) by --interleave weights, and move_pages finds every page
# where it was bound; the simulation's amplitudes are right whatever the placement. The guest's
# root file system is RAM (no O_DIRECT), so spilling to NVMe is tested on the host, not here.
#
# Sourced after lib.sh by cxl.sh, or run on its own (`sh /lab/qsim.sh`); prints one line per
# check:  CHECK <name> PASS|FAIL @<uptime>s <detail>

# Run on its own, it brings the shared check functions itself.
if ! command -v verdict >/dev/null 2>&1; then
    # shellcheck source=lib.sh
    . /lab/lib.sh
fi

check_qsim() {
    # A 16-qubit GHZ state: 1 MiB in 256 chunks of one 4 KiB page each.
    q=$T/ghz16.qasm
    {
        printf 'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[16];\nh q[0];\n'
        i=1
        while [ $i -lt 16 ]; do
            printf 'cx q[%d],q[%d];\n' $((i - 1)) $i
            i=$((i + 1))
        done
    } >"$q"

    capture qsim-31 cxltier qsim "$q" --interleave 3:1 --amplitudes 0,65535,1 --threads 2 --json
    verdict qsim-interleave-completes "exit $rc: $(brief "$T/qsim-31.err")" [ "$rc" = 0 ]
    j=$(tr -d ' \n' <"$T/qsim-31.out")
    ppn=$(echo "$j" | sed -n 's/.*"pages_per_node":\({[^}]*}\).*/\1/p')
    verdict qsim-chunks-3-to-1 "pages per node: $ppn (want {\"0\":192,\"1\":64})" \
        [ "$ppn" = '{"0":192,"1":64}' ]
    amp=$(echo "$j" | sed -n 's/.*"amplitudes":{"0":\[\([^]]*\)\],"1":\[\([^]]*\)\],"65535":\[\([^]]*\)\]}.*/\1 \2 \3/p')
    verdict qsim-ghz-amplitudes "amplitudes 0, 1, 65535: $amp" \
        awk -v a="$amp" 'BEGIN { split(a, x, "[ ,]"); r = 0.70710678118654; d0 = x[1] - r; d2 = x[5] - r;
            exit !(d0 < 1e-12 && d0 > -1e-12 && x[3] == 0 && d2 < 1e-12 && d2 > -1e-12) }'

    # Every chunk on the CXL node alone.
    capture qsim-cxl cxltier qsim "$q" --interleave 1=1 --json
    ppn=$(tr -d ' \n' <"$T/qsim-cxl.out" | sed -n 's/.*"pages_per_node":\({[^}]*}\).*/\1/p')
    verdict qsim-chunks-on-cxl "exit $rc, pages per node: $ppn (want {\"1\":256})" \
        [ "$rc" = 0 -a "$ppn" = '{"1":256}' ]

    # Bad input: an unknown node is refused before anything is allocated.
    capture qsim-bad-node cxltier qsim "$q" --interleave 7=1
    verdict qsim-unknown-node "exit $rc: $(brief "$T/qsim-bad-node.err")" [ "$rc" = 2 ]
}

check_qsim
