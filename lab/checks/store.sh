# Checks of the tiered object store inside the `cxl` guest (sourced by cxl.sh): `cxltier serve` with a
# CXL arena, loaded and read by `cxltier ycsb --data-integrity` (YCSB's deterministic values, every
# byte of every read checked). The arenas' pages are located by the server itself with move_pages(2)
# and reported in INFO. Emulator timings: behaviour only.
# shellcheck shell=dash

# The guest's loopback interface starts down.
ifconfig lo 127.0.0.1 up 2>/dev/null || ip link set lo up 2>/dev/null
S=127.0.0.1:6390
cxltier serve --bind "$S" --dram 8M --cxl 48M --ssd /root/nvme:128M --durability always \
    >"$T/serve.out" 2>"$T/serve.err" &
serve_pid=$!
up=0
for _ in $(seq 1 100); do
    if printf '*1\r\n$4\r\nPING\r\n' | nc -w 1 127.0.0.1 6390 2>/dev/null | grep -q PONG; then up=1; break; fi
    sleep 0.2
done
verdict store-serve-starts "$(brief "$T/serve.err")" [ "$up" = 1 ]

capture ycsbload cxltier ycsb load --records 10000 --addr "$S" --data-integrity --json
verdict store-ycsb-load "exit $rc: $(grep -E '"(operations|errors)"' "$T/ycsbload.out" | tr -d ' \n') $(brief "$T/ycsbload.err")" \
    sh -c "test $rc = 0 && grep -q '\"operations\": 10000' '$T/ycsbload.out' && grep -q '\"errors\": 0' '$T/ycsbload.out'"
capture ycsbrun cxltier ycsb run --workload c --records 10000 --ops 3000 --addr "$S" --data-integrity --json
verdict store-ycsb-reads-correct-data "exit $rc: $(grep -E '"(operations|errors|verify_errors)"' "$T/ycsbrun.out" | tr -d ' \n') $(brief "$T/ycsbrun.err")" \
    sh -c "test $rc = 0 && grep -q '\"operations\": 3000' '$T/ycsbrun.out' && grep -q '\"verify_errors\": 0' '$T/ycsbrun.out' && grep -q '\"errors\": 0' '$T/ycsbrun.out'"

printf '*2\r\n$4\r\nINFO\r\n$5\r\ntiers\r\n' | nc -w 2 127.0.0.1 6390 | tr -d '\r' >"$T/info.out"
info() { sed -n "s/^$1://p" "$T/info.out"; }
verdict store-cxl-arena-on-node1 "tier_cxl_node $(info tier_cxl_node), pages on $(info tier_cxl_pages_on)" \
    sh -c "test '$(info tier_cxl_node)' = 1 && echo '$(info tier_cxl_pages_on)' | grep -Eq '^node1=[1-9][0-9]*$'"
verdict store-dram-arena-on-node0 "tier_dram_node $(info tier_dram_node), pages on $(info tier_dram_pages_on)" \
    sh -c "test '$(info tier_dram_node)' = 0 && echo '$(info tier_dram_pages_on)' | grep -Eq '^node0=[1-9][0-9]*$'"
verdict store-objects-in-cxl "dram $(info tier_dram_objects) cxl $(info tier_cxl_objects) nvme $(info tier_nvme_objects) objects" \
    sh -c "test '$(info tier_cxl_objects)' -gt 0 && test '$(info tier_dram_objects)' -gt 0"
# The same arena check from outside the server: its resident memory per node (numa_maps).
capture storeshow cxltier show --pid "$serve_pid" --json
verdict store-show-sees-node1 "exit $rc, $(grep -A3 "\"bytes_per_node\"" "$T/storeshow.out" | head -4 | tr -d " \n")" sh -c "test $rc = 0 && grep -Eq '\"1\": [1-9][0-9]*' '$T/storeshow.out'"
kill "$serve_pid" 2>/dev/null
wait "$serve_pid" 2>/dev/null
