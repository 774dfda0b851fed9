# shellcheck shell=bash
# Memory cgroups for benchmarks: a limit that counts anonymous memory AND page cache, the same way
# for every process measured (cgroup v1 memory.limit_in_bytes, or v2 memory.max: both charge the
# page cache of the files a process reads and writes to its cgroup).
#
#   memcg_create NAME LIMIT_BYTES   create (or reset) the cgroup; prints its path
#   memcg_spawn NAME CMD...         start CMD in the cgroup in the background; sets $! as usual
#   memcg_peak NAME                 peak usage in bytes so far
#   memcg_usage NAME                current usage in bytes
#   memcg_remove NAME               remove it (its processes must have exited)
# Needs root. Writes only under the memory controller's own hierarchy, in cgroups named cxltier-bench-*.

memcg_root() {
    if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
        echo "v2 /sys/fs/cgroup"
    elif [ -d /sys/fs/cgroup/unified ] && [ -f /sys/fs/cgroup/unified/cgroup.controllers ] &&
        grep -qw memory /sys/fs/cgroup/unified/cgroup.controllers; then
        echo "v2 /sys/fs/cgroup/unified"
    elif [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
        echo "v1 /sys/fs/cgroup/memory"
    else
        echo "memcg: no memory cgroup controller is mounted (looked for cgroup v2 with the memory controller and v1 /sys/fs/cgroup/memory); mount one or run on a host with memory cgroups" >&2
        return 1
    fi
}

memcg_path() {
    local ver root
    read -r ver root < <(memcg_root) || return 1
    echo "$ver $root/cxltier-bench-$1"
}

memcg_create() {
    local name=$1 limit=$2 ver dir
    [ "$(id -u)" = 0 ] || { echo "memcg: creating a memory cgroup needs root" >&2; return 1; }
    read -r ver dir < <(memcg_path "$name") || return 1
    if [ -d "$dir" ] && ! rmdir "$dir" 2>/dev/null; then
        local left
        left=$(cat "$dir/cgroup.procs" 2>/dev/null | tr '\n' ' ')
        echo "memcg: $dir is still in use by process(es) $left(left over from an earlier run?); stop them (kill $left) and run again" >&2
        return 1
    fi
    mkdir -p "$dir"
    if [ "$ver" = v2 ]; then
        echo "$limit" >"$dir/memory.max"
        echo 0 >"$dir/memory.swap.max" 2>/dev/null || true
    else
        echo "$limit" >"$dir/memory.limit_in_bytes"
        # No swap here, but if there were, the limit would have to hold memory+swap too.
        echo "$limit" >"$dir/memory.memsw.limit_in_bytes" 2>/dev/null || true
    fi
    echo "$dir"
}

memcg_spawn() {
    local name=$1 ver dir
    shift
    read -r ver dir < <(memcg_path "$name") || return 1
    # The subshell joins the cgroup, then execs: the command and everything it starts are charged.
    (echo "$BASHPID" >"$dir/cgroup.procs" && exec "$@") &
}

memcg_peak() {
    local ver dir
    read -r ver dir < <(memcg_path "$1") || return 1
    if [ "$ver" = v2 ]; then cat "$dir/memory.peak" 2>/dev/null || cat "$dir/memory.current"; else cat "$dir/memory.max_usage_in_bytes"; fi
}

memcg_usage() {
    local ver dir
    read -r ver dir < <(memcg_path "$1") || return 1
    if [ "$ver" = v2 ]; then cat "$dir/memory.current"; else cat "$dir/memory.usage_in_bytes"; fi
}

memcg_remove() {
    local ver dir
    read -r ver dir < <(memcg_path "$1") || return 1
    [ -d "$dir" ] || return 0
    for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$dir" 2>/dev/null && return 0; sleep 0.2; done
    echo "memcg: could not remove $dir (processes still in it?)" >&2
}
