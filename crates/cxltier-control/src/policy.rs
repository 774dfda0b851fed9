//! Memory-policy requests, resolved against the machine's topology.
//!
//! A request names a policy the way people write it (`--weights 3:1`, `--interleave`,
//! `--bind 0-1`, `--preferred 1`); [`resolve`] checks every node exists and has memory, fills in
//! defaults (all memory nodes, in tier order, fastest first) and, for weighted interleave, pairs each
//! node with its weight.

use cxltier_sys::{Mode, NodeMask, Policy};
use cxltier_topo::Topology;
use serde::Serialize;

use crate::weights::WeightsSpec;
use crate::ControlError;

/// A policy as requested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySpec {
    /// Weighted interleave with these weights; over `nodes`, or by default over every memory node in
    /// tier order.
    WeightedInterleave {
        weights: WeightsSpec,
        nodes: Option<Vec<u32>>,
    },
    /// Plain interleave over `nodes`, or by default every memory node.
    Interleave { nodes: Option<Vec<u32>> },
    /// Allocate only on these nodes.
    Bind { nodes: Vec<u32> },
    /// Prefer this node (or, given several, any of them: `preferred-many`).
    Preferred { nodes: Vec<u32> },
}

/// A request made concrete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResolvedPolicy {
    /// The policy mode.
    #[serde(serialize_with = "mode_name")]
    pub mode: Mode,
    /// The policy's nodes, ascending.
    pub nodes: Vec<u32>,
    /// For weighted interleave: each node's weight, fastest tier first. Empty otherwise.
    pub weights: Vec<(u32, u32)>,
}

fn mode_name<S: serde::Serializer>(mode: &Mode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(mode.name())
}

impl ResolvedPolicy {
    /// The policy for `set_mempolicy`.
    pub fn policy(&self) -> Result<Policy, ControlError> {
        Ok(Policy::new(
            self.mode,
            NodeMask::from_nodes(self.nodes.iter().copied())?,
        ))
    }
}

fn memory_nodes(topo: &Topology) -> Vec<u32> {
    topo.memory_nodes().map(|n| n.id).collect()
}

/// Check that every node in `nodes` exists and has memory.
pub fn check_memory_nodes(topo: &Topology, nodes: &[u32]) -> Result<(), ControlError> {
    for &node in nodes {
        match topo.node(node) {
            None => {
                return Err(ControlError::NoSuchNode {
                    node,
                    memory_nodes: memory_nodes(topo),
                })
            }
            Some(n) if !n.has_memory() => {
                return Err(ControlError::NoMemory {
                    node,
                    memory_nodes: memory_nodes(topo),
                })
            }
            Some(_) => {}
        }
    }
    Ok(())
}

// Here rather than in `weights`: the pairing needs the machine's memory nodes, which this
// module knows.
impl WeightsSpec {
    /// The (node, weight) pairs of the spec on the machine below `root`: weights in tier order
    /// go to every memory node by its tier ([`assign_weights`]).
    pub fn node_pairs(&self, root: &std::path::Path) -> Result<Vec<(u32, u32)>, ControlError> {
        match self {
            WeightsSpec::PerNode(pairs) => Ok(pairs.clone()),
            WeightsSpec::InTierOrder(_) => {
                let topo =
                    cxltier_topo::Topology::discover(root).map_err(ControlError::Topology)?;
                assign_weights(self, None, &topo)
            }
        }
    }
}

/// Pair weights written as `--interleave` takes them (`spec`, [`WeightsSpec`]) with the nodes
/// of `--nodes` (`nodes`, a node list, or every memory node) on the machine below `root`
/// ([`assign_weights`]).
pub fn machine_weights(
    spec: &str,
    nodes: Option<&str>,
    root: &std::path::Path,
) -> Result<Vec<(u32, u32)>, ControlError> {
    let spec: WeightsSpec = spec.parse()?;
    let nodes = nodes
        .map(cxltier_topo::nodelist::parse)
        .transpose()
        .map_err(ControlError::NodeList)?;
    let topo = Topology::discover(root).map_err(ControlError::Topology)?;
    assign_weights(&spec, nodes.as_deref(), &topo)
}

