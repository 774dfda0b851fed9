//! Checks made on the host from the data blocks the guest sent (JSON from `cxltier`, `numactl -H`).
//! Each adds exactly one result to the report, PASS or FAIL, whatever the data looks like: a missing
//! or malformed block is a failure with the reason, never a skipped check.

use crate::Report;
use serde_json::Value;
use std::collections::BTreeMap;

const MIB: f64 = 1024.0 * 1024.0;

/// Parses a JSON data block.
fn json(report: &Report, name: &str) -> Result<Value, String> {
    let text = report.data(name)?;
    serde_json::from_str(text.trim()).map_err(|e| {
        format!(
            "data '{name}' is not JSON ({e}): {}",
            text.chars().take(160).collect::<String>()
        )
    })
}

/// Records the result of `f`: `Ok(detail)` passes, `Err(detail)` fails.
fn record(report: &mut Report, name: &str, f: impl FnOnce(&Report) -> Result<String, String>) {
    let (pass, detail) = match f(report) {
        Ok(d) => (true, d),
        Err(d) => (false, d),
    };
    report.check(name, pass, detail);
}

/// The node with this id in `topo --json`.
fn node(topo: &Value, id: u64) -> Result<&Value, String> {
    topo["nodes"]
        .as_array()
        .ok_or("topo JSON has no 'nodes' array")?
        .iter()
        .find(|n| n["id"].as_u64() == Some(id))
        .ok_or_else(|| format!("topo JSON has no node {id}"))
}

/// Per-node counts from a JSON value that maps node ids to numbers (`{"0": 3072, "1": 1024}`), to
/// objects holding the count under `key` (`{"0": {"pages": 3072}}`), or a list of objects with a
/// `node` (or `id`) field and `key` (`[{"node": 0, "pages": 3072}]`).
fn per_node(v: &Value, key: &str) -> Option<BTreeMap<u64, f64>> {
    let mut out = BTreeMap::new();
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let id = k.trim_start_matches("node").parse::<u64>().ok()?;
                let n = v.as_f64().or_else(|| v[key].as_f64())?;
                out.insert(id, n);
            }
        }
        Value::Array(items) => {
            for item in items {
                let id = item["node"].as_u64().or_else(|| item["id"].as_u64())?;
                out.insert(id, item[key].as_f64()?);
            }
        }
        _ => return None,
    }
    Some(out)
}

/// Pages per node reported by `cxltier touch --json` (`pages_per_node`, docs/json.md).
fn touch_pages(v: &Value) -> Result<BTreeMap<u64, f64>, String> {
    per_node(&v["pages_per_node"], "pages").ok_or_else(|| {
        format!(
            "touch JSON has no per-node page counts under 'pages_per_node': {}",
            v.to_string().chars().take(200).collect::<String>()
        )
    })
}

fn fraction_on(pages: &BTreeMap<u64, f64>, node: u64) -> Result<f64, String> {
    let total: f64 = pages.values().sum();
    if total <= 0.0 {
        return Err(format!("no pages reported: {pages:?}"));
    }
    Ok(pages.get(&node).copied().unwrap_or(0.0) / total)
}

/// Checks the share of touched pages that landed on `node`.
fn placement(report: &mut Report, check: &str, data: &str, node: u64, want: f64, tolerance: f64) {
    record(report, check, |r| {
        let pages = touch_pages(&json(r, data)?)?;
        let f = fraction_on(&pages, node)?;
        let detail = format!(
            "{:.1}% of {} pages on node{node} (want {:.0}% ± {:.0}%), per node {:?}",
            f * 100.0,
            pages.values().sum::<f64>(),
            want * 100.0,
            tolerance * 100.0,
            pages
        );
        if (f - want).abs() <= tolerance {
            Ok(detail)
        } else {
            Err(detail)
        }
    });
}

/// `numactl -H`: the node count, the CPU-less nodes and each node's size in MB.
struct Numactl {
    nodes: usize,
    cpuless: Vec<u64>,
    size_mb: BTreeMap<u64, f64>,
}

fn parse_numactl(text: &str) -> Result<Numactl, String> {
    let mut nodes = None;
    let mut cpuless = Vec::new();
    let mut size_mb = BTreeMap::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["available:", n, "nodes", ..] => nodes = n.parse().ok(),
            ["node", id, "cpus:"] => cpuless.push(id.parse().map_err(|_| line.to_string())?),
            ["node", id, "size:", mb, "MB"] => {
                size_mb.insert(
                    id.parse().map_err(|_| line.to_string())?,
                    mb.parse().map_err(|_| line.to_string())?,
                );
            }
            _ => {}
        }
    }
    Ok(Numactl {
        nodes: nodes.ok_or("numactl -H printed no 'available: N nodes' line")?,
        cpuless,
        size_mb,
    })
}

