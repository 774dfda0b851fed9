//! `cxltier`: a thin command line over the cxltier libraries.
//!
//! Each subcommand lives in its own module under `cmd/`, owns its clap arguments, and turns library
//! results into a table for people or stable JSON for scripts. Errors become [`CliError`], which
//! carries the exit code scripts rely on (see `error.rs`).

mod cmd;
mod error;
mod live;
mod output;
mod plot;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub use error::CliError;

/// Memory tiering for CXL-era Linux servers.
///
/// Finds the memory tiers (local DRAM, CPU-less CXL nodes, NVMe), predicts what a placement of pages
/// over them delivers, chooses weighted-interleave weights for a workload's read:write mix, applies
/// them, runs programs under a memory policy, and shows where memory really landed.
#[derive(Parser)]
#[command(
    name = "cxltier",
    version,
    propagate_version = true,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Topo(cmd::topo::Args),
    Probe(cmd::probe::Args),
    Plan(cmd::plan::Args),
    Apply(cmd::apply::Args),
    Run(cmd::run::Args),
    Show(cmd::show::Args),
    Touch(cmd::touch::Args),
    Serve(cmd::serve::Args),
    Store(cmd::store::Args),
    Ycsb(cmd::ycsb::Args),
    Tierd(cmd::tierd::Args),
    Qsim(cmd::qsim::Args),
    Ras(cmd::ras::Args),
}

/// Whether the command line asks for JSON: `--json` before any `--` (after which the arguments
/// are another program's, as in `cxltier tierd --tune -- CMD`). Read from the raw arguments so
/// that an error clap reports while parsing is JSON too.
fn wants_json(args: &[std::ffi::OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// The subcommand named on the command line (its first argument not starting with `-`), for the
/// error object when parsing failed; `cxltier` when none is named.
fn named_command(args: &[std::ffi::OsString]) -> String {
    use clap::CommandFactory;
    let known = Cli::command();
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .filter_map(|a| a.to_str())
        .find(|a| !a.starts_with('-'))
        .filter(|a| known.find_subcommand(a).is_some())
        .unwrap_or("cxltier")
        .to_string()
}

/// clap's rendered error as one line (without its `error: ` prefix and the usage that follows),
/// and its `tip:`, if any.
fn clap_message(rendered: &str) -> (String, Option<String>) {
    let mut message = Vec::new();
    let mut tip = None;
    for line in rendered.lines() {
        let line = line.trim();
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if let Some(t) = line.strip_prefix("tip: ") {
            tip = Some(t.to_string());
        } else if !line.is_empty() {
            message.push(line.trim_start_matches("error: "));
        }
    }
    (message.join(" "), tip)
}

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let json = wants_json(&argv);
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) if json && e.use_stderr() => {
            let command = named_command(&argv);
            let (message, tip) = clap_message(&e.render().to_string());
            let help = if command == "cxltier" {
                "see `cxltier --help`".to_string()
            } else {
                format!("see `cxltier {command} --help`")
            };
            let hint = match tip {
                Some(tip) => format!("{tip}; {help}"),
                None => help,
            };
            return CliError::bad_input(message)
                .with_hint(hint)
                .report_json(&command);
        }
        Err(e) => e.exit(),
    };
    let command = cli.command.name();
    let result = match cli.command {
        Command::Topo(args) => cmd::topo::run(args),
        Command::Probe(args) => cmd::probe::run(args),
        Command::Plan(args) => cmd::plan::run(args),
        Command::Apply(args) => cmd::apply::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Show(args) => cmd::show::run(args),
        Command::Touch(args) => cmd::touch::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Store(args) => cmd::store::run(args),
        Command::Ycsb(args) => cmd::ycsb::run(args),
        Command::Tierd(args) => cmd::tierd::run(args),
        Command::Qsim(args) => cmd::qsim::run(args),
        Command::Ras(args) => cmd::ras::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) if json => err.report_json(command),
        Err(err) => err.report(),
    }
}

impl Command {
    /// The subcommand's name, as the JSON envelope's `command` of an error.
    fn name(&self) -> &'static str {
        match self {
            Command::Topo(_) => "topo",
            Command::Probe(_) => "probe",
            Command::Plan(_) => "plan",
            Command::Apply(_) => "apply",
            Command::Run(_) => "run",
            Command::Show(_) => "show",
            Command::Touch(_) => "touch",
            Command::Serve(_) => "serve",
            Command::Store(_) => "store",
            Command::Ycsb(_) => "ycsb",
            Command::Tierd(_) => "tierd",
            Command::Qsim(_) => "qsim",
            Command::Ras(_) => "ras",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<std::ffi::OsString> {
        args.iter().map(Into::into).collect()
    }

    #[test]
    fn json_is_asked_for_before_the_other_programs_arguments_only() {
        assert!(wants_json(&argv(&["cxltier", "topo", "--json"])));
        assert!(!wants_json(&argv(&["cxltier", "topo"])));
        assert!(!wants_json(&argv(&[
            "cxltier", "tierd", "--tune", "--", "prog", "--json"
        ])));
        assert_eq!(
            named_command(&argv(&["cxltier", "--json", "plan", "--mix"])),
            "plan"
        );
        assert_eq!(
            named_command(&argv(&["cxltier", "--json", "nosuch"])),
            "cxltier"
        );
    }

    #[test]
    fn clap_errors_become_one_line_and_a_tip() {
        let rendered = "error: the following required arguments were not provided:\n  <PHASE>\n\n\
                        Usage: cxltier ycsb <PHASE>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            clap_message(rendered),
            (
                "the following required arguments were not provided: <PHASE>".to_string(),
                None
            )
        );
        let rendered = "error: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as \
                        a value, use '-- --bogus'\n\nUsage: cxltier topo [OPTIONS]\n";
        assert_eq!(
            clap_message(rendered),
            (
                "unexpected argument '--bogus' found".to_string(),
                Some("to pass '--bogus' as a value, use '-- --bogus'".to_string())
            )
        );
    }
}
