//! `cxltier qsim --plan-cluster SPEC` (the model of a run over MPI ranks, priced without running
//! it) and `--bench-network` (the network between ranks, measured under mpirun, for the model's
//! figures).

use super::{qsim_error, Args};
use crate::error::{CliError, CliResult};
use crate::output::{json_line, print_json, Table};
use cxltier_control::size::parse_size;
use cxltier_qsim::dist::model::{predict_circuit, ClusterPrediction, ClusterSpec};
use cxltier_qsim::fusion::Width;
use cxltier_qsim::Precision;
use cxltier_topo::format_bytes;
use serde::Serialize;
use std::collections::BTreeMap;
use std::process::ExitCode;

/// One prediction as `--json` prints it.
#[derive(Serialize)]
struct PlanOutput<'a> {
    circuit: String,
    precision: &'static str,
    fuse: usize,
    fuse_rule: &'static str,
    #[serde(flatten)]
    prediction: &'a ClusterPrediction,
}

/// The rule the ranks fuse by: `cost` or `greedy` (a distributed run prices its fusion
/// whatever its length, so `--fuse-rule auto` is `cost` there).
fn rule_name(width: Width) -> &'static str {
    width.rule()
}

/// A sweep over rank counts: a table with a row per count (its speed-up over the first), one
/// JSON line per count with `--json`, and the curve as SVG with `--plot`.
fn print_sweep(
    args: &Args,
    path: &std::path::Path,
    precision: Precision,
    width: Width,
    points: &[ClusterPrediction],
) -> CliResult {
    if args.json {
        for p in points {
            let line = json_line(
                "qsim --plan-cluster",
                "prediction",
                &PlanOutput {
                    circuit: path.display().to_string(),
                    precision: precision_name(precision),
                    fuse: width.max(),
                    fuse_rule: rule_name(width),
                    prediction: p,
                },
            )?;
            println!("{line}");
        }
    } else {
        let mut t = Table::new([
            "ranks",
            "part",
            "mode",
            "exchanges",
            "sent a rank",
            "gates s",
            "exchanges s",
            "NVMe s",
            "total s",
            "speed-up",
        ]);
        let first = points.first().map_or(1.0, |p| p.total_seconds);
        for p in points {
            t.row([
                p.ranks.to_string(),
                format_bytes(p.part_bytes),
                p.mode.replace('_', " "),
                format!("{} (naive {})", p.exchanges, p.naive_exchanges),
                format_bytes(p.exchange_bytes_per_rank),
                format!("{:.3}", p.compute_seconds),
                format!("{:.3}", p.exchange_seconds),
                format!("{:.3}", p.io_seconds),
                format!("{:.3}", p.total_seconds),
                format!("{:.2}x", first / p.total_seconds),
            ]);
        }
        print!("{}", t.render());
    }
    if let Some(svg) = &args.plot {
        let series = |name: &str, y: fn(&ClusterPrediction) -> f64| crate::plot::Series {
            name: name.into(),
            points: points
                .iter()
                .map(|p| (f64::from(p.ranks.trailing_zeros()), y(p)))
                .collect(),
            marked: None,
            labels: Vec::new(),
        };
        crate::plot::line_plot(
            svg,
            &format!(
                "{}: predicted seconds by ranks (a rank per node)",
                path.file_name().map_or_else(
                    || path.display().to_string(),
                    |f| f.to_string_lossy().into_owned()
                )
            ),
            "log2(ranks): 0 is one rank, 6 is 64",
            "seconds",
            &[
                series("total", |p| p.total_seconds),
                series("gates (NVMe within)", |p| p.compute_seconds),
                series("exchanges", |p| p.exchange_seconds),
            ],
        )?;
        if !args.json {
            eprintln!("wrote {}", svg.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Bytes per second, `K/M/G/T` powers of 1000: `12.5G`, `800M`, `3e9`.
fn parse_rate(key: &str, text: &str) -> Result<f64, CliError> {
    let t = text.trim();
    let t = t
        .strip_suffix("B/s")
        .or_else(|| t.strip_suffix("/s"))
        .unwrap_or(t);
    let (number, scale) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1e3),
        Some((i, 'M')) => (&t[..i], 1e6),
        Some((i, 'G')) => (&t[..i], 1e9),
        Some((i, 'T')) => (&t[..i], 1e12),
        _ => (t, 1.0),
    };
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * scale),
        _ => Err(CliError::bad_input(format!(
            "--plan-cluster {key}={text}: give bytes per second, e.g. 12.5G (100 Gb/s), 800M"
        ))),
    }
}

