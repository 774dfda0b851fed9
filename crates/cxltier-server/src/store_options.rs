//! The store as the server serves it: `cxltier serve`'s store flags in one place, opened the way
//! the event loop needs it, so that the CLI and the server's tests open the same store.

use cxltier_store::{Durability, SsdSpec, Store, StoreBuilder, StoreError};

/// What `cxltier serve` opens: the memory tiers' budgets and nodes, the NVMe tier, durability
/// and the limits of one object. `None` leaves a setting to the store (nodes from the
/// machine's topology, the device's queue depth).
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// `--dram`, bytes.
    pub dram: u64,
    /// `--cxl`, bytes (0: no CXL tier).
    pub cxl: u64,
    /// `--ssd PATH[:SIZE]`.
    pub ssd: Option<SsdSpec>,
    /// `--durability`; without it everysec with an NVMe tier (a crash loses at most a second of
    /// writes), none without one (nothing outlives the process anyway).
    pub durability: Option<Durability>,
    /// `--max-object`, bytes.
    pub max_object: usize,
    pub nvme_queue_depth: Option<u32>,
    pub recover_anyway: bool,
    pub dram_node: Option<u32>,
    pub cxl_node: Option<u32>,
    /// The machine, which `--dram-node`/`--cxl-node` are checked against and the default nodes
    /// come from; without it (no NUMA in the kernel) node 0 alone.
    pub topology: Option<cxltier_topo::Topology>,
}

impl StoreOptions {
    /// The durability the store runs with.
    pub fn durability(&self) -> Durability {
        self.durability.unwrap_or(if self.ssd.is_some() {
            Durability::EverySec
        } else {
            Durability::None
        })
    }

    /// Open (or recover) the store.
    pub fn open(self) -> Result<Store, StoreError> {
        let mut builder = StoreBuilder::new()
            .dram(self.dram)
            .cxl(self.cxl)
            .durability(self.durability())
            .max_object(self.max_object)
            .recover_anyway(self.recover_anyway)
            // The server ends every batch (and commits it): a collection changed by many
            // commands of one batch is written once.
            .collection_write_back(true)
            .proc_root("/proc");
        if let Some(depth) = self.nvme_queue_depth {
            builder = builder.nvme_queue_depth(depth);
        }
        if let Some(topo) = self.topology {
            builder = builder.topology(topo);
        }
        if let Some(s) = self.ssd {
            builder = builder.ssd(s);
        }
        if let Some(n) = self.dram_node {
            builder = builder.dram_node(n);
        }
        if let Some(n) = self.cxl_node {
            builder = builder.cxl_node(n);
        }
        builder.build()
    }
}
