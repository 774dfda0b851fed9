# shellcheck shell=dash
# Functions and checks both lab topologies share; sourced by hmat.sh and cxl.sh inside the guest
# (busybox sh, as root). Every check prints exactly one line
#   CHECK <name> PASS|FAIL @<uptime>s <detail>
# and raw outputs that the host checks (JSON) go between BEGIN-DATA <name> and END-DATA <name>.
# The lab suite (lab/tests/) knows the full list of check names and fails on any FAIL or on any check
# that did not report.

WI=/sys/kernel/mm/mempolicy/weighted_interleave
T=/tmp/checks
mkdir -p "$T"

# Each result carries the guest's uptime when it was decided ("@83.2s"), so a slow check shows in
# the suite's output as the gap to the one before it.
at() { echo "@$(cut -d' ' -f1 /proc/uptime)s"; }
pass() { echo "CHECK $1 PASS $(at) ${2:-}"; }
fail() { echo "CHECK $1 FAIL $(at) ${2:-}"; }

# verdict NAME DETAIL COMMAND...: PASS when COMMAND succeeds.
verdict() {
    _name=$1
    _detail=$2
    shift 2
    if "$@"; then pass "$_name" "$_detail"; else fail "$_name" "$_detail"; fi
}

# capture KEY COMMAND...: run COMMAND; stdout in $T/KEY.out, stderr in $T/KEY.err, status in $rc.
capture() {
    _key=$1
    shift
    "$@" >"$T/$_key.out" 2>"$T/$_key.err"
    rc=$?
}

# The first 160 characters of a file on one line.
brief() { tr '\n\t' '  ' <"$1" | cut -c1-160; }

# data NAME FILE: send FILE to the host as a data block.
data() {
    echo "BEGIN-DATA $1"
    cat "$2"
    echo
    echo "END-DATA $1"
}

# The weighted-interleave table as "node0=W node1=W".
wi_table() {
    for _f in "$WI"/node*; do
        [ -f "$_f" ] && printf '%s=%s ' "${_f##*/}" "$(cat "$_f")"
    done
}

# set_wi W0 W1: write the table directly (for setting up the next check, not a check itself).
set_wi() {
    echo "$1" >"$WI/node0"
    echo "$2" >"$WI/node1"
}

# A clean failure: exit status EXPECT, a message matching the extended regular expression WORD on
# stderr, no panic.
# bad_input NAME EXPECT WORD COMMAND...
bad_input() {
    _name=$1
    _expect=$2
    _word=$3
    shift 3
    capture "$_name" "$@"
    _msg=$(brief "$T/$_name.err")
    if [ "$rc" != "$_expect" ]; then
        fail "$_name" "'$*' exited $rc, want $_expect: $_msg"
    elif grep -q 'panicked' "$T/$_name.err"; then
        fail "$_name" "'$*' panicked: $_msg"
    elif ! grep -Eqi -- "$_word" "$T/$_name.err"; then
        fail "$_name" "'$*' message does not name '$_word': $_msg"
    else
        pass "$_name" "exit $rc: $_msg"
    fi
}

check_basics() {
    capture version cxltier --version
    verdict cxltier-runs "$(brief "$T/version.out")" [ "$rc" = 0 ]
    verdict kernel-6.12 "$(uname -r)" sh -c 'uname -r | grep -q "^6\.12\."'
    verdict node1-cpuless "node1 cpulist '$(cat /sys/devices/system/node/node1/cpulist)'" \
        test -z "$(tr -d ' \n' </sys/devices/system/node/node1/cpulist)"
    verdict node1-has-memory "has_memory $(cat /sys/devices/system/node/has_memory)" \
        grep -qx '0-1' /sys/devices/system/node/has_memory
    verdict weighted-interleave-sysfs "$(wi_table)" test -f "$WI/node0" -a -f "$WI/node1"
}

check_topo() {
    capture topo cxltier topo
    verdict topo-runs "exit $rc: $(brief "$T/topo.err")" [ "$rc" = 0 ]
    capture topo-json cxltier topo --json
    verdict topo-json-runs "exit $rc: $(brief "$T/topo-json.err")" [ "$rc" = 0 ]
    data topo-json "$T/topo-json.out"
    capture numactl numactl -H
    data numactl-H "$T/numactl.out"
}

