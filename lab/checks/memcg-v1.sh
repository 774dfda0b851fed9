# Checks inside the `hmat` guest booted on bookworm's 6.1 kernel (LAB_KERNEL=6.1): the last Debian
# kernel with the cgroup v1 memory controller. It has neither DAMON nor idle-page tracking, so
# `cxltier tierd` itself refuses to run on it, naming what is missing; the cgroup v1 limits it
# would set are checked on this real kernel by the library's own test (`/lab/tierd-tests`, the
# static test binary of cxltier-tierd that the lab suite builds): memory.limit_in_bytes = the
# budget (the kernel reclaims the workload into swap), the OOM killer off, memory and swap limited
# together, and every previous value back afterwards; the workload's memory is intact.
# shellcheck shell=dash
# shellcheck source=lib.sh
. /lab/lib.sh
# shellcheck source=tierd.sh
. /lab/tierd.sh

capture version cxltier --version
verdict cxltier-runs "$(brief "$T/version.out")" [ "$rc" = 0 ]
verdict kernel-6.1 "$(uname -r)" sh -c 'uname -r | grep -q "^6\.1\."'

mkdir -p /sys/fs/cgroup
mount -t tmpfs cgroup_root /sys/fs/cgroup
mkdir -p /sys/fs/cgroup/memory
mount -t cgroup -o memory memory /sys/fs/cgroup/memory 2>"$T/mount.err"
verdict memcg-v1-mounted "$(grep ' /sys/fs/cgroup/memory ' /proc/mounts) $(brief "$T/mount.err")" \
    grep -q ' /sys/fs/cgroup/memory cgroup .*memory' /proc/mounts

mcg=/sys/fs/cgroup/memory/tierd-v1
mkdir -p "$mcg"
swaps_before=$(cat /proc/swaps)
limit_before=$(cat "$mcg/memory.limit_in_bytes")
oom_before=$(sed -n 's/^oom_kill_disable //p' "$mcg/memory.oom_control")
memsw_before=$(cat "$mcg/memory.memsw.limit_in_bytes" 2>/dev/null || echo none)
mem_target tierd-v1 "$mcg"
usage_start=$(cat "$mcg/memory.usage_in_bytes")
verdict memcg-v1-target-charged "usage ${usage_start} bytes, procs $(tr '\n' ' ' <"$mcg/cgroup.procs")" \
    sh -c "[ ${usage_start:-0} -gt 33554432 ] && grep -qx '$target' '$mcg/cgroup.procs'"

# tierd on this kernel: refused with the missing access sources named, nothing written.
capture tierd-v1 cxltier tierd --cgroup "$mcg" --dram-budget 8M --cxl-budget 4M --nvme /dev/vda \
    --interval 500 --duration 2 --json
verdict memcg-v1-tierd-names-what-is-missing \
    "exit $rc, limit $(cat "$mcg/memory.limit_in_bytes"); $(cat "$T/tierd-v1.out" "$T/tierd-v1.err" | grep -v warning | tr '\n' ' ' | cut -c1-240)" \
    sh -c "[ $rc = 4 ] && cat '$T/tierd-v1.out' '$T/tierd-v1.err' | grep -q 'CONFIG_DAMON_SYSFS.*CONFIG_IDLE_PAGE_TRACKING' && [ \"\$(cat $mcg/memory.limit_in_bytes)\" = '$limit_before' ] && [ '$swaps_before' = \"\$(cat /proc/swaps)\" ]"

# The v1 limits on this kernel, with swap on the scratch disk.
mkswap /dev/vda >/dev/null && swapon /dev/vda
if [ -x /lab/tierd-tests ]; then
    CXLTIER_V1_CGROUP=$mcg /lab/tierd-tests --ignored --exact memcg::tests::v1_limits_on_a_real_kernel \
        --nocapture >"$T/v1-test.out" 2>&1
    rc=$?
    verdict memcg-v1-limits-on-a-real-kernel \
        "exit $rc: $(grep -o 'v1 limits set:.*' "$T/v1-test.out" | head -1) $(grep -E 'panicked|test result' "$T/v1-test.out" | tr '\n' ' ' | cut -c1-240)" \
        sh -c "[ $rc = 0 ] && grep -q 'test result: ok. 1 passed' '$T/v1-test.out'"
else
    fail memcg-v1-limits-on-a-real-kernel "no /lab/tierd-tests: the lab suite builds it (cargo test -p cxltier-lab)"
fi
swap_kb=$(vm_swap_kb "$target")
verdict memcg-v1-reclaimed-into-swap "VmSwap of the workload ${swap_kb:-?} kB after the limit" \
    sh -c "[ \"${swap_kb:-0}\" -gt 0 ]"
verdict memcg-v1-limits-written-back \
    "limit_in_bytes $(cat "$mcg/memory.limit_in_bytes") (was $limit_before), oom_kill_disable $(sed -n 's/^oom_kill_disable //p' "$mcg/memory.oom_control") (was $oom_before), memsw $(cat "$mcg/memory.memsw.limit_in_bytes" 2>/dev/null || echo none) (was $memsw_before)" \
    sh -c "[ \"\$(cat $mcg/memory.limit_in_bytes)\" = '$limit_before' ] && [ \"\$(sed -n 's/^oom_kill_disable //p' $mcg/memory.oom_control)\" = '$oom_before' ] && [ \"\$(cat $mcg/memory.memsw.limit_in_bytes 2>/dev/null || echo none)\" = '$memsw_before' ]"
swapoff /dev/vda
verdict memcg-v1-target-still-running "pid $target, VmSwap now $(vm_swap_kb "$target") kB" kill -0 "$target"
# SIGTERM ends the workload as its --duration would: every page checked, exit 0 when intact.
kill -TERM "$target_runner" 2>/dev/null
wait "$target_runner"
trc=$?
verdict memcg-v1-workload-intact "exit $trc: $(tail -1 "$T/tierd-v1-target.out" | cut -c1-200) $(brief "$T/tierd-v1-target.err")" [ "$trc" = 0 ]
rmdir "$mcg" 2>/dev/null
exit 0
