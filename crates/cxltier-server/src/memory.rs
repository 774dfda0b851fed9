//! The memory figures INFO memory, CONFIG GET maxmemory, the OOM refusal, ROLE's replica
//! report and the metrics share, from the store's statistics.

/// What they report, from the memory budget: `maxmemory` is
/// the budget (`--dram` plus the CXL tier's capacity), `used_memory` the pages the memory
/// tiers' arenas hold resident plus the key index, which the store keeps inside the DRAM budget
/// (the index's bytes come out of it, and an arena grows only while the budget has room).
pub fn memory_figures(st: &cxltier_store::StoreStats) -> (u64, u64) {
    let memory = st.tiers.iter().filter(|t| t.tier != "nvme");
    // The DRAM tier's capacity is what the budget leaves objects after the index.
    let max: u64 = memory.clone().map(|t| t.capacity_bytes).sum::<u64>() + st.index_bytes;
    let used: u64 = memory.map(|t| t.resident_bytes).sum::<u64>() + st.index_bytes;
    (used.min(max), max)
}
