//! `cxltier qsim CIRCUIT.qasm`: simulate a quantum circuit's state vector, in memory over DRAM and
//! CXL nodes, or beyond memory with the state streamed from NVMe.

mod cluster;

use crate::error::{CliError, CliResult};
use crate::output::{print_json, Table};
use cxltier_control::policy::machine_weights;
use cxltier_qsim::bench::KernelBenchConfig;
use cxltier_qsim::fusion::Width;
use cxltier_qsim::qasm::parse_max_gates;
use cxltier_qsim::run::{check_sampling_memory, parse_amplitude_indices, Run, RunOutput};
use cxltier_qsim::{
    check_threads, parse_reader, Options, ParseOptions, Precision, Progress, ProgressSink,
    ProgressSnapshot, ProgressWatcher, QsimError,
};
use cxltier_topo::format_bytes;
use cxltier_topo::size::parse_size;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

const LONG_HELP: &str = "\
Reads an OpenQASM 2.0 program (or the OpenQASM 3 subset qiskit.qasm3.dumps writes; Qiskit's
qelib1.inc gates and the other standard gates qiskit.qasm2.dumps writes, user `gate` definitions, `measure`, `reset`, `if(creg==n)`; a program without the
`OPENQASM 2.0;` header is read as Qiskit reads it, with a warning on stderr), runs it from |0...0>
on a state vector of 2^n amplitudes (16 bytes each at f64, 8 at f32), and reports the amplitudes
asked for, sampled counts, the state's norm and where the time went. Basis states are numbered as
in Qiskit: qubit 0 is the least significant bit. Counts are keyed as Qiskit's get_counts(): each
classical register with its bit 0 rightmost, the last declared register first, registers
separated by a space.

In memory (the state fits under --memory-limit, or no limit): the state is split in chunks, each
bound with mbind to a memory node (by --interleave weights over DRAM and CXL nodes, fastest tier
first; the global weighted-interleave table is not touched) and checked with move_pages.

Out of core (the state exceeds --memory-limit): chunks that do not fit live in a scratch file in
each --ssd directory (striped, O_DIRECT, io_uring). Each file is unlinked as soon as it is open,
so `ls` does not show it while `df` counts its space, and nothing is left behind however the run
ends (SIGINT, SIGTERM, a kill). The circuit runs in passes;
each pass streams the state once through three buffers (read block k+1, compute block k, write
block k-1) and applies every gate whose qubits it has gathered. Qubits are relabelled first so
that the passes are few. A state larger than the --ssd space (the cap, or the file system's free
space) is refused before anything starts, and so is one whose resident part (the state, or
--memory-limit) exceeds the memory available (MemAvailable, cgroup limits).

Input bounds (refused with the line, exit 2): 63 qubits, expressions nested 256 deep, gate
definitions nested 256 deep, 4 MiB per statement, 1,000,000 gates after expansion (measurements
and resets count as gates; --max-gates N for larger circuits, about 800 bytes of memory each);
gate parameters must be finite. The file is read as it is parsed, and refused where it passes a
bound, without reading the rest.

Dynamic circuits (a reset, an `if`, or a gate or reset on a qubit after it was measured) have no
single final state: they need --shots, and each shot follows its own outcomes. The gates before the
first measurement run once; then the shots split at each measurement into branches (one run per
distinct outcome path, a copy of the state kept for each branch that waits), or, when those copies
would not fit, run one by one from the saved prefix (--dynamic-method auto|branches|trajectories;
`dynamic` in --json says which ran).

Over MPI ranks (a build with --features mpi): `mpirun -np R cxltier qsim ...` (R a power of two)
splits the state into R parts, one per rank, each under its own --memory-limit/--ssd/--interleave;
gates on the top log2(R) qubits are made local by swapping qubits between ranks, planned over the
whole circuit so that the exchanges are few. Rank 0 prints; --json adds ranks and distribution.
Dynamic circuits run over ranks too, and a seed draws the same counts as in one process.