/// Pair weights with nodes.
///
/// `PerNode` weights name their nodes (`nodes` must then be `None`). `InTierOrder` weights go to
/// `nodes` (default: every memory node), ordered fastest tier first: with one weight per node each
/// node gets its own, with one weight per tier every node of a tier gets the tier's weight.
pub fn assign_weights(
    spec: &WeightsSpec,
    nodes: Option<&[u32]>,
    topo: &Topology,
) -> Result<Vec<(u32, u32)>, ControlError> {
    match spec {
        WeightsSpec::PerNode(pairs) => {
            if nodes.is_some() {
                return Err(ControlError::BadWeights {
                    spec: pairs
                        .iter()
                        .map(|(n, w)| format!("node{n}={w}"))
                        .collect::<Vec<_>>()
                        .join(","),
                    reason:
                        "these weights name their nodes already; drop --nodes, or give weights \
                             in tier order (like 3:1) with --nodes"
                            .into(),
                });
            }
            let listed: Vec<u32> = pairs.iter().map(|p| p.0).collect();
            check_memory_nodes(topo, &listed)?;
            Ok(pairs.clone())
        }
        WeightsSpec::InTierOrder(weights) => {
            let nodes: Vec<u32> = match nodes {
                Some(n) => n.to_vec(),
                None => memory_nodes(topo),
            };
            if nodes.is_empty() {
                return Err(ControlError::NoNodes {
                    what: "weighted interleave",
                });
            }
            check_memory_nodes(topo, &nodes)?;
            let groups = topo.tier_groups(&nodes);
            let ordered: Vec<u32> = groups.iter().flatten().copied().collect();
            if weights.len() == ordered.len() {
                Ok(ordered.into_iter().zip(weights.iter().copied()).collect())
            } else if weights.len() == groups.len() {
                Ok(groups
                    .iter()
                    .zip(weights)
                    .flat_map(|(g, &w)| g.iter().map(move |&n| (n, w)))
                    .collect())
            } else {
                Err(ControlError::WeightCount {
                    weights: weights.len(),
                    nodes: ordered,
                    tiers: groups,
                })
            }
        }
    }
}

/// Make a request concrete for this topology.
pub fn resolve(req: &PolicySpec, topo: &Topology) -> Result<ResolvedPolicy, ControlError> {
    match req {
        PolicySpec::WeightedInterleave { weights, nodes } => {
            let weights = assign_weights(weights, nodes.as_deref(), topo)?;
            let mut nodes: Vec<u32> = weights.iter().map(|p| p.0).collect();
            nodes.sort_unstable();
            Ok(ResolvedPolicy {
                mode: Mode::WeightedInterleave,
                nodes,
                weights,
            })
        }
        PolicySpec::Interleave { nodes } => {
            let nodes = match nodes {
                Some(n) => n.clone(),
                None => memory_nodes(topo),
            };
            simple(Mode::Interleave, nodes, "--interleave", topo)
        }
        PolicySpec::Bind { nodes } => simple(Mode::Bind, nodes.clone(), "--bind", topo),
        PolicySpec::Preferred { nodes } => {
            let mode = if nodes.len() > 1 {
                Mode::PreferredMany
            } else {
                Mode::Preferred
            };
            simple(mode, nodes.clone(), "--preferred", topo)
        }
    }
}

