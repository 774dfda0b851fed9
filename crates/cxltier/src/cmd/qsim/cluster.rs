//! `cxltier qsim --plan-cluster SPEC` (the model of a run over MPI ranks, priced without running
//! it) and `--bench-network` (the network between ranks, measured under mpirun, for the model's
//! figures).

use super::{qsim_error, Args};
use crate::error::{CliError, CliResult};
use crate::output::{json_line, print_json, Table};
use cxltier_qsim::dist::model::{
    parse_cluster_spec, CircuitPrediction, ClusterDefaults, ClusterPrediction,
};
use cxltier_qsim::fusion::Width;
use cxltier_qsim::Precision;
use cxltier_topo::format_bytes;
use std::process::ExitCode;

/// A sweep over rank counts: a table with a row per count (its speed-up over the first), one
/// JSON line per count with `--json`, and the curve as SVG with `--plot`.
fn print_sweep(args: &Args, path: &std::path::Path, points: &[CircuitPrediction]) -> CliResult {
    if args.json {
        for p in points {
            println!("{}", json_line("qsim --plan-cluster", "prediction", p)?);
        }
    } else {
        let mut t = Table::from_header(
            "ranks|part|mode|exchanges|sent a rank|gates s|exchanges s|NVMe s|total s|speed-up",
        );
        let first = points.first().map_or(1.0, |p| p.prediction.total_seconds);
        for p in points.iter().map(|p| &p.prediction) {
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
                .map(|p| {
                    (
                        f64::from(p.prediction.ranks.trailing_zeros()),
                        y(&p.prediction),
                    )
                })
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

/// `--plan-cluster SPEC`: the model's prediction of a run over a cluster, not a run.
pub(super) fn plan_cluster(
    args: &Args,
    path: &std::path::Path,
    circuit: &cxltier_qsim::Circuit,
    text: &str,
    precision: Precision,
) -> CliResult {
    let width = Width::parse(&args.fuse, &args.fuse_rule).map_err(CliError::classified)?;
    let request = parse_cluster_spec(
        text,
        &ClusterDefaults {
            threads: args.threads,
            memory_per_rank: args.memory_limit,
            message_bytes: args.exchange_message,
            cores_here: std::thread::available_parallelism().map_or(1, |n| n.get()),
            needs_sweep: args.plot.is_some(),
        },
    )
    .map_err(CliError::classified)?;
    let points = request
        .predict(circuit, &path.display().to_string(), precision, width)
        .map_err(|e| qsim_error(path, e))?;
    if request.sweep.is_some() {
        return print_sweep(args, path, &points);
    }
    let [prediction] = &points[..] else {
        unreachable!("a cluster without a sweep is one point")
    };
    if args.json {
        print_json("qsim --plan-cluster", prediction)?;
        return Ok(ExitCode::SUCCESS);
    }
    let p = &prediction.prediction;
    let spec = &request.spec;
    let (cores, stream, cxl_stream) = (
        spec.cores_per_node,
        spec.stream_bytes_per_second,
        spec.cxl_stream_bytes_per_second,
    );
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
            precision,
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
    if cxltier_qsim::dist::launched_ranks().unwrap_or(1) < 2 {
        return Err(CliError::bad_input(
            "--bench-network measures between MPI ranks: run it under mpirun -np 2 (or more)",
        ));
    }
    let message = args.exchange_message;
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