--plan-cluster SPEC predicts such a run without running it: comma-separated key=value, ranks=R
(a power of two; ranks=A..B sweeps the powers of two from A to B, a rank per node, and --plot
FILE.svg draws the curve), nodes=N (default R: a rank per node), cores=C per node (default: this
machine's), threads=T per rank (default --threads, else cores/ranks per node), memory=SIZE of
DRAM per rank for its part (default --memory-limit), cxl=SIZE of CXL memory per rank for what
DRAM does not hold (with cxl-stream=RATE, the CXL memory's bandwidth per node; a part beyond
both streams through its NVMe), network=RATE each rank sends at (needed for R > 1),
latency=TIME per message (default 0), ssd=RATE per rank (needed out of core), stream=RATE DRAM
bandwidth per node (default: measured here). RATE is
bytes per second, K/M/G/T powers of 1000 (12.5G is 100 Gb/s); TIME as 2us, 0.5ms, 1s.

SIZE: 4096, 64K, 512M, 16G ... (K/M/G/T powers of 1024). --ssd DIR[:SIZE] caps the space used
in DIR. --amplitudes: indices in decimal or 0b binary, comma-separated.";

/// Simulate a quantum circuit (OpenQASM 2.0) in memory or beyond it
#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// The circuit: an OpenQASM 2.0 file
    #[arg(
        value_name = "CIRCUIT.qasm",
        required_unless_present_any = ["bench_kernels", "bench_network"]
    )]
    circuit: Option<PathBuf>,
    /// Memory for the state and the out-of-core buffers, at least 4K (default: no limit)
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    memory_limit: Option<u64>,
    /// Refuse a circuit of more than N gates after user gates are expanded (measurements and
    /// resets count as gates); each takes about 800 bytes of memory while the circuit is read
    /// and prepared
    #[arg(long, value_name = "N", default_value = "1000000")]
    max_gates: String,
    /// A directory on an NVMe file system to spill the state to, DIR[:SIZE]; repeat for several
    /// (chunks are striped over them)
    #[arg(long, value_name = "DIR[:SIZE]", value_parser = ssd_arg)]
    ssd: Vec<(PathBuf, Option<u64>)>,
    /// Place memory chunks over nodes by weight, fastest tier first (3:1), or per node (0=3,1=1)
    #[arg(long, value_name = "WEIGHTS")]
    interleave: Option<String>,
    /// The nodes for --interleave in tier order, e.g. 0,1 (default: every memory node)
    #[arg(long, value_name = "LIST", requires = "interleave")]
    nodes: Option<String>,
    /// Worker threads (default: every CPU)
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Amplitude precision
    #[arg(long, value_name = "f64|f32", default_value = "f64")]
    precision: String,
    /// Sample N measurements of the measured qubits (all qubits if the circuit measures none)
    #[arg(long, value_name = "N", default_value_t = 0)]
    shots: usize,
    /// Seed for sampling
    #[arg(long, value_name = "SEED", default_value_t = 1)]
    seed: u64,
    /// Print these amplitudes and their probabilities, e.g. 0,5,0b101
    #[arg(long, value_name = "LIST")]
    amplitudes: Option<String>,
    /// Fused gates act on at most this many qubits, 1 (no fusion) to 5; `auto` is 5
    #[arg(long, value_name = "QUBITS|auto", default_value = "auto")]
    fuse: String,
    /// How gates are fused under --fuse: `cost` merges a gate into a wider one only where the
    /// wider gate costs less than the two apart, by the kernels' cost, the sweeps over the
    /// state and its streaming time measured on this machine at the start of the run (as
    /// Qiskit Aer's cost-based fusion); `greedy` merges every gate while the fused gate fits
    /// (qsim's rule); `auto` is `cost` for runs of 2^31 gate-amplitudes or more (gates times
    /// 2^qubits) and `greedy` up to 2 qubits for shorter ones, which the measuring (5-10 ms)
    /// would slow more than it could speed them up
    #[arg(long, value_name = "auto|cost|greedy", default_value = "auto")]
    fuse_rule: String,
    /// Dynamic circuits: auto, branches or trajectories.
    #[arg(long, value_name = "METHOD", default_value = "auto")]
    dynamic_method: String,
    /// Instead of a circuit: time the kernel of each gate width (1 to 6 qubits) on a state of
    /// --bench-qubits, against the bounds of this CPU's measured FMA throughput and the
    /// state's measured streaming bandwidth
    #[arg(long, conflicts_with = "circuit")]
    bench_kernels: bool,
    /// Instead of a circuit, under `mpirun -np 2` (or more; a build with --features mpi):
    /// measure the bandwidth and latency between ranks as exchanges use them (messages of
    /// --exchange-message), for --plan-cluster's network= and latency=
    #[arg(long, conflicts_with_all = ["circuit", "bench_kernels"])]
    bench_network: bool,
    /// The state's qubits for --bench-kernels
    #[arg(
        long,
        value_name = "N",
        default_value_t = 24,
        requires = "bench_kernels"
    )]
    bench_qubits: usize,
    /// Over MPI ranks: send exchanges in messages of at most SIZE, each in flight while the
    /// next is gathered (its chunk read) and the last scattered (its chunk written)
    #[arg(long, value_name = "SIZE", default_value = "256K", value_parser = parse_size)]
    exchange_message: u64,
    /// Instead of running: predict the run over a cluster of MPI ranks from the circuit's
    /// communication plan and this machine's measured kernel costs and memory bandwidth, e.g.
    /// ranks=16,nodes=4,network=12.5G (the other keys in --help)
    #[arg(long, value_name = "SPEC")]
    plan_cluster: Option<String>,
    /// With --plan-cluster ranks=A..B: also write the predicted seconds by ranks as an SVG plot
    #[arg(long, value_name = "FILE.svg", requires = "plan_cluster")]
    plot: Option<PathBuf>,
    /// Print JSON for scripts
    #[arg(long)]
    json: bool,
}

