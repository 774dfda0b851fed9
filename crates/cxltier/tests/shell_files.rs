//! `cxltier completions` and `cxltier man`: generated from the command line's own definition, so
//! every subcommand `--help` lists has its completion and its page.

mod util;
use std::path::Path;
use std::process::Command;
use util::{assert_refused, cxltier, stdout_ok, BIN};

/// The subcommands `--help` lists under `Commands:` (without clap's `help`).
fn subcommands_in_help(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        // Entries start with two spaces; their wrapped descriptions with more.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(String::from)
        .collect()
}

/// Every command path: `["show"]`, `["store", "check"]`, ...
fn command_paths() -> Vec<Vec<String>> {
    let top = subcommands_in_help(&stdout_ok(&["--help"]));
    for expected in [
        "topo",
        "plan",
        "show",
        "serve",
        "tierd",
        "completions",
        "man",
    ] {
        assert!(top.iter().any(|c| c == expected), "{expected} in {top:?}");
    }
    let mut paths = Vec::new();
    // Breadth first with a queue: the tree is two levels deep today, and may grow.
    let mut todo: std::collections::VecDeque<Vec<String>> =
        top.into_iter().map(|c| vec![c]).collect();
    while let Some(path) = todo.pop_front() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        for sub in subcommands_in_help(&stdout_ok(&args)) {
            let mut deeper = path.clone();
            deeper.push(sub);
            todo.push_back(deeper);
        }
        paths.push(path);
    }
    assert!(
        paths.iter().any(|p| p == &["store", "check"]),
        "nested subcommands are found: {paths:?}"
    );
    paths
}

#[test]
fn completions_name_every_subcommand_in_every_shell() {
    let paths = command_paths();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = stdout_ok(&["completions", shell]);
        for path in &paths {
            let name = path.last().unwrap();
            assert!(
                script.contains(name.as_str()),
                "{shell}: no {name} ({path:?})"
            );
        }
        // Options too: one that only `show` has.
        assert!(script.contains("--top"), "{shell}: no --top");
    }
}

#[test]
fn bash_completes_subcommands_and_options() {
    if Command::new("bash").arg("--version").output().is_err() {
        return; // no bash to run the script in
    }
    let script = stdout_ok(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cxltier");
    std::fs::write(&file, &script).unwrap();
    // What bash-completion does on Tab: call the function with the words so far.
    let complete = |words: &[&str]| {
        let line = words.join(" ");
        let program = format!(
            "source {file}; COMP_WORDS=({line}); COMP_CWORD={cword}; COMP_LINE='{line}'; \
             COMP_POINT={point}; _cxltier cxltier {cur} {prev}; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file = file.display(),
            cword = words.len() - 1,
            point = line.len(),
            cur = words[words.len() - 1],
            prev = words[words.len() - 2],
        );
        let out = Command::new("bash")
            .args(["-c", &program])
            .output()
            .unwrap();
        util::assert_ok(&program, &out)
    };
    assert_eq!(complete(&["cxltier", "sh"]).trim(), "show");
    let all = complete(&["cxltier", "''"]);
    for path in command_paths().iter().filter(|p| p.len() == 1) {
        assert!(all.lines().any(|l| l == path[0]), "{} in\n{all}", path[0]);
    }
    assert!(complete(&["cxltier", "show", "--t"])
        .lines()
        .any(|l| l == "--top"));
    let shells = complete(&["cxltier", "completions", "''"]);
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        assert!(shells.lines().any(|l| l == shell), "{shell} in\n{shells}");
    }
}

#[test]
fn an_unknown_shell_is_refused_with_the_known_ones() {
    let args = ["completions", "tcsh"];
    assert_refused(
        args,
        &cxltier(&args),
        2,
        &[
            "invalid value 'tcsh'",
            "bash, elvish, fish, powershell, zsh",
        ],
    );
}

/// The page's `.TH` line: title and section.
fn title(page: &str) -> Option<(String, String)> {
    let th = page.lines().find(|l| l.starts_with(".TH "))?;
    let mut words = th.split_whitespace().skip(1);
    Some((words.next()?.to_string(), words.next()?.to_string()))
}

