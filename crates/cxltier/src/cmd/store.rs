//! `cxltier store check PATH`: verify a store's NVMe log offline.

use std::path::PathBuf;
use std::process::ExitCode;

use cxltier_store::log::DEFAULT_SEGMENT_SIZE;
use cxltier_store::{check_log, LogCheck};

use crate::error::{CliError, CliResult};
use crate::output::{print_json, Table};

const LONG_HELP: &str = "\
check reads the log file (or block device) given to `cxltier serve --ssd` the way a start would
recover it, without writing to it and without O_DIRECT (run it on a copy, or while no server has
the file open): its segments and records, the keys a start would serve and the deleted ones,
every range that could not be read (segment, offsets, bytes, file offset), and the keys whose
newest readable record comes before a damaged range (a newer version or a delete of theirs may
be lost). A write torn by a crash at the end of the newest segment is shown but is not damage.

Exit status: 0 clean, 1 damaged (a start would be refused without --recover-anyway), 2 a path
that is not a readable log.";

/// Work on a store's files offline
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    Check(CheckArgs),
}

/// Verify a store's NVMe log offline (read-only): segments, records, keys, damage
#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct CheckArgs {
    /// The log file or block device (the PATH of `serve --ssd PATH:SIZE`)
    #[arg(value_name = "PATH")]
    path: PathBuf,
    /// Print JSON for scripts
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    match args.command {
        Command::Check(a) => check(a),
    }
}

fn check(args: CheckArgs) -> CliResult {
    let meta = std::fs::metadata(&args.path).map_err(|e| {
        CliError::bad_input(format!("{}: {e}", args.path.display()))
            .with_hint("give the PATH of a store's --ssd PATH:SIZE")
    })?;
    if meta.is_dir() {
        return Err(CliError::bad_input(format!(
            "{} is a directory, not a log file",
            args.path.display()
        ))
        .with_hint("give the PATH of a store's --ssd PATH:SIZE"));
    }
    let c = check_log(&args.path, DEFAULT_SEGMENT_SIZE).map_err(CliError::classified)?;
    if c.report.segments_replayed == 0 && c.report.damaged.is_empty() && meta.len() > 0 {
        // Not an error in itself (a new log has no segment yet), but worth saying.
        eprintln!(
            "cxltier store check: {} holds no log segment",
            args.path.display()
        );
    }
    if args.json {
        print_json("store check", &c)?;
    } else {
        print!("{}", render(&c));
    }
    Ok(if c.start_refused {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn render(c: &LogCheck) -> String {
    let r = &c.report;
    let mut out = format!(
        "{}: {} bytes, segments of {} bytes\n  segments replayed: {}\n  records: {}\n  keys: {}\n  deleted keys: {}\n  headers identified from their records: {}\n",
        c.path.display(),
        r.file_bytes,
        c.segment_size,
        r.segments_replayed,
        r.records,
        c.keys,
        c.deleted_keys,
        r.headers_repaired
    );
    if let Some(t) = &r.torn_tail {
        out.push_str(&format!("  torn write (not damage): {t}\n"));
    }
    if r.damaged.is_empty() {
        out.push_str("  damage: none; a start recovers everything\n");
        return out;
    }
    out.push_str(&format!(
        "  damage: {} range(s), {} bytes; {} key(s) may have lost a newer version or a delete\n",
        r.damaged.len(),
        c.damaged_bytes,
        c.keys_possibly_stale
    ));
    let mut t = Table::new(["segment", "seq", "offset", "bytes", "file offset", "what"]);
    for d in &r.damaged {
        t.row([
            d.segment.to_string(),
            d.segment_seq.map_or("?".into(), |s| s.to_string()),
            d.offset.to_string(),
            d.bytes.to_string(),
            d.file_offset.to_string(),
            d.kind.to_string(),
        ]);
    }
    out.push_str(&t.render());
    out.push_str(
        "  a start is refused: restore the file from a copy (or repair the bytes), or start with --recover-anyway to serve what is readable\n",
    );
    out
}