impl Args {
    /// `--plan-cluster`: a report that runs nothing and changes nothing.
    pub fn only_plans(&self) -> bool {
        self.plan_cluster.is_some()
    }
}

/// The simulator's error as the circuit file's ([`QsimError::in_file`]).
fn qsim_error(path: &std::path::Path, err: QsimError) -> CliError {
    CliError::classified(err.in_file(path))
}

/// `--ssd DIR[:SIZE]`, parsed when the arguments are.
fn ssd_arg(text: &str) -> Result<(PathBuf, Option<u64>), std::convert::Infallible> {
    // DIR:SIZE, where SIZE parses as a size; a path with a colon and no size stays a path.
    if let Some((dir, size)) = text.rsplit_once(':') {
        if let Ok(cap) = parse_size(size) {
            return Ok((PathBuf::from(dir), Some(cap)));
        }
    }
    Ok((PathBuf::from(text), None))
}

pub fn run(args: Args) -> CliResult {
    if args.bench_network {
        return cluster::bench_network(&args);
    }
    let Some(path) = args.circuit.clone() else {
        return bench_kernels(&args);
    };
    let max_gates = parse_max_gates(&args.max_gates).map_err(CliError::classified)?;
    let started = Instant::now();
    // Read as it is parsed: a file far past the gate limit is refused there, in the memory the
    // gates up to the limit take, not after it is all read.
    let file = std::fs::File::open(&path)
        .map_err(|e| CliError::bad_input(format!("cannot read circuit {}: {e}", path.display())))?;
    let circuit = parse_reader(file, &ParseOptions::new().max_gates(max_gates))
        .map_err(|e| qsim_error(&path, e))?;
    // On stderr, so that --json's stdout stays one document.
    for w in &circuit.warnings {
        eprintln!("cxltier qsim: warning: {}: {w}", path.display());
    }
    let parse_seconds = started.elapsed().as_secs_f64();
    // Sampling's buffers are checked before the simulation runs, not after it.
    check_sampling_memory(args.shots).map_err(CliError::classified)?;
    let method: cxltier_qsim::Method = args.dynamic_method.parse().map_err(|e: String| {
        CliError::bad_input(format!("--dynamic-method {}: {e}", args.dynamic_method))
    })?;
    let width = Width::parse(&args.fuse, &args.fuse_rule).map_err(CliError::classified)?;
    let mut options = Options::new().dynamic_method(method).fusion(width);
    if let Some(t) = args.threads {
        options = options.threads(check_threads(t).map_err(CliError::classified)?);
    }
    if let Some(bytes) = args.memory_limit {
        cxltier_qsim::check_memory_limit(bytes).map_err(CliError::classified)?;
        options = options.memory_limit(bytes);
    }
    options = options.exchange_message(args.exchange_message);
    for (dir, cap) in &args.ssd {
        options = options.ssd(dir.clone(), *cap);
    }
    if let Some(spec) = &args.interleave {
        let root = std::path::Path::new("/");
        let weights =
            machine_weights(spec, args.nodes.as_deref(), root).map_err(CliError::classified)?;
        options = options.weights(weights);
    }
    let indices = args
        .amplitudes
        .as_deref()
        .map(parse_amplitude_indices)
        .transpose()
        .map_err(CliError::classified)?
        .unwrap_or_default();
    let precision: Precision = args.precision.parse().map_err(CliError::classified)?;
    // A bar on a terminal for a run that lasts (not with --json: then stderr is for errors).
    let drawer = (!args.json && std::io::stderr().is_terminal()).then(|| {
        let progress = Arc::new(Progress::new());
        options = options.clone().progress(Arc::clone(&progress));
        let bar = ProgressBar {
            started: Instant::now(),
            bar: None,
        };
        ProgressWatcher::start(progress, bar)
    });
    // Under `mpirun -np R` with R > 1, the state is split over the ranks; one rank (or no
    // mpirun) runs exactly as without MPI, which is then never initialised.
    let ranks = cxltier_qsim::dist::launched_ranks().unwrap_or(1);
    if let Some(spec) = &args.plan_cluster {
        drop(drawer);
        return cluster::plan_cluster(&args, &path, &circuit, spec, precision);
    }
    let run = Run::new(&circuit, path.display().to_string())
        .options(options)
        .precision(precision)
        .shots(args.shots)
        .seed(args.seed)
        .amplitudes(indices)
        .parse_seconds(parse_seconds);
    let output = if ranks > 1 {
        drop(drawer);
        match simulate_ranks(&path, &run)? {
            Some(output) => output,
            // Another rank than 0: it took part, rank 0 prints.
            None => return Ok(ExitCode::SUCCESS),
        }
    } else {
        let simulated = run.simulate().map_err(|e| qsim_error(&path, e))?;
        // The bar goes before anything else is printed.
        drop(drawer);
        simulated.read_out().map_err(|e| qsim_error(&path, e))?
    };
    if args.json {
        print_json("qsim", &output)?;
    } else {
        print!("{}", render(&output));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(feature = "mpi"))]
