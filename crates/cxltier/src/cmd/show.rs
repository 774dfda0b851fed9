//! `cxltier show PID`: where a process's resident memory lives.

use crate::error::{CliError, CliResult};
use crate::output::{print_json, Table};
use cxltier_control::placement::{self, MappingPlacement, ProcessPlacement};
use cxltier_topo::format_bytes;
use std::process::ExitCode;

/// The long help: what the command does, exactly.
const LONG_HELP: &str = "\
Reads /proc/PID/numa_maps (and /proc/PID/maps for end addresses and names): resident MiB per
kind of mapping and NUMA node (every memory node of the machine), the way `numastat -p PID`
summarises a process, then the largest mappings with their memory policy and MiB on each node.

Kinds: Heap (the brk heap), Stack (the main thread's stack), Anon (private anonymous memory:
malloc arenas, anonymous mmap, thread stacks), File (file mappings, shared memory included),
Huge (hugetlb pages), Other (kernel mappings such as [vdso]). Transparent huge pages are counted
in their mapping's kind; the kernel reports them per process only, and a note gives their total.

The policy column is the policy the kernel reports for the mapping: its own (set with mbind) or,
on recent kernels, the process's (set with `cxltier run`). A policy decides where pages go when
they are first touched; the bytes per node show where they are now. Another user's process needs
root. --json prints everything: totals, `by_kind` and every mapping.";

/// Show where a process's resident memory lives: per kind of mapping and node, and its largest
/// mappings
#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// The process to inspect
    #[arg(value_name = "PID", required_unless_present = "pid_option")]
    pid: Option<u32>,
    /// The process to inspect (the same as the PID argument)
    #[arg(long = "pid", value_name = "PID", conflicts_with = "pid")]
    pid_option: Option<u32>,
    /// How many of the largest mappings to list after the summary (0: none)
    #[arg(long, value_name = "N", default_value_t = 10, conflicts_with = "all")]
    top: usize,
    /// List every mapping, in address order, also those with nothing resident
    #[arg(long)]
    all: bool,
    /// Print JSON for scripts (every mapping, whatever --top says)
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    let Some(pid) = args.pid.or(args.pid_option) else {
        // clap's `required_unless_present` makes this unreachable; say so plainly if not.
        return Err(CliError::bad_input("no process given").with_hint("cxltier show PID"));
    };
    let p = placement::show(pid).map_err(CliError::classified)?;
    if args.json {
        print_json("show", &p)?;
    } else {
        let listing = if args.all {
            Listing::All
        } else {
            Listing::Top(args.top)
        };
        print!("{}", render(&p, listing, &p.node_columns()));
    }
    Ok(ExitCode::SUCCESS)
}

/// Which mappings follow the summary.
#[derive(Clone, Copy)]
enum Listing {
    /// The N largest, largest first.
    Top(usize),
    /// Every one, in address order.
    All,
}

fn mib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / (1u64 << 20) as f64)
}

/// `numastat -p`'s layout: a label column of 16 (18 with its gap), then one column of 15 per node
/// and one for the total, separated by a space, dashed rules above the rows and above the total.
fn summary(p: &ProcessPlacement, nodes: &[u32]) -> String {
    const LABEL: usize = 16;
    const CELL: usize = 15;
    let mut out = String::new();
    let mut line = |label: &str, cells: Vec<String>| {
        let mut l = format!("{label:<LABEL$}  ");
        l.push_str(
            &cells
                .iter()
                .map(|c| format!("{c:>CELL$}"))
                .collect::<Vec<_>>()
                .join(" "),
        );
        out.push_str(&l);
        out.push('\n');
    };
    let mut header: Vec<String> = nodes.iter().map(|n| format!("Node {n}")).collect();
    header.push("Total".into());
    let rule = vec!["-".repeat(CELL); header.len()];
    line("", header);
    line("", rule.clone());
    for (kind, total) in &p.by_kind {
        let mut cells: Vec<String> = nodes
            .iter()
            .map(|n| mib(total.bytes_per_node.get(n).copied().unwrap_or(0)))
            .collect();
        cells.push(mib(total.bytes));
        line(kind.label(), cells);
    }
    line(&"-".repeat(LABEL), rule);
    let mut cells: Vec<String> = nodes
        .iter()
        .map(|n| mib(p.nodes.get(n).copied().unwrap_or(0)))
        .collect();
    cells.push(mib(p.total_bytes));
    line("Total", cells);
    out
}