/// Seconds from `2us`, `0.5ms`, `100ns`, `1s` (a bare number is seconds).
fn parse_time(key: &str, text: &str) -> Result<f64, CliError> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1e-9)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else {
        (t.strip_suffix('s').unwrap_or(t), 1.0)
    };
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * scale),
        _ => Err(CliError::bad_input(format!(
            "--plan-cluster {key}={text}: give a time such as 2us, 0.5ms, 0"
        ))),
    }
}

/// `--plan-cluster SPEC`: the model's prediction of a run over a cluster, not a run.
pub(super) fn plan_cluster(
    args: &Args,
    path: &std::path::Path,
    circuit: &cxltier_qsim::Circuit,
    text: &str,
    precision: Precision,
) -> CliResult {
    let width = super::fusion_width(args)?;
    let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(CliError::bad_input(format!(
                "--plan-cluster {text}: {item:?} is not key=value; give e.g. \
                 ranks=16,nodes=4,network=12.5G"
            )));
        };
        const KEYS: [&str; 11] = [
            "ranks",
            "nodes",
            "cores",
            "threads",
            "memory",
            "cxl",
            "cxl-stream",
            "network",
            "latency",
            "ssd",
            "stream",
        ];
        if !KEYS.contains(&key.trim()) {
            return Err(CliError::bad_input(format!(
                "--plan-cluster: unknown key {:?}; the keys are {}",
                key.trim(),
                KEYS.join(", ")
            )));
        }
        fields.insert(key.trim(), value.trim());
    }
    let count = |key: &str| -> Result<Option<usize>, CliError> {
        fields
            .get(key)
            .map(|v| match v.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(CliError::bad_input(format!(
                    "--plan-cluster {key}={v}: give a whole number, 1 or more"
                ))),
            })
            .transpose()
    };
    let Some(ranks_text) = fields.get("ranks").copied() else {
        return Err(CliError::bad_input(
            "--plan-cluster: give ranks=R (a power of two), e.g. ranks=16,nodes=4,network=12.5G, \
             or a sweep ranks=A..B",
        ));
    };
    // ranks=A..B: every power of two from A to B, a rank per node.
    let sweep = match ranks_text.split_once("..") {
        None => None,
        Some((a, b)) => {
            let bad = || {
                CliError::bad_input(format!(
                    "--plan-cluster ranks={ranks_text}: a sweep is ranks=A..B with A and B powers \
                     of two, A at most B (e.g. ranks=1..64)"
                ))
            };
            let (a, b) = (
                a.trim().parse::<usize>().map_err(|_| bad())?,
                b.trim().parse::<usize>().map_err(|_| bad())?,
            );
            if !a.is_power_of_two() || !b.is_power_of_two() || a > b {
                return Err(bad());
            }
            if fields.contains_key("nodes") {
                return Err(CliError::bad_input(format!(
                    "--plan-cluster ranks={ranks_text}: a sweep puts a rank on each node; drop \
                     nodes=, or plan one rank count with ranks=R,nodes=N"
                )));
            }
            Some((a, b))
        }
    };
    if sweep.is_none() && args.plot.is_some() {
        return Err(CliError::bad_input(format!(
            "--plot draws a sweep over rank counts: give ranks=A..B (e.g. ranks=1..64), not \
             ranks={ranks_text}"
        )));
    }
    let ranks = match sweep {
        Some((a, _)) => a,
        None => count("ranks")?.expect("given"),
    };
    let nodes = count("nodes")?.unwrap_or(ranks);
    let here = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cores = match fields.get("cores") {
        Some(v) => match v.parse::<f64>() {
            Ok(c) if c.is_finite() && c > 0.0 => c,
            _ => {
                return Err(CliError::bad_input(format!(
                    "--plan-cluster cores={v}: give the cores of a node, e.g. 32"
                )))
            }
        },
        None => here as f64,
    };
    let per_node = (ranks / nodes.max(1)).max(1);
    let threads = match count("threads")? {
        Some(t) => t,
        None => args
            .threads
            .unwrap_or(((cores / per_node as f64).ceil() as usize).max(1)),
    };
    let memory = match fields.get("memory") {
        Some(v) => Some(parse_size(v).map_err(CliError::classified)?),
        None => args
            .memory_limit
            .as_deref()
            .map(parse_size)
            .transpose()
            .map_err(CliError::classified)?,
    };
    let network = fields
        .get("network")
        .map(|v| parse_rate("network", v))
        .transpose()?;
    let cxl = fields
        .get("cxl")
        .map(|v| parse_size(v))
        .transpose()
        .map_err(CliError::classified)?;
    if cxl.is_some() && memory.is_none() {
        return Err(CliError::bad_input(
            "--plan-cluster: cxl=SIZE is what of a rank's part DRAM does not hold: give \
             memory=SIZE (its DRAM) too",
        ));
    }
    let cxl_stream = fields
        .get("cxl-stream")
        .map(|v| parse_rate("cxl-stream", v))
        .transpose()?;
    let latency = fields
        .get("latency")
        .map(|v| parse_time("latency", v))
        .transpose()?
        .unwrap_or(0.0);
    let ssd = fields
        .get("ssd")
        .map(|v| parse_rate("ssd", v))
        .transpose()?;
    let stream = fields
        .get("stream")
        .map(|v| parse_rate("stream", v))
        .transpose()?;
    let message = parse_size(&args.exchange_message).map_err(CliError::classified)?;
    let amp_bytes = match precision {
        Precision::F64 => 16,
        Precision::F32 => 8,
    };
    let spec = ClusterSpec {
        ranks,
        nodes,
        cores_per_node: cores,
        threads,
        memory_per_rank: memory,
        cxl_per_rank: cxl,
        cxl_stream_bytes_per_second: cxl_stream,
        network_bytes_per_second: network,
        latency_seconds: latency,
        ssd_bytes_per_second: ssd,
        stream_bytes_per_second: stream,
        message_bytes: message,
    };
    let rates = match precision {
        Precision::F64 => cxltier_qsim::bench::machine_rates::<f64>(),
        Precision::F32 => cxltier_qsim::bench::machine_rates::<f32>(),
    };
    if let Some((a, b)) = sweep {
        let explicit_threads = fields.contains_key("threads") || args.threads.is_some();
        let mut points = Vec::new();
        let mut r = a;
        while r <= b {
            let point = ClusterSpec {
                ranks: r,
                nodes: r,
                threads: if explicit_threads {
                    threads
                } else {
                    (cores.ceil() as usize).max(1)
                },
                ..spec.clone()
            };
            points.push(
                predict_circuit(circuit, amp_bytes, width, &point, &rates)
                    .map_err(|e| qsim_error(path, e))?,
            );
            r *= 2;
        }
        return print_sweep(args, path, precision, width, &points);
    }
    let p = predict_circuit(circuit, amp_bytes, width, &spec, &rates)
        .map_err(|e| qsim_error(path, e))?;
    if args.json {
        print_json(
            "qsim --plan-cluster",
            &PlanOutput {
                circuit: path.display().to_string(),
                precision: precision_name(precision),
                fuse: width.max(),
                fuse_rule: rule_name(width),
                prediction: &p,
            },
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let rate = |r: Option<f64>| r.map_or_else(|| "-".into(), |r| format!("{:.2} GB/s", r / 1e9));
    let mut t = Table::new(["", "per rank"]);
    t.row([
        "cluster".to_string(),
        format!(
            "{} ranks on {} nodes, {:.2} threads a rank",
            p.ranks, p.nodes, p.threads_per_rank
        ),
    ]);
    t.row([
        "part".to_string(),
        format!(
            "{} of {} qubits ({}), {}{}",
            format_bytes(p.part_bytes),
            p.qubits,
            precision_name(precision),
            p.mode.replace('_', " "),
            if p.cxl_bytes_per_rank > 0 {
                format!(
                    ": {} in DRAM, {} in CXL memory",
                    format_bytes(p.dram_bytes_per_rank),
                    format_bytes(p.cxl_bytes_per_rank)
                )
            } else {
                String::new()
            }
        ),
    ]);
    t.row([
        "exchanges".to_string(),
        format!(
            "{} ({} sent, {} messages); naive {} ({} sent)",
            p.exchanges,
            format_bytes(p.exchange_bytes_per_rank),
            p.messages_per_rank,
            p.naive_exchanges,
            format_bytes(p.naive_exchange_bytes_per_rank)
        ),
    ]);
    t.row([
        "sweeps / passes".to_string(),
        format!(
            "{} / {} ({} NVMe I/O)",
            p.sweeps,
            p.passes,
            format_bytes(p.io_bytes_per_rank)
        ),
    ]);
    t.row([
        "time".to_string(),
        format!(
            "{:.3} s: gates {:.3} s (NVMe {:.3} s within), exchanges {:.3} s ({} gates \
             overlapped: {:.3} s within)",
            p.total_seconds,
            p.compute_seconds,
            p.io_seconds,
            p.exchange_seconds,
            p.overlapped_gates,
            p.overlap_seconds
        ),
    ]);
    t.row([
        "rates".to_string(),
        format!(
            "network {}, latency {:.1} us, NVMe {}, DRAM {} a node{}{}",
            rate(p.network_bytes_per_second),
            p.latency_seconds * 1e6,
            rate(p.ssd_bytes_per_second),
            rate(Some(stream.unwrap_or(p.rates.stream_bytes_per_second))),
            if stream.is_none() {
                " (measured here)"
            } else {
                ""
            },
            cxl_stream
                .map(|r| format!(", CXL {} a node", rate(Some(r))))
                .unwrap_or_default()
        ),
    ]);
    t.row([
        "kernels".to_string(),
        format!(
            "{} ns an amplitude on one thread (k = 1..{}, measured here)",
            p.rates.gate_seconds[1..]
                .iter()
                .map(|s| format!("{:.2}", s * 1e9))
                .collect::<Vec<_>>()
                .join(" / "),
            p.rates.gate_seconds.len() - 1
        ),
    ]);
    print!("{}", t.render());
    if p.oversubscribed {
        eprintln!(
            "cxltier qsim: warning: {} ranks a node outnumber its {} cores: the model does not \
             price the time slices such ranks wait for each other, so expect a slower run",
            p.ranks / p.nodes,
            cores
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn precision_name(p: Precision) -> &'static str {
    match p {
        Precision::F64 => "f64",
        Precision::F32 => "f32",
    }
}

#[cfg(not(feature = "mpi"))]
pub(super) fn bench_network(_args: &Args) -> CliResult {
    Err(CliError::bad_input(
        "--bench-network measures between MPI ranks, but this cxltier was built without MPI: \
         build it with `cargo build --release -p cxltier --features mpi` (needs Open MPI) and \
         run it under mpirun -np 2",
    ))
}

/// `--bench-network` under mpirun: the bandwidth and latency between ranks; rank 0 prints.
#[cfg(feature = "mpi")]
pub(super) fn bench_network(args: &Args) -> CliResult {
    use cxltier_qsim::dist::mpi::{self, Cluster};
    if mpi::launched_ranks().unwrap_or(1) < 2 {
        return Err(CliError::bad_input(
            "--bench-network measures between MPI ranks: run it under mpirun -np 2 (or more)",
        ));
    }
    let message = parse_size(&args.exchange_message).map_err(CliError::classified)?;
    let path = std::path::Path::new("--bench-network");
    let cluster = Cluster::init().map_err(|e| qsim_error(path, e))?;
    let bench = mpi::bench_network(&cluster, message, 1.0).map_err(|e| qsim_error(path, e))?;
    if cluster.rank() != 0 {
        return Ok(ExitCode::SUCCESS);
    }
    if args.json {
        print_json("qsim --bench-network", &bench)?;
    } else {
        println!(
            "{} ranks, messages of {}: {:.3} GB/s a rank each way, latency {:.2} us \
             (for --plan-cluster network={:.3}G,latency={:.2}us)",
            bench.ranks,
            format_bytes(bench.message_bytes),
            bench.bytes_per_second / 1e9,
            bench.latency_seconds * 1e6,
            bench.bytes_per_second / 1e9,
            bench.latency_seconds * 1e6
        );
    }
    Ok(ExitCode::SUCCESS)
}
