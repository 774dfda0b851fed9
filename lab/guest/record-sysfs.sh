#!/bin/sh
# shellcheck shell=dash
# Runs inside the lab guest (busybox sh): prints the parts of sysfs that cxltier's topology discovery
# reads, one entry a line, between the lines SYSFS-BEGIN and SYSFS-END, for lab/record-sysfs to
# rebuild on the host (sysfs reports every file as 4096 bytes, so archivers cannot copy it):
#   K <tab> kernel release
#   D <tab> path                        a directory
#   F <tab> path <tab> base64(content)  a readable regular file
#   L <tab> path <tab> target           a symlink, target exactly as the kernel made it
# Paths are relative to / (sys/..., proc/...). Unreadable and write-only files are skipped, and so
# are binary or device-control files (PCI config space, resources, CDAT, firmware upload).
set -u

tab=$(printf '\t')
seen=/tmp/record-sysfs.seen
: >"$seen"

emit_file() {
    _p=$1
    _c=$( { base64 -w 0 <"/$_p"; } 2>/dev/null) || return 0
    printf 'F%s%s%s%s\n' "$tab" "$_p" "$tab" "$_c"
}

emit_link() {
    printf 'L%s%s%s%s\n' "$tab" "$1" "$tab" "$(readlink "/$1")"
}

emit_parents() {
    printf 'D%s%s\n' "$tab" "$(dirname "$1")"
}

# Record directory $1 (relative to /): its files, its symlinks, and its subdirectories down to depth
# $2. Symlinks are recorded, never followed.
rec_dir() {
    local _d _e _n _p
    _d=$1
    [ -d "/$_d" ] || return 0
    if grep -qxF "$_d" "$seen"; then
        return 0
    fi
    echo "$_d" >>"$seen"
    printf 'D%s%s\n' "$tab" "$_d"
    for _e in "/$_d"/* "/$_d"/.[!.]*; do
        [ -e "$_e" ] || [ -L "$_e" ] || continue
        _n=${_e##*/}
        _p=${_e#/}
        # A CXL region's resource is its host physical address (text); PCI resources are binary.
        case $_p in
            */region[0-9]*/resource) [ -f "$_e" ] && emit_file "$_p"; continue ;;
        esac
        case $_n in
            config | rom | CDAT | resource | resource[0-9]* | firmware | firmware_node | power | \
                remove | rescan | reset | trigger_poison_list | compaction | new_id | remove_id | \
                bind | unbind | msi_irqs | label_storage_size | vmstat | stat)
                continue ;;
        esac
        if [ -L "$_e" ]; then
            emit_link "$_p"
        elif [ -d "$_e" ]; then
            if [ "$2" -gt 0 ]; then
                rec_dir "$_p" $(($2 - 1))
            fi
        elif [ -f "$_e" ]; then
            emit_file "$_p"
        fi
    done
}

# A symlink (e.g. /sys/bus/cxl/devices/mem0), then the directory it resolves to.
rec_link() {
    local _t
    [ -L "/$1" ] || return 0
    emit_parents "$1"
    emit_link "$1"
    _t=$(readlink -f "/$1") || return 0
    rec_dir "${_t#/}" "$2"
}

# Single files (with their parent directory).
rec_files() {
    for _f in "$@"; do
        if [ -f "/$_f" ]; then
            emit_parents "$_f"
            emit_file "$_f"
        fi
    done
}

echo "SYSFS-BEGIN"
printf 'K%s%s\n' "$tab" "$(uname -r)"

# NUMA nodes, their access classes, memory-side caches and links, and the memory blocks.
rec_dir sys/devices/system/node 4
rec_files sys/devices/system/memory/block_size_bytes sys/devices/system/memory/auto_online_blocks
for m in /sys/devices/system/memory/memory[0-9]*; do
    [ -d "$m" ] || continue
    p=${m#/}
    printf 'D%s%s\n' "$tab" "$p"
    for f in state online phys_index phys_device valid_zones removable; do
        [ -f "$m/$f" ] && emit_file "$p/$f"
    done
done
rec_files sys/devices/system/cpu/online sys/devices/system/cpu/possible sys/devices/system/cpu/present

# Kernel memory tiers, weighted interleave, demotion, transparent huge pages, DAMON.
rec_dir sys/devices/virtual/memory_tiering 2
rec_dir sys/kernel/mm/mempolicy 2
rec_dir sys/kernel/mm/numa 1
rec_dir sys/kernel/mm/transparent_hugepage 0
rec_dir sys/kernel/mm/damon 2
rec_files proc/sys/kernel/numa_balancing
rec_files proc/vmstat

# CXL: every device on the cxl bus (root, ports, decoders, memdevs, regions, dax regions), the
# PCI function each memdev sits on (its numa_node and identity only), and the dax devices.
for d in /sys/bus/cxl/devices/*; do
    [ -L "$d" ] || continue
    rec_link "${d#/}" 6
    t=$(readlink -f "$d")
    case ${d##*/} in
        mem[0-9]*)
            pci=$(dirname "$t")
            rec_files "${pci#/}/numa_node" "${pci#/}/vendor" "${pci#/}/device" "${pci#/}/class" \
                "${pci#/}/local_cpulist" "${pci#/}/current_link_speed" "${pci#/}/current_link_width" \
                "${pci#/}/aer_dev_correctable" "${pci#/}/aer_dev_fatal" "${pci#/}/aer_dev_nonfatal"
            # Write-only: recorded as an empty file, so that its presence (the device takes Get
            # Poison List) is kept.
            if [ -e "$t/trigger_poison_list" ]; then
                printf 'F%s%s%s\n' "$tab" "${t#/}/trigger_poison_list" "$tab"
            fi
            ;;
    esac
done
for d in /sys/bus/dax/devices/*; do
    [ -L "$d" ] || continue
    rec_link "${d#/}" 2
done

# NVMe controllers and their namespaces.
for c in /sys/class/nvme/* /sys/class/block/nvme*; do
    [ -L "$c" ] || continue
    rec_link "${c#/}" 1
done
echo "SYSFS-END"