/// The summary and the listing, with a column for each of `nodes`.
fn render(p: &ProcessPlacement, listing: Listing, nodes: &[u32]) -> String {
    let mut out = format!(
        "Per-node process memory usage (in MiB) for PID {} ({}): {} resident on {} node(s)\n",
        p.pid,
        p.command,
        format_bytes(p.total_bytes),
        p.nodes.values().filter(|&&b| b > 0).count()
    );
    out.push_str(&summary(p, nodes));
    if let Some(thp) = p.transparent_huge_bytes.filter(|&b| b > 0) {
        out.push_str(&format!(
            "({} MiB of it in transparent huge pages, counted in their mappings' kinds above)\n",
            mib(thp)
        ));
    }

    let shown: Vec<&MappingPlacement> = match listing {
        Listing::All => p.mappings.iter().collect(),
        Listing::Top(n) => p.largest(n),
    };
    let resident = p.mappings.iter().filter(|m| m.bytes > 0).count();
    if shown.is_empty() {
        if resident > 0 {
            out.push_str(&format!(
                "\n({resident} mapping(s) with resident memory; --top N lists the largest, --all every one)\n"
            ));
        }
        return out;
    }
    out.push_str(&match listing {
        Listing::All => format!("\nAll {} mappings, in address order:\n", p.mappings.len()),
        Listing::Top(_) => format!(
            "\nLargest mappings ({} of {resident} with resident memory):\n",
            shown.len()
        ),
    });

    let mut header = vec!["mapping".to_string(), "kind".into(), "policy".into()];
    header.extend(nodes.iter().map(|n| format!("N{n} MiB")));
    header.push("total MiB".into());
    header.push("name".into());
    let mut t = Table::new(header);
    for m in &shown {
        let range = match m.end {
            Some(end) => format!("{:x}-{end:x}", m.start),
            None => format!("{:x}", m.start),
        };
        let mut row = vec![range, m.kind.as_str().to_string(), m.policy_text()];
        row.extend(
            nodes
                .iter()
                .map(|n| mib(m.nodes.get(n).copied().unwrap_or(0))),
        );
        row.push(mib(m.bytes));
        row.push(m.name.clone().unwrap_or_default());
        t.row(row);
    }
    out.push_str(&t.render());
    if let Listing::Top(_) = listing {
        if shown.len() < resident {
            out.push_str(&format!(
                "({} more with resident memory, {} with none; --top N or --all lists them)\n",
                resident - shown.len(),
                p.mappings.len() - resident
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cxltier_control::placement::parse_numa_maps;
    use std::path::Path;

    /// A two-node sample of the library's fixtures: weighted interleave, hugetlb, a file, a stack.
    const TWO_NODES: &str =
        include_str!("../../../cxltier-control/tests/fixtures/numa_maps/two-node.txt");

    fn sample() -> ProcessPlacement {
        let maps = parse_numa_maps(TWO_NODES, Path::new("numa_maps"), 4096).unwrap();
        ProcessPlacement::from_mappings(7, "bench".into(), maps, Some(2 << 20))
    }

    #[test]
    fn summary_is_laid_out_like_numastat() {
        let text = render(&sample(), Listing::Top(0), &[0, 1]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("Per-node process memory usage (in MiB) for PID 7 (bench)"));
        // numastat -p's columns: 18 characters of label, then 15 per node and for the total.
        assert_eq!(
            lines[1],
            "                           Node 0          Node 1           Total"
        );
        assert_eq!(
            lines[2],
            "                  --------------- --------------- ---------------"
        );
        let rows: Vec<&str> = lines[3..9]
            .iter()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(rows, ["Heap", "Stack", "Anon", "File", "Huge", "Other"]);
        assert_eq!(
            lines[7],
            "Huge                         0.00            4.00            4.00"
        );
        assert_eq!(
            lines[9],
            "----------------  --------------- --------------- ---------------"
        );
        assert_eq!(
            lines[10],
            "Total                       14.02           12.04           26.05"
        );
        assert!(lines[11].contains("2.00 MiB of it in transparent huge pages"));
        assert!(text.contains("--top N lists the largest"), "{text}");
    }

    #[test]
    fn nodes_without_the_process_memory_have_columns_of_zeros() {
        // As numastat -p: a memory node (say CXL) that holds nothing of the process still shows.
        let text = render(&sample(), Listing::Top(1), &[0, 1, 2]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].ends_with("Node 0          Node 1          Node 2           Total"));
        assert_eq!(
            lines[10],
            "Total                       14.02           12.04            0.00           26.05"
        );
        assert!(text.contains("N2 MiB"), "{text}");
    }

    #[test]
    fn top_lists_the_largest_and_all_every_mapping() {
        let p = sample();
        let top2 = render(&p, Listing::Top(2), &[0, 1]);
        assert!(
            top2.contains("Largest mappings (2 of 7 with resident memory)"),
            "{top2}"
        );
        let rows: Vec<&str> = top2
            .lines()
            .skip_while(|l| !l.starts_with("mapping"))
            .skip(1)
            .take_while(|l| !l.starts_with('('))
            .collect();
        assert_eq!(rows.len(), 2, "{top2}");
        assert!(rows[0].starts_with("7f0000000000 ") && rows[0].contains("16.00"));
        assert!(rows[1].contains("4.00"));
        assert!(top2.contains("(5 more with resident memory, 1 with none;"));

        let all = render(&p, Listing::All, &[0, 1]);
        assert!(all.contains("All 8 mappings, in address order:"), "{all}");
        let starts: Vec<&str> = all
            .lines()
            .skip_while(|l| !l.starts_with("mapping"))
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(starts.len(), 8);
        assert_eq!(starts[7], "7ffc10000000", "the empty mapping too");
        assert!(!all.contains("more with resident memory"));
    }
}