fn simulate_ranks(_path: &std::path::Path, _run: &Run<'_>) -> Result<Option<RunOutput>, CliError> {
    Err(CliError::bad_input(
        "started by mpirun over several ranks, but this cxltier was built without MPI: build it \
         with `cargo build --release -p cxltier --features mpi` (needs Open MPI), or run it \
         without mpirun",
    ))
}

/// The run over MPI ranks: every rank runs its part and takes part in the read-out; rank 0
/// has the output to print. A rank that fails says so with its number and ends every rank
/// (`MPI_Abort`), since the others would wait for it forever.
#[cfg(feature = "mpi")]
fn simulate_ranks(path: &std::path::Path, run: &Run<'_>) -> Result<Option<RunOutput>, CliError> {
    use cxltier_qsim::dist::mpi::Cluster;
    let cluster = Cluster::init().map_err(|e| qsim_error(path, e))?;
    let (rank, size) = (cluster.rank(), cluster.size());
    let output = run.simulate_ranks(&cluster).unwrap_or_else(|e| {
        let e = qsim_error(path, e);
        let mut text = format!("cxltier qsim: rank {rank} of {size}: {}\n", e.message);
        if let Some(hint) = &e.hint {
            text.push_str(&format!("hint: {hint}\n"));
        }
        crate::error::write_stderr(&text);
        cluster.abort(i32::from(e.kind.exit_code()))
    });
    Ok((rank == 0).then_some(output))
}

