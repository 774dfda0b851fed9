//! ARCHITECTURE.md stays true: the crate edges it lists are exactly the `[dependencies]` between the
//! workspace's crates in their Cargo.toml files, every crate has its row in the table, and the
//! bird's-eye drawing puts each crate on a floor above every crate it uses. A dependency added or removed without updating the map fails
//! here, with the line to write.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The workspace's crates (every folder of `crates/` with a Cargo.toml) and, for each, the
/// workspace crates among its `[dependencies]` (dev- and build-dependencies are not edges of the
/// architecture: tests may use any crate).
fn edges_in_manifests() -> BTreeMap<String, BTreeSet<String>> {
    let mut crates = BTreeMap::new();
    for entry in std::fs::read_dir(root().join("crates")).expect("crates/ is readable") {
        let dir = entry.expect("crates/ entry").path();
        let manifest = dir.join("Cargo.toml");
        if !manifest.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&manifest).expect("Cargo.toml is readable");
        let doc: toml::Table = text
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        let name = doc["package"]["name"]
            .as_str()
            .expect("package.name")
            .to_string();
        let deps = doc
            .get("dependencies")
            .and_then(|d| d.as_table())
            .map(|t| {
                t.keys()
                    .filter(|k| k.starts_with("cxltier"))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        crates.insert(name, deps);
    }
    crates
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md is readable")
}

/// The `text` block under `## Crate edges`: one line per crate, `crate: dep, dep` (or `crate: -`).
fn edges_in_map(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let section = doc
        .split("\n## Crate edges")
        .nth(1)
        .expect("ARCHITECTURE.md has a `## Crate edges` section");
    let block = section
        .split("```text\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("`## Crate edges` holds a ```text block");
    let mut edges = BTreeMap::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let (name, deps) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("crate edge line without `:`: {line:?}"));
        let deps: BTreeSet<String> = deps
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty() && *d != "-")
            .map(String::from)
            .collect();
        let previous = edges.insert(name.trim().to_string(), deps);
        assert!(previous.is_none(), "{} is listed twice", name.trim());
    }
    edges
}

fn edge_line(name: &str, deps: &BTreeSet<String>) -> String {
    if deps.is_empty() {
        format!("{name}: -")
    } else {
        format!(
            "{name}: {}",
            deps.iter().cloned().collect::<Vec<_>>().join(", ")
        )
    }
}

#[test]
fn crate_edges_in_the_map_are_the_manifests_edges() {
    let real = edges_in_manifests();
    let drawn = edges_in_map(&architecture());
    let mut problems = Vec::new();
    for (name, deps) in &real {
        match drawn.get(name) {
            None => problems.push(format!(
                "{name} is missing: add `{}`",
                edge_line(name, deps)
            )),
            Some(d) if d != deps => problems.push(format!(
                "{name}: the map says `{}`, its Cargo.toml says `{}`",
                edge_line(name, d),
                edge_line(name, deps)
            )),
            Some(_) => {}
        }
    }
    for name in drawn.keys().filter(|n| !real.contains_key(*n)) {
        problems.push(format!(
            "{name} is in the map but no crate of crates/ has that name: remove its line"
        ));
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's `## Crate edges` is out of date:\n  {}",
        problems.join("\n  ")
    );
}

/// The bird's-eye drawing's floors: `floor N  crate ....` starts a floor, and each following
/// line that begins with a crate name followed by dots puts that crate on the same floor.
fn floors_in_drawing(doc: &str) -> BTreeMap<String, u32> {
    let drawing = doc
        .split("## Bird's-eye view")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("a bird's-eye drawing in a code block");
    let mut floors = BTreeMap::new();
    let mut floor = None;
    for line in drawing.lines() {
        let mut rest = line.trim_start();
        if let Some(after) = rest.strip_prefix("floor ") {
            let (number, tail) = after.split_once(' ').expect("`floor N  crate ...`");
            floor = Some(number.parse::<u32>().expect("a floor's number"));
            rest = tail.trim_start();
        }
        let Some((name, tail)) = rest.split_once(' ') else {
            continue;
        };
        if name.starts_with("cxltier") && tail.starts_with("..") {
            let floor = floor.unwrap_or_else(|| panic!("{name} is drawn before any `floor N`"));
            let previous = floors.insert(name.to_string(), floor);
            assert!(previous.is_none(), "{name} is drawn twice");
        }
    }
    floors
}

#[test]
fn every_crate_has_a_row_and_a_floor_above_what_it_uses() {
    let doc = architecture();
    let table = doc
        .split("\n## Crates\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a `## Crates` table");
    let floors = floors_in_drawing(&doc);
    let mut problems = Vec::new();
    for (name, deps) in &edges_in_manifests() {
        let row = format!("| `crates/{name}` |");
        if !table.contains(&row) {
            problems.push(format!("{name} has no row `{row} ...` in `## Crates`"));
        }
        let Some(&floor) = floors.get(name) else {
            problems.push(format!(
                "{name} is not on a floor of the bird's-eye drawing"
            ));
            continue;
        };
        for dep in deps {
            match floors.get(dep) {
                Some(&below) if below < floor => {}
                Some(&other) => problems.push(format!(
                    "{name} (floor {floor}) depends on {dep} (floor {other}): draw {dep} lower or {name} higher"
                )),
                None => {} // reported under its own name
            }
        }
    }
    for name in floors
        .keys()
        .filter(|n| !edges_in_manifests().contains_key(*n))
    {
        problems.push(format!(
            "{name} is drawn but no crate of crates/ has that name"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The server's handlers (one module a kind of command) import the context and the parts below
/// it, never another handler, the table, dispatch or the loop: what several handlers share lives
/// below them. The one exception the map names: `scripting` reads the table's flags for a
/// script's `redis.call`. Test modules (after `#[cfg(test)]`) may use anything.
#[test]
fn no_server_handler_imports_another_handler() {
    const HANDLERS: &[&str] = &[
        "strings",
        "bitops",
        "hyperloglog",
        "hash",
        "list",
        "set",
        "zset",
        "stream",
        "geo",
        "keyspace",
        "connection",
        "client",
        "admin",
        "debug",
        "info",
        "config",
        "transaction",
        "pubsub",
        "scripting",
        "replication",
        "acl_command",
    ];
    const ABOVE: &[&str] = &["table", "dispatch", "server", "commands"];
    let src = root().join("crates/cxltier-server/src");
    let mut found = Vec::new();
    for handler in HANDLERS {
        let path = src.join(format!("{handler}.rs"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (a handler moved: update this list and the map)",
                path.display()
            )
        });
        let code = text.split("\n#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for other in HANDLERS.iter().chain(ABOVE) {
                if other == handler || (*handler == "scripting" && *other == "table") {
                    continue;
                }
                let named = [
                    format!("crate::{other}::"),
                    format!("crate::{other};"),
                    format!("crate::{other}}}"),
                    format!("crate::{other},"),
                ];
                if named.iter().any(|p| line.contains(p.as_str())) {
                    found.push(format!("{handler}.rs:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "server handlers import other handlers or the layers above them (move what they share \
         below the handlers, as `args`, `encoding`, `hash_layout` and `memory` hold it):\n{}",
        found.join("\n")
    );
}