fn simple(
    mode: Mode,
    mut nodes: Vec<u32>,
    what: &'static str,
    topo: &Topology,
) -> Result<ResolvedPolicy, ControlError> {
    if nodes.is_empty() {
        return Err(ControlError::NoNodes { what });
    }
    check_memory_nodes(topo, &nodes)?;
    nodes.sort_unstable();
    nodes.dedup();
    Ok(ResolvedPolicy {
        mode,
        nodes,
        weights: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TempDir;
    use crate::{Class, Classify};

    const NODE: &str = "sys/devices/system/node";

    /// A topology with DRAM nodes 0 and 1 (CPUs, tier 4), CXL nodes 2 and 3 (no CPUs, tier 22) and a
    /// memory-less node 4.
    fn four_nodes() -> (TempDir, Topology) {
        let t = TempDir::new("topo");
        for (id, cpus, mem_kb) in [
            (0, "0-3", 4096),
            (1, "4-7", 4096),
            (2, "", 2048),
            (3, "", 2048),
            (4, "8", 0),
        ] {
            t.write(&format!("{NODE}/node{id}/cpulist"), &format!("{cpus}\n"));
            t.write(
                &format!("{NODE}/node{id}/meminfo"),
                &format!(
                    "Node {id} MemTotal:       {mem_kb} kB\nNode {id} MemFree:        {mem_kb} kB\n"
                ),
            );
        }
        t.write(&format!("{NODE}/online"), "0-4\n");
        t.write(
            "sys/devices/virtual/memory_tiering/memory_tier4/nodelist",
            "0-1\n",
        );
        t.write(
            "sys/devices/virtual/memory_tiering/memory_tier22/nodelist",
            "2-3\n",
        );
        let topo = Topology::discover(t.path()).unwrap();
        (t, topo)
    }

    /// Weighted interleave over the nodes of `weights`, in these weights.
    fn per_node(weights: Vec<(u32, u32)>) -> PolicySpec {
        PolicySpec::WeightedInterleave {
            weights: WeightsSpec::PerNode(weights),
            nodes: None,
        }
    }

    #[test]
    fn tier_weights_per_tier_and_per_node() {
        let (_t, topo) = four_nodes();
        assert_eq!(topo.tier_order().groups, vec![vec![0, 1], vec![2, 3]]);
        let spec = WeightsSpec::InTierOrder(vec![3, 1]);
        assert_eq!(
            assign_weights(&spec, None, &topo).unwrap(),
            vec![(0, 3), (1, 3), (2, 1), (3, 1)]
        );
        let spec = WeightsSpec::InTierOrder(vec![4, 3, 2, 1]);
        assert_eq!(
            assign_weights(&spec, None, &topo).unwrap(),
            vec![(0, 4), (1, 3), (2, 2), (3, 1)]
        );
        // Listed nodes are put in tier order, whatever order they were listed in.
        let spec = WeightsSpec::InTierOrder(vec![3, 1]);
        assert_eq!(
            assign_weights(&spec, Some(&[2, 0]), &topo).unwrap(),
            vec![(0, 3), (2, 1)]
        );
        let e = assign_weights(&WeightsSpec::InTierOrder(vec![3, 2, 1]), None, &topo).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("3 weight(s) for nodes 0-3"), "{msg}");
        assert!(msg.contains("0-1 | 2-3"), "{msg}");
        assert_eq!(e.class(), Class::BadInput);
    }

    #[test]
    fn nodes_must_exist_and_have_memory() {
        let (_t, topo) = four_nodes();
        let e = resolve(&PolicySpec::Bind { nodes: vec![5] }, &topo).unwrap_err();
        assert_eq!(
            e.to_string(),
            "node 5 does not exist (this machine's memory nodes: 0-3)"
        );
        let e = resolve(&PolicySpec::Preferred { nodes: vec![4] }, &topo).unwrap_err();
        assert!(e.to_string().contains("node 4 has no memory"), "{e}");
        let e = resolve(&per_node(vec![(0, 3), (7, 1)]), &topo).unwrap_err();
        assert!(e.to_string().contains("node 7"), "{e}");
        assert!(resolve(&PolicySpec::Bind { nodes: vec![] }, &topo).is_err());
    }

    #[test]
    fn modes_and_defaults() {
        let (_t, topo) = four_nodes();
        let r = resolve(&PolicySpec::Interleave { nodes: None }, &topo).unwrap();
        assert_eq!(
            (r.mode, r.nodes.clone()),
            (Mode::Interleave, vec![0, 1, 2, 3])
        );
        let r = resolve(&PolicySpec::Preferred { nodes: vec![2] }, &topo).unwrap();
        assert_eq!(r.mode, Mode::Preferred);
        let r = resolve(&PolicySpec::Preferred { nodes: vec![2, 3] }, &topo).unwrap();
        assert_eq!(r.mode, Mode::PreferredMany);
        let r = resolve(
            &PolicySpec::Bind {
                nodes: vec![3, 1, 3],
            },
            &topo,
        )
        .unwrap();
        assert_eq!(r.nodes, vec![1, 3]);
        assert_eq!(r.policy().unwrap().to_string(), "bind:1,3");
        let r = resolve(&per_node(vec![(2, 1), (0, 5)]), &topo).unwrap();
        assert_eq!(r.mode, Mode::WeightedInterleave);
        assert_eq!(r.nodes, vec![0, 2]);
        assert_eq!(r.weights, vec![(2, 1), (0, 5)]);
        let e = resolve(
            &PolicySpec::WeightedInterleave {
                weights: WeightsSpec::PerNode(vec![(0, 5)]),
                nodes: Some(vec![0]),
            },
            &topo,
        )
        .unwrap_err();
        assert!(e.to_string().contains("drop --nodes"), "{e}");
    }
}