/// Checks every topology shares: topo's basic view, agreement with numactl, weighted interleave,
/// placement under each policy and `show`.
pub fn common(report: &mut Report) {
    record(report, "topo-json-parses", |r| {
        json(r, "topo-json").map(|_| "valid JSON".into())
    });
    record(report, "topo-json-nodes", |r| {
        let topo = json(r, "topo-json")?;
        let ids: Vec<u64> = topo["nodes"]
            .as_array()
            .ok_or("no 'nodes' array")?
            .iter()
            .filter_map(|n| n["id"].as_u64())
            .collect();
        let node0 = node(&topo, 0)?;
        let node1 = node(&topo, 1)?;
        let detail = format!(
            "nodes {ids:?}; node0 kind {} cpus {}; node1 cpus {}",
            node0["kind"], node0["cpus"], node1["cpus"]
        );
        let node1_cpuless = node1["cpus"].as_array().is_some_and(|c| c.is_empty());
        if ids == [0, 1] && node0["kind"] == "dram" && node1_cpuless {
            Ok(detail)
        } else {
            Err(detail)
        }
    });
    record(report, "topo-agrees-with-numactl", |r| {
        let topo = json(r, "topo-json")?;
        let numa = parse_numactl(r.data("numactl-H")?)?;
        let nodes = topo["nodes"].as_array().ok_or("no 'nodes' array")?;
        let cpuless: Vec<u64> = nodes
            .iter()
            .filter(|n| n["cpus"].as_array().is_some_and(|c| c.is_empty()))
            .filter_map(|n| n["id"].as_u64())
            .collect();
        let mut problems = Vec::new();
        if numa.nodes != nodes.len() {
            problems.push(format!(
                "numactl sees {} nodes, topo {}",
                numa.nodes,
                nodes.len()
            ));
        }
        if numa.cpuless != cpuless {
            problems.push(format!(
                "CPU-less nodes: numactl {:?}, topo {cpuless:?}",
                numa.cpuless
            ));
        }
        for n in nodes {
            let (Some(id), Some(total)) = (n["id"].as_u64(), n["mem_total_bytes"].as_f64()) else {
                problems.push(format!("node without id or mem_total_bytes: {n}"));
                continue;
            };
            let topo_mb = total / MIB;
            match numa.size_mb.get(&id) {
                Some(mb) if (mb - topo_mb).abs() <= 2.0 => {}
                other => problems.push(format!(
                    "node{id} size: numactl {other:?} MB, topo {topo_mb:.1} MiB"
                )),
            }
        }
        let detail = format!(
            "{} nodes, CPU-less {cpuless:?}, sizes {:?} MB",
            numa.nodes, numa.size_mb
        );
        if problems.is_empty() {
            Ok(detail)
        } else {
            Err(format!("{}; {detail}", problems.join("; ")))
        }
    });
    record(report, "topo-json-weighted-interleave", |r| {
        let topo = json(r, "topo-json")?;
        let wi = &topo["weighted_interleave"];
        let detail = format!("weighted_interleave {wi}");
        if wi["supported"] == true && wi["weights"]["0"].is_u64() && wi["weights"]["1"].is_u64() {
            Ok(detail)
        } else {
            Err(detail)
        }
    });
    placement(
        report,
        "weights-3-1-places-75-percent-on-node0",
        "touch-weights-3-1",
        0,
        0.75,
        0.02,
    );
    placement(
        report,
        "interleave-places-50-percent-on-node0",
        "touch-interleave",
        0,
        0.50,
        0.02,
    );
    placement(
        report,
        "bind-1-places-all-on-node1",
        "touch-bind-1",
        1,
        1.0,
        0.0,
    );
    record(report, "show-pid-sees-node1", |r| {
        let show = json(r, "show-bind-1")?;
        let per = per_node(&show["bytes_per_node"], "bytes").ok_or_else(|| {
            format!(
                "show JSON has no per-node byte counts under 'bytes_per_node': {}",
                show.to_string().chars().take(200).collect::<String>()
            )
        })?;
        let node1 = per.get(&1).copied().unwrap_or(0.0) / MIB;
        let detail = format!("node1 holds {node1:.1} MiB of the process (16 MiB touched under --bind 1); per node bytes {per:?}");
        if node1 >= 15.5 {
            Ok(detail)
        } else {
            Err(detail)
        }
    });
}

/// Memory tier of node `id` from topo JSON.
fn tier(topo: &Value, id: u64) -> Result<u64, String> {
    node(topo, id)?["memory_tier"]
        .as_u64()
        .ok_or_else(|| format!("node{id} has no memory_tier"))
}

fn node1_slower_tier(report: &mut Report) {
    record(report, "topo-json-node1-in-slower-tier", |r| {
        let topo = json(r, "topo-json")?;
        let (t0, t1) = (tier(&topo, 0)?, tier(&topo, 1)?);
        let detail = format!("node0 in memory tier {t0}, node1 in {t1}");
        if t1 > t0 {
            Ok(detail)
        } else {
            Err(detail)
        }
    });
}