check_apply() {
    set_wi 1 1
    capture apply-dry cxltier apply --weights node0=3,node1=1 --dry-run
    after=$(wi_table)
    if [ "$rc" = 0 ] && [ "$after" = "node0=1 node1=1 " ]; then
        pass apply-dry-run-unchanged "exit 0, table still $after"
    else
        fail apply-dry-run-unchanged "exit $rc, table $after: $(brief "$T/apply-dry.err")"
    fi
    verdict apply-dry-run-prints "$(brief "$T/apply-dry.out")" grep -q 3 "$T/apply-dry.out"

    capture apply cxltier apply --weights node0=3,node1=1
    after=$(wi_table)
    if [ "$rc" = 0 ] && [ "$after" = "node0=3 node1=1 " ]; then
        pass apply-changes-table "exit 0, table now $after"
    else
        fail apply-changes-table "exit $rc, table $after: $(brief "$T/apply.err")"
    fi
    verdict apply-prints-old-and-new "$(brief "$T/apply.out")" \
        sh -c "grep -q 1 '$T/apply.out' && grep -q 3 '$T/apply.out'"

    # Bad input changes nothing.
    set_wi 2 1
    bad_input apply-unknown-node 2 "node ?7" cxltier apply --weights node7=1
    verdict apply-unknown-node-unchanged "table $(wi_table)" [ "$(wi_table)" = "node0=2 node1=1 " ]
    bad_input apply-zero-weight 2 weight cxltier apply --weights node0=0,node1=1
    verdict apply-zero-weight-unchanged "table $(wi_table)" [ "$(wi_table)" = "node0=2 node1=1 " ]
    set_wi 1 1
}

# Placement: where touched pages land under each policy (judged on the host from the JSON). The
# sizes are small where the issue does not fix them: on topology cxl every access to CXL memory is
# emulated one by one by QEMU, so touching it is slow.
check_run() {
    set_wi 1 1
    capture run-weights cxltier run --weights 3:1 -- cxltier touch 64M --json
    verdict run-weights-runs "exit $rc: $(brief "$T/run-weights.err")" [ "$rc" = 0 ]
    data touch-weights-3-1 "$T/run-weights.out"
    set_wi 1 1
    capture run-interleave cxltier run --interleave -- cxltier touch 16M --json
    verdict run-interleave-runs "exit $rc: $(brief "$T/run-interleave.err")" [ "$rc" = 0 ]
    data touch-interleave "$T/run-interleave.out"
    capture run-bind1 cxltier run --bind 1 -- cxltier touch 8M --json
    verdict run-bind-node1-runs "exit $rc: $(brief "$T/run-bind1.err")" [ "$rc" = 0 ]
    data touch-bind-1 "$T/run-bind1.out"
}

# show --pid of a process that holds 16 MiB on node1.
check_show() {
    rm -f "$T/held.pid" "$T/held.out"
    cxltier run --bind 1 -- sh -c "echo \$\$ >$T/held.pid; exec cxltier touch 16M --json --hold 60" \
        >"$T/held.out" 2>"$T/held.err" &
    runner=$!
    n=0
    while [ "$n" -lt 300 ] && ! [ -s "$T/held.out" ] && kill -0 "$runner" 2>/dev/null; do
        usleep 100000
        n=$((n + 1))
    done
    pid=$(cat "$T/held.pid" 2>/dev/null)
    if [ -z "$pid" ] || ! [ -s "$T/held.out" ]; then
        fail show-pid-runs "the held process did not start or report: $(brief "$T/held.err")"
        echo "{}" >"$T/show.out"
    else
        capture show cxltier show --pid "$pid" --json
        verdict show-pid-runs "pid $pid, exit $rc: $(brief "$T/show.err")" [ "$rc" = 0 ]
    fi
    data show-bind-1 "$T/show.out"
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    wait "$runner" 2>/dev/null
}

check_bad_input() {
    bad_input touch-bad-size 2 banana cxltier touch banana
    bad_input run-bind-unknown-node 2 "node ?9" cxltier run --bind 9 -- true
}
