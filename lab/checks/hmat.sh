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
check_apply
check_run
check_show
check_bad_input
exit 0