#[test]
fn man_writes_a_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let man1 = dir.path().join("share/man/man1");
    let man1_arg = man1.to_str().unwrap();
    let first = stdout_ok(&["man", "--dir", man1_arg]);
    let paths = command_paths();
    let mut names = vec!["cxltier".to_string()];
    names.extend(paths.iter().map(|p| format!("cxltier-{}", p.join("-"))));
    for name in &names {
        let file = man1.join(format!("{name}.1"));
        let page = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: {e}\n{first}", file.display()));
        assert_eq!(
            title(&page),
            Some((name.clone(), "1".to_string())),
            "{name}"
        );
        assert!(page.contains(".SH NAME"), "{name}");
        assert!(page.contains(".SH SYNOPSIS"), "{name}");
        assert!(first.contains(&format!("  {name}.1\n")), "{first}");
    }
    let count = std::fs::read_dir(&man1).unwrap().count();
    assert_eq!(count, names.len(), "one page per command, nothing else");
    let show = std::fs::read_to_string(man1.join("cxltier-show.1")).unwrap();
    assert!(show.contains("numastat"), "the long help is in the page");
    assert!(show.contains(r"\-\-top"), "options are in the page");
    assert!(first.starts_with(&format!(
        "{} man page(s) in {man1_arg}: {} written, 0 already up to date",
        names.len(),
        names.len()
    )));

    // Again: nothing to do.
    let again = stdout_ok(&["man", "--dir", man1_arg]);
    assert_eq!(
        again.trim_end(),
        format!(
            "{} man page(s) in {man1_arg}: 0 written, {} already up to date",
            names.len(),
            names.len()
        )
    );
    // A page changed by hand is put back.
    std::fs::write(man1.join("cxltier-show.1"), "stale").unwrap();
    let repaired = stdout_ok(&["man", "--dir", man1_arg]);
    assert!(
        repaired.contains("1 written") && repaired.contains("  cxltier-show.1"),
        "{repaired}"
    );
    // A page of a command that is gone is removed; other programs' pages are not touched.
    std::fs::write(man1.join("cxltier-gone.1"), ".TH cxltier-gone 1").unwrap();
    std::fs::write(man1.join("numastat.8"), ".TH numastat 8").unwrap();
    std::fs::write(man1.join("cxltier-notes.txt"), "mine").unwrap();
    let cleaned = stdout_ok(&["man", "--dir", man1_arg]);
    assert!(
        cleaned.contains("1 of commands that no longer exist removed")
            && cleaned.contains("  cxltier-gone.1 (removed)"),
        "{cleaned}"
    );
    assert!(!man1.join("cxltier-gone.1").exists());
    assert!(man1.join("numastat.8").exists() && man1.join("cxltier-notes.txt").exists());
    std::fs::remove_file(man1.join("numastat.8")).unwrap();
    std::fs::remove_file(man1.join("cxltier-notes.txt")).unwrap();

    render_with_groff(&man1, &names);
}

/// Where groff is installed, every page formats without a warning.
fn render_with_groff(dir: &Path, names: &[String]) {
    if Command::new("groff").arg("--version").output().is_err() {
        return;
    }
    for name in names {
        let out = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(dir.join(format!("{name}.1")))
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}");
        assert!(
            out.stderr.is_empty(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn man_without_dir_prints_the_top_page() {
    let page = stdout_ok(&["man"]);
    assert_eq!(title(&page), Some(("cxltier".into(), "1".into())));
    assert!(page.contains(".SH SUBCOMMANDS"), "lists the subcommands");
    assert!(page.contains("cxltier\\-show(1)"), "{page}");
}

#[test]
fn man_dir_must_be_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let args = ["man", "--dir", file.to_str().unwrap()];
    assert_refused(args, &cxltier(&args), 2, &["is not a directory", "hint:"]);
}

/// The README's setup (`scripts/plan` runs `scripts/install-shell-files`) installs the bash
/// completion and the man pages into the user's directories, says where on stderr only, and a
/// second run changes nothing.
#[test]
fn the_setup_script_installs_for_the_user_idempotently() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-shell-files");
    let home = tempfile::tempdir().unwrap();
    let run = || {
        let out = Command::new("bash")
            .arg(&script)
            .arg(BIN)
            .env("HOME", home.path())
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("BASH_COMPLETION_USER_DIR")
            .output()
            .expect("run scripts/install-shell-files");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(out.status.success(), "{err}");
        assert!(out.stdout.is_empty(), "stdout stays the caller's");
        err
    };
    let data = home.path().join(".local/share");
    let completion = data.join("bash-completion/completions/cxltier");
    let says = |said: &str, what: String| assert!(said.contains(&what), "{what:?} in {said}");
    let first = run();
    says(
        &first,
        format!("bash completion: installed {}", completion.display()),
    );
    assert_eq!(
        std::fs::read_to_string(&completion).unwrap(),
        stdout_ok(&["completions", "bash"])
    );
    let man1 = data.join("man/man1");
    says(&first, format!("man page(s) in {}: ", man1.display()));
    assert!(man1.join("cxltier.1").is_file() && man1.join("cxltier-show.1").is_file());
    let pages = std::fs::read_dir(&man1).unwrap().count();

    let second = run();
    says(
        &second,
        format!("bash completion: {} (up to date)", completion.display()),
    );
    says(&second, format!(": 0 written, {pages} already up to date"));
    // No temporary files left beside the completion.
    let beside = std::fs::read_dir(completion.parent().unwrap())
        .unwrap()
        .count();
    assert_eq!(beside, 1);
}
