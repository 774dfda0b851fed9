//! `cxltier man [--dir DIR]`: man pages (roff) generated from the clap definition, one for the
//! top command and one for each subcommand (`cxltier-show.1`, `cxltier-store-check.1`, ...).

use crate::error::{CliError, CliResult};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const LONG_HELP: &str = "\
Without --dir, prints the page of `cxltier` itself on stdout (`cxltier man | man -l -` reads it).
With --dir, writes every page into DIR, creating it if needed, and lists what it wrote; pages
already there with the same text are left alone, and cxltier-*.1 pages of commands that no
longer exist are removed. scripts/plan installs them in
~/.local/share/man/man1, which `man` searches when ~/.local/bin is on PATH (otherwise add
~/.local/share/man to MANPATH).";

/// Write man pages for cxltier and each subcommand
#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// Write a page per command into DIR (cxltier.1, cxltier-show.1, ...)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Every page: (file name, roff text), the top command first, then its subcommands depth first.
pub fn pages(cli: clap::Command) -> Result<Vec<(String, Vec<u8>)>, std::io::Error> {
    // As clap_mangen's own `generate_to`: `help` is not a command worth a page, and building
    // gives each subcommand its display name (`cxltier-store-check`), which names its page.
    let mut cli = cli.disable_help_subcommand(true);
    cli.build();
    let mut out = Vec::new();
    // An explicit stack, not recursion: the tree is ours, but the rule is kept everywhere.
    let mut todo = vec![cli];
    while let Some(cmd) = todo.pop() {
        let subcommands: Vec<clap::Command> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .cloned()
            .collect();
        // The footer names the program and its version, not the subcommand's bare name.
        let man =
            clap_mangen::Man::new(cmd).source(format!("cxltier {}", env!("CARGO_PKG_VERSION")));
        let mut text = Vec::new();
        man.render(&mut text)?;
        out.push((man.get_filename(), text));
        todo.extend(subcommands.into_iter().rev());
    }
    Ok(out)
}

pub fn run(args: Args, cli: clap::Command) -> CliResult {
    let pages = pages(cli).map_err(|e| CliError::runtime(format!("could not render: {e}")))?;
    let Some(dir) = args.dir else {
        let (_, top) = &pages[0];
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(top)
            .and_then(|()| stdout.flush())
            .map_err(|e| CliError::runtime(format!("could not write the man page: {e}")))?;
        return Ok(ExitCode::SUCCESS);
    };
    if dir.exists() && !dir.is_dir() {
        return Err(
            CliError::bad_input(format!("--dir {} is not a directory", dir.display()))
                .with_hint("give a directory, e.g. ~/.local/share/man/man1"),
        );
    }
    std::fs::create_dir_all(&dir).map_err(|e| write_error(&dir, e))?;
    let (mut written, mut unchanged) = (Vec::new(), 0);
    for (name, text) in &pages {
        let path = dir.join(name);
        if std::fs::read(&path).is_ok_and(|old| old == *text) {
            unchanged += 1;
            continue;
        }
        // Written beside the page and renamed over it, so that `man` never reads half a page.
        let partial = dir.join(format!(".{name}.partial"));
        std::fs::write(&partial, text)
            .and_then(|()| std::fs::rename(&partial, &path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&partial);
                write_error(&path, e)
            })?;
        written.push(name.as_str());
    }
    // A page of a command that no longer exists would still be found by `man`.
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| write_error(&dir, e))? {
        let name = entry.map_err(|e| write_error(&dir, e))?.file_name();
        let Some(name) = name.to_str() else { continue };
        let ours = name == "cxltier.1" || (name.starts_with("cxltier-") && name.ends_with(".1"));
        if ours && !pages.iter().any(|(page, _)| page == name) {
            let path = dir.join(name);
            std::fs::remove_file(&path).map_err(|e| write_error(&path, e))?;
            removed.push(name.to_string());
        }
    }
    removed.sort();
    println!(
        "{} man page(s) in {}: {} written, {unchanged} already up to date{}",
        pages.len(),
        dir.display(),
        written.len(),
        if removed.is_empty() {
            String::new()
        } else {
            format!(
                ", {} of commands that no longer exist removed",
                removed.len()
            )
        }
    );
    for name in written {
        println!("  {name}");
    }
    for name in removed {
        println!("  {name} (removed)");
    }
    Ok(ExitCode::SUCCESS)
}

fn write_error(path: &Path, e: std::io::Error) -> CliError {
    let err = CliError::runtime(format!("could not write {}: {e}", path.display()));
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        err.with_class(crate::error::Class::Permission)
            .with_hint("choose a directory you can write, e.g. ~/.local/share/man/man1")
    } else {
        err
    }
}
