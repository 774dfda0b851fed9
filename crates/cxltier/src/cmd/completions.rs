//! `cxltier completions SHELL`: the shell's completion script, generated from the same clap
//! definition that parses the command line, so it cannot fall behind it.

use crate::error::{CliError, CliResult};
use std::io::Write;
use std::process::ExitCode;

/// Where each shell looks for a user's completion scripts, for the long help.
const LONG_HELP: &str = "\
Prints the completion script on stdout. Where to put it:
  bash        ~/.local/share/bash-completion/completions/cxltier (read by bash-completion
              when `cxltier` is first completed; scripts/plan installs it there)
  zsh         a file named _cxltier in a directory of $fpath, before `compinit` runs
  fish        ~/.config/fish/completions/cxltier.fish
  elvish      `eval (cxltier completions elvish | slurp)` in ~/.config/elvish/rc.elv
  powershell  `cxltier completions powershell | Out-String | Invoke-Expression` in $PROFILE";

/// Print a shell completion script for cxltier
#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// The shell to complete in
    #[arg(value_enum, value_name = "SHELL")]
    shell: clap_complete::Shell,
}

/// The script for `shell`, completing the command named `cxltier`.
pub fn script(shell: clap_complete::Shell, mut cli: clap::Command) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cli, "cxltier", &mut out);
    out
}

pub fn run(args: Args, cli: clap::Command) -> CliResult {
    let text = script(args.shell, cli);
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(&text)
        .and_then(|()| stdout.flush())
        .map_err(|e| CliError::runtime(format!("could not write the completion script: {e}")))?;
    Ok(ExitCode::SUCCESS)
}