/// Checks specific to topology `hmat`: topo reads the HMAT figures QEMU was given.
pub fn hmat(report: &mut Report) {
    for (id, latency, bandwidth) in [(0, 100, 102_400), (1, 250, 40_960)] {
        record(report, &format!("topo-json-hmat-node{id}"), |r| {
            let topo = json(r, "topo-json")?;
            let a = &node(&topo, id)?["hmat"]["access0"];
            let detail = format!(
                "access0 read latency {} ns, read bandwidth {} MB/s (want {latency}, {bandwidth})",
                a["read_latency_ns"], a["read_bandwidth_mbps"]
            );
            if a["read_latency_ns"] == latency
                && a["read_bandwidth_mbps"] == bandwidth
                && a["write_latency_ns"] == latency
                && a["write_bandwidth_mbps"] == bandwidth
            {
                Ok(detail)
            } else {
                Err(detail)
            }
        });
    }
    record(report, "topo-json-node1-memory-only", |r| {
        let topo = json(r, "topo-json")?;
        let n = node(&topo, 1)?;
        let detail = format!("node1 kind {}, evidence {}", n["kind"], n["evidence"]);
        // No CXL device and no HMAT memory-side hint says what it is: not DRAM with CPUs, not CXL.
        if n["kind"] != "dram" && n["kind"] != "cxl" && n["kind"].is_string() {
            Ok(detail)
        } else {
            Err(detail)
        }
    });
    node1_slower_tier(report);
}

/// Checks specific to topology `cxl`: topo finds node1 as CXL, with its memdev and region.
pub fn cxl(report: &mut Report) {
    record(report, "topo-json-node1-cxl", |r| {
        let topo = json(r, "topo-json")?;
        let n = node(&topo, 1)?;
        let detail = format!("node1 kind {}, evidence {}", n["kind"], n["evidence"]);
        if n["kind"] == "cxl" {
            Ok(detail)
        } else {
            Err(detail)
        }
    });
    record(report, "topo-json-cxl-memdev", |r| {
        let topo = json(r, "topo-json")?;
        let memdevs = topo["cxl"]["memdevs"]
            .as_array()
            .ok_or("no cxl.memdevs array")?;
        let names: Vec<&str> = memdevs.iter().filter_map(|m| m["name"].as_str()).collect();
        let backing: Vec<&Value> = memdevs.iter().filter(|m| m["node"] == 1).collect();
        let detail = format!(
            "memdevs {names:?}; backing node1: {}",
            backing
                .iter()
                .map(|m| format!(
                    "{} (region {}, ram {})",
                    m["name"], m["region"], m["ram_bytes"]
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let ok = names.len() == 2
            && backing.len() == 1
            && backing[0]["region"] == "region0"
            && backing[0]["ram_bytes"] == 256u64 << 20;
        if ok {
            Ok(detail)
        } else {
            Err(detail)
        }
    });
    record(report, "topo-json-cxl-region", |r| {
        let topo = json(r, "topo-json")?;
        let regions = topo["cxl"]["regions"]
            .as_array()
            .ok_or("no cxl.regions array")?;
        let detail = format!(
            "regions: {}",
            regions
                .iter()
                .map(|g| format!(
                    "{} mode {} size {} node {} memdevs {}",
                    g["name"], g["mode"], g["size_bytes"], g["node"], g["memdevs"]
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
        let ok = regions.len() == 1
            && regions[0]["name"] == "region0"
            && regions[0]["mode"] == "ram"
            && regions[0]["node"] == 1
            && regions[0]["size_bytes"] == 256u64 << 20
            && regions[0]["memdevs"]
                .as_array()
                .is_some_and(|m| m.len() == 1);
        if ok {
            Ok(detail)
        } else {
            Err(detail)
        }
    });
    node1_slower_tier(report);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_node_shapes() {
        let a: Value = serde_json::json!({"0": 3072, "1": 1024});
        let b: Value = serde_json::json!({"node0": {"pages": 3}, "node1": {"pages": 1}});
        let c: Value = serde_json::json!([{"node": 0, "pages": 3}, {"id": 1, "pages": 1}]);
        for v in [&a, &b, &c] {
            let p = per_node(v, "pages").unwrap();
            assert_eq!(fraction_on(&p, 0).unwrap(), 0.75);
        }
        assert!(per_node(&serde_json::json!("x"), "pages").is_none());
    }

    #[test]
    fn numactl_h() {
        let text = "available: 2 nodes (0-1)\nnode 0 cpus: 0 1\nnode 0 size: 900 MB\nnode 0 free: 815 MB\nnode 1 cpus:\nnode 1 size: 256 MB\n";
        let n = parse_numactl(text).unwrap();
        assert_eq!(n.nodes, 2);
        assert_eq!(n.cpuless, vec![1]);
        assert_eq!(n.size_mb[&1], 256.0);
        assert!(parse_numactl("nothing").is_err());
    }

    #[test]
    fn missing_data_fails_every_check() {
        let mut r = Report::parse("hmat", "");
        common(&mut r);
        hmat(&mut r);
        assert!(r.checks.iter().all(|c| !c.pass), "{r:?}");
        assert!(r.checks.len() >= 10);
    }
}
