//! `cxltier`: a thin command line over the cxltier libraries.
//!
//! Each subcommand lives in its own module under `cmd/`, owns its clap arguments, and turns library
//! results into a table for people or stable JSON for scripts. Errors become [`CliError`], which
//! carries the exit code scripts rely on (see `error.rs`).

mod cmd;
mod error;
mod output;
mod plot;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub use error::CliError;

// mimalloc, as Redis ships jemalloc: the server allocates and frees small buffers per command
// (arguments, list members, encoded chunks), and glibc's malloc, with its bin consolidation,
// was 6-7% of the server's time under LPUSH/LPOP (docs/benchmarks.md, "Lists").
// Built without its own transparent-huge-page advice (`no_thp`): with it, the first small
// allocation in each 2 MiB of its arenas made the kernel zero a whole huge page, and where freed
// memory had been handed back to a hypervisor that took several milliseconds each; `cxltier qsim`
// spent up to 40 of its 60 ms on a 20-qubit circuit so (docs/benchmarks.md, "qsim: lanes in
// pieces"). Large buffers that gain from huge pages (a simulator's state) ask for them
// themselves.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Completions(cmd::completions::Args),
    Man(cmd::man::Args),
}

/// Whether a command line clap could not parse asks for JSON: `--json` before any `--` (after
/// which the arguments are another program's, as in `cxltier tierd --tune -- CMD`), so that the
/// error clap reports is JSON too. A parsed command line says so itself ([`json_flag`]).
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

/// Whether the parsed command (or its subcommand: `store check`) was given `--json`.
fn json_flag(matches: &clap::ArgMatches) -> bool {
    let mut m = matches;
    loop {
        if matches!(m.try_get_one::<bool>("json"), Ok(Some(true))) {
            return true;
        }
        match m.subcommand() {
            Some((_, sub)) => m = sub,
            None => return false,
        }
    }
}

/// The command as the JSON envelope names it: the subcommands (`topo`, `store check`), and
/// `ycsb hit-bound` and `ycsb page-bound` for those phases of `ycsb` (their documents differ
/// from a run's).
fn command_name(matches: &clap::ArgMatches) -> String {
    let mut names = Vec::new();
    let mut m = matches;
    while let Some((name, sub)) = m.subcommand() {
        names.push(name.to_string());
        m = sub;
    }
    if let Ok(Some(mut phase)) = m.try_get_raw("phase") {
        if let Some(p) = phase
            .next()
            .and_then(|p| p.to_str())
            .filter(|&p| p == "hit-bound" || p == "page-bound")
        {
            names.push(p.to_string());
        }
    }
    names.join(" ")
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
    use clap::{CommandFactory, FromArgMatches};
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let parsed = Cli::command()
        .try_get_matches_from(&argv)
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, json_flag(&m), command_name(&m))));
    let (cli, json, command) = match parsed {
        Ok(parsed) => parsed,
        Err(e) if wants_json(&argv) && e.use_stderr() => {
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
    // Commands that print a report and change nothing end quietly when their reader goes away
    // (`cxltier plan --json | head`), as C tools do, instead of panicking on EPIPE.
    if matches!(
        cli.command,
        Command::Topo(_)
            | Command::Plan(_)
            | Command::Show(_)
            | Command::Store(_)
            | Command::Completions(_)
            | Command::Man(_)
    ) || matches!(&cli.command, Command::Qsim(a) if a.only_plans())
    {
        cxltier_sys::signal::default_sigpipe();
    }
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
        // Both are generated from the definition above, so they take it whole.
        Command::Completions(args) => cmd::completions::run(args, Cli::command()),
        Command::Man(args) => cmd::man::run(args, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(err) if json => err.report_json(&command),
        Err(err) => err.report(),
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
    fn the_parsed_json_flag_is_the_commands_own() {
        use clap::CommandFactory;
        let flag = |args: &[&str]| json_flag(&Cli::command().get_matches_from(argv(args)));
        assert!(flag(&["cxltier", "topo", "--json"]));
        assert!(flag(&["cxltier", "store", "check", "/x", "--json"]));
        assert!(!flag(&["cxltier", "topo"]));
        // The program's own arguments are not cxltier's.
        assert!(!flag(&[
            "cxltier", "run", "--bind", "0", "--", "touch", "--json"
        ]));
    }

    #[test]
    fn an_error_names_the_command_as_its_document_does() {
        use clap::CommandFactory;
        let name = |args: &[&str]| command_name(&Cli::command().get_matches_from(argv(args)));
        assert_eq!(name(&["cxltier", "topo", "--json"]), "topo");
        assert_eq!(
            name(&["cxltier", "store", "check", "/x", "--json"]),
            "store check"
        );
        assert_eq!(
            name(&["cxltier", "ycsb", "hit-bound", "--cache-objects", "9"]),
            "ycsb hit-bound"
        );
        assert_eq!(
            name(&["cxltier", "ycsb", "page-bound", "--cache-pages", "9"]),
            "ycsb page-bound"
        );
        assert_eq!(name(&["cxltier", "ycsb", "run"]), "ycsb");
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