/// Draws a run's progress on stderr as a [`ProgressWatcher`] tells it: the bar appears with the
/// first report (once the run has lasted [`ProgressWatcher::QUIET`]) and is cleared when the
/// watcher is dropped, before results print.
struct ProgressBar {
    started: Instant,
    bar: Option<indicatif::ProgressBar>,
}

impl ProgressSink for ProgressBar {
    fn show(&mut self, now: &ProgressSnapshot, streamed_per_second: f64) {
        let started = self.started;
        let bar = self.bar.get_or_insert_with(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                None,
                indicatif::ProgressDrawTarget::stderr(),
            )
            .with_elapsed(started.elapsed());
            bar.set_style(
                indicatif::ProgressStyle::with_template("qsim {elapsed_precise} {msg}")
                    .expect("valid template"),
            );
            bar
        });
        bar.set_message(progress_line(now, streamed_per_second));
    }

    fn finish(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// What the bar says: a dynamic circuit's shots; otherwise the fused gates and sweeps in memory,
/// or the blocks, passes and the state's streaming rate (read, computed, written) out of core.
fn progress_line(p: &ProgressSnapshot, streamed_per_second: f64) -> String {
    if p.shots_total > 0 {
        // A dynamic run is made of shots: its gates and sweeps start again each shot.
        format!("shots {}/{}", p.shots_done, p.shots_total)
    } else if p.blocks_total > 0 {
        format!(
            "blocks {}/{}, passes {}, {}/s through the state",
            p.blocks_done,
            p.blocks_total,
            p.passes_done,
            format_bytes(streamed_per_second as u64)
        )
    } else if p.gates_total > 0 {
        format!(
            "fused gates {}/{}, sweeps {}",
            p.gates_done, p.gates_total, p.sweeps_done
        )
    } else {
        "setting up".into()
    }
}

fn render(out: &RunOutput) -> String {
    let r = &out.run;
    let mut s = format!(
        "{} qubits, {} gates ({} after fusion up to {} qubits, {} rule), {}, {} ({} bytes), {} \
         threads\n",
        r.qubits,
        r.gates,
        r.fused_gates,
        r.fuse_width,
        r.fuse_rule,
        r.precision,
        r.mode.replace('_', " "),
        r.state_bytes,
        r.threads
    );
    let p = &r.placement;
    s += &format!(
        "chunks: {} of {} bytes in memory{}, {} spilled\n",
        p.memory_chunks,
        p.chunk_bytes,
        if p.pages_per_node.is_empty() {
            String::new()
        } else {
            format!(
                " (pages per node: {})",
                p.pages_per_node
                    .iter()
                    .map(|(n, c)| format!("node{n}={c}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        },
        p.spilled_chunks
    );
    if r.mode == "out_of_core" {
        s += &format!(
            "passes: {} ({} without relabelling qubits), {} local qubits\n",
            r.passes,
            r.passes_without_relabelling.unwrap_or(0),
            r.local_qubits.unwrap_or(0)
        );
        let mut t =
            Table::from_header("pass|gates|fused|read MB|written MB|seconds|compute s|io wait s");
        for (i, pr) in r.pass_reports.iter().enumerate() {
            t.row([
                i.to_string(),
                pr.gates.to_string(),
                pr.fused_gates.to_string(),
                format!("{:.1}", pr.io.bytes_read as f64 / 1e6),
                format!("{:.1}", pr.io.bytes_written as f64 / 1e6),
                format!("{:.3}", pr.io.wall_seconds),
                format!("{:.3}", pr.io.compute_seconds),
                format!("{:.3}", pr.io.io_wait_seconds),
            ]);
        }
        s += &t.render();
    }
    s += &format!(
        "norm {:.12}; simulate {:.3} s ({:.0} gates/s), setup {:.3} s, readout {:.3} s\n",
        out.norm,
        out.timings.simulate_seconds,
        out.gates_per_second,
        out.timings.setup_seconds,
        out.timings.readout_seconds
    );
    if let Some(d) = &r.dynamic {
        s += &format!(
            "dynamic: {} shots by {} ({} run{}), prefix of {} gates run once, {} copies of the \
             state made (at most {} open)\n",
            d.shots,
            d.method,
            d.branches,
            if d.branches == 1 { "" } else { "s" },
            d.prefix_gates,
            d.copies_made,
            d.open_copies_max
        );
    }
    if !out.indices.is_empty() {
        let mut t = Table::new(["index", "re", "im", "probability"]);
        for (i, v) in out.indices.iter().zip(&out.values) {
            t.row([
                i.to_string(),
                format!("{:+.12}", v[0]),
                format!("{:+.12}", v[1]),
                format!("{:.12}", v[0] * v[0] + v[1] * v[1]),
            ]);
        }
        s += &t.render();
    }
    if !out.counts.is_empty() {
        let mut by_count: Vec<(&String, &u64)> = out.counts.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut t = Table::new(["outcome", "count"]);
        for (k, c) in by_count.iter().take(16) {
            t.row([k.to_string(), c.to_string()]);
        }
        s += &t.render();
        if by_count.len() > 16 {
            s += &format!(
                "({} more outcomes; --json lists all)\n",
                by_count.len() - 16
            );
        }
    }
    s
}

/// `--bench-kernels`: every gate width's kernel against the machine's bounds.
fn bench_kernels(args: &Args) -> CliResult {
    let precision: Precision = args.precision.parse().map_err(CliError::classified)?;
    let mut config = KernelBenchConfig::new(args.bench_qubits).precision(precision);
    if let Some(t) = args.threads {
        config = config.threads(t);
    }
    let bench = config.run().map_err(CliError::classified)?;
    if args.json {
        print_json("qsim --bench-kernels", &bench)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut s = format!(
        "{} qubits at {}, {} threads: {:.1} G fused multiply-adds/s, {:.2} GB/s streaming \
         (read and write each)\n",
        bench.qubits,
        bench.precision,
        bench.threads,
        bench.fma_per_second / 1e9,
        bench.stream_bytes_per_second / 1e9
    );
    let mut t = Table::from_header("k|targets|ns/amplitude|FMA bound|memory bound|of bound");
    for k in &bench.kernels {
        t.row([
            k.k.to_string(),
            format!("{:?}", k.positions),
            format!("{:.3}", k.ns_per_amplitude),
            format!("{:.3}", k.fma_bound_ns),
            format!("{:.3}", k.memory_bound_ns),
            format!("{:.2}", k.fraction_of_bound),
        ]);
    }
    s += &t.render();
    print!("{s}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_says_what_the_run_is_made_of() {
        let mut p = ProgressSnapshot::default();
        assert_eq!(progress_line(&p, 0.0), "setting up");
        p.gates_total = 359;
        p.gates_done = 69;
        p.sweeps_done = 11;
        assert_eq!(progress_line(&p, 0.0), "fused gates 69/359, sweeps 11");
        p.blocks_total = 1520;
        p.blocks_done = 74;
        p.passes_done = 4;
        let line = progress_line(&p, 512.0 * 1024.0 * 1024.0);
        assert!(line.starts_with("blocks 74/1520, passes 4, "), "{line}");
        assert!(line.ends_with("/s through the state"), "{line}");
        p.shots_total = 2000;
        p.shots_done = 13;
        assert_eq!(progress_line(&p, 0.0), "shots 13/2000");
    }
}
