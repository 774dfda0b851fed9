//! The kernel's weighted-interleave table (Linux 6.9+).
//!
//! `sys/kernel/mm/mempolicy/weighted_interleave/nodeN` holds the weight (1..=255) that
//! `MPOL_WEIGHTED_INTERLEAVE` gives node N: one global table for every process. Linux 6.16 added
//! `auto`: `true` while the kernel derives the weights from the firmware's bandwidth figures, `false`
//! once someone writes a weight. Some kernels (6.18 built with a compiler that treats `auto` as a
//! keyword) expose that switch as `__auto_type`, because the attribute's name went through a macro;
//! both names are read.

use serde::Serialize;
use std::collections::BTreeMap;

use crate::sysfs::{parse_bool, Sysfs};

pub(crate) const WI_DIR: &str = "sys/kernel/mm/mempolicy/weighted_interleave";

/// The names the `auto` switch goes by, in order of preference.
const AUTO_NAMES: [&str; 2] = ["auto", "__auto_type"];

/// Weighted-interleave support and state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WeightedInterleave {
    /// The kernel has weighted interleave (the sysfs directory exists).
    pub supported: bool,
    /// `Some(true)` when the kernel sets the weights from firmware bandwidth, `Some(false)` when they
    /// are set by hand; `None` on kernels without the switch (before 6.16).
    pub auto: Option<bool>,
    /// The file holding the switch (`auto`, or `__auto_type` on some 6.18 kernels), relative to the
    /// weighted-interleave directory; whoever writes it should use this name.
    pub auto_file: Option<String>,
    /// Current weight per node.
    pub weights: BTreeMap<u32, u8>,
}

impl WeightedInterleave {
    /// The state in words: supported or not, automatic or manual weights, and the weights.
    pub fn summary(&self) -> String {
        if !self.supported {
            return "not supported by this kernel (needs Linux 6.9 or later)".to_string();
        }
        let auto = match self.auto {
            Some(true) => "auto (the kernel sets weights from firmware bandwidth)",
            Some(false) => "manual",
            None => "manual (this kernel has no auto mode)",
        };
        let weights: Vec<String> = self
            .weights
            .iter()
            .map(|(n, w)| format!("node{n}={w}"))
            .collect();
        let weights = if weights.is_empty() {
            "none".to_string()
        } else {
            weights.join(" ")
        };
        format!("supported, {auto}; weights: {weights}")
    }

    /// The weight of `node`, if the kernel has one for it.
    pub fn weight(&self, node: u32) -> Option<u8> {
        self.weights.get(&node).copied()
    }

    /// Weights for `nodes` in that order; `None` if any node has no weight file.
    pub fn weights_for(&self, nodes: &[u32]) -> Option<Vec<u8>> {
        nodes.iter().map(|n| self.weight(*n)).collect()
    }

    /// The sysfs path (relative to the root) of a node's weight.
    pub fn weight_path(node: u32) -> String {
        format!("{WI_DIR}/node{node}")
    }

    /// The directory of the table, relative to the root.
    pub fn dir() -> &'static str {
        WI_DIR
    }
}

pub(crate) fn read(fs: &Sysfs, warnings: &mut Vec<String>) -> WeightedInterleave {
    if !fs.is_dir(WI_DIR) {
        return WeightedInterleave::default();
    }
    let mut wi = WeightedInterleave {
        supported: true,
        ..Default::default()
    };
    for name in AUTO_NAMES {
        let rel = format!("{WI_DIR}/{name}");
        match fs.parse_opt(&rel, "true or false", parse_bool) {
            Ok(Some(v)) => {
                wi.auto = Some(v);
                wi.auto_file = Some(name.to_string());
                break;
            }
            Ok(None) => {}
            Err(e) => {
                warnings.push(format!("{e}; auto mode unknown"));
                wi.auto_file = Some(name.to_string());
                break;
            }
        }
    }
    match fs.numbered(WI_DIR, "node") {
        Ok(entries) => {
            for (id, name) in entries {
                let rel = format!("{WI_DIR}/{name}");
                // Weights are 1..=255 (the kernel rejects anything else on write).
                match fs.parse_opt(&rel, "a weight from 1 to 255", |t| {
                    t.parse::<u8>().ok().filter(|&w| w > 0)
                }) {
                    Ok(Some(w)) => {
                        wi.weights.insert(id, w);
                    }
                    Ok(None) => {}
                    Err(e) => warnings.push(format!("{e}; ignoring node {id}'s weight")),
                }
            }
        }
        Err(e) => warnings.push(e.to_string()),
    }
    wi
}
