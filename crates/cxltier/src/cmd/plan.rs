//! `cxltier plan`: choose weighted-interleave weights for a mix and a goal.

use crate::error::{CliError, CliResult};
use crate::output::{print_json, Table};
use cxltier_advice::ProfileChoice;
use cxltier_model::{plan, Candidate, Goal, PlanReport, PlanRequest, WeightPlan};
use cxltier_profile::{Mix, Profile};
use std::process::ExitCode;

/// Choose weighted-interleave weights for a read:write mix and a goal.
///
/// Weights are written in tier order, fastest first: `3:1` puts 3 pages on DRAM for each page on CXL.
/// Without --profile, plans on the live machine when it has two or more memory tiers whose performance
/// the firmware describes (HMAT/CDAT), otherwise on the built-in profile xeon6-6900p-8xcz122. Without
/// --mix, plans each common mix (R, 3:1, 2:1, 1:1, 2:1nt).
#[derive(clap::Args)]
#[command(long_about)]
pub struct Args {
    /// Built-in profile name or path to a profile TOML file
    #[arg(long, value_name = "NAME|PATH")]
    profile: Option<String>,
    /// Traffic mix: R, A:B reads:writes (3:1, 2:1, 1:1), A:Bnt for non-temporal writes, or W2, W3, W5, W10
    #[arg(long, value_name = "MIX")]
    mix: Option<String>,
    /// What to optimise: peak bandwidth, or mean latency at --demand
    #[arg(long, default_value = "bandwidth", value_name = "bandwidth|latency")]
    goal: String,
    /// Total demand in GB/s (latency goal: the load to optimise for; default half of DRAM-only peak)
    #[arg(long, value_name = "GBPS")]
    demand: Option<f64>,
    /// Only consider these weight vectors, e.g. 1:1,2:1,5:2,3:1,4:1
    #[arg(long, value_name = "LIST")]
    candidates: Option<String>,
    /// Predictions closer than this many percent count as equal (default: the model's median error
    /// against the published figures it predicts)
    #[arg(long, value_name = "PERCENT", allow_negative_numbers = true)]
    tolerance: Option<f64>,
    /// Without --candidates, search every ratio with weights 1..=N per tier
    #[arg(long, default_value_t = 10, value_name = "N")]
    max_weight: u32,
    /// Also print every candidate evaluated (JSON always includes them)
    #[arg(long)]
    sweep: bool,
    /// Print JSON for scripts
    #[arg(long)]
    json: bool,
    /// Also write the sweep as an SVG plot (GB/s or latency against the fastest tier's page share)
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
}

pub(crate) fn parse_mix(text: &str) -> Result<Mix, CliError> {
    text.parse::<Mix>().map_err(CliError::classified)
}

fn pct(ratio: f64) -> String {
    format!("{:+.1}%", (ratio - 1.0) * 100.0)
}

pub fn run(args: Args) -> CliResult {
    let source = ProfileChoice::load(args.profile.as_deref()).map_err(CliError::classified)?;
    let profile = &source.profile;
    let mixes: Vec<Mix> = match &args.mix {
        Some(m) => vec![parse_mix(m)?],
        None => Mix::common().to_vec(),
    };
    let mut plans = Vec::new();
    for mix in &mixes {
        let goal: Goal = args.goal.parse().map_err(CliError::classified)?;
        let req = PlanRequest::new(*mix, goal)
            .with_demand(args.demand)
            .with_max_weight(args.max_weight)
            .with_tolerance_percent(args.tolerance)
            .and_then(|r| r.with_candidates_text(args.candidates.as_deref(), profile.tiers.len()))
            .map_err(CliError::classified)?;
        plans.push(plan(profile, &req).map_err(CliError::classified)?);
    }

    if let Some(path) = &args.svg {
        write_svg(path, profile, &plans)?;
        if !args.json {
            eprintln!("wrote {}", path.display());
        }
    }

    // One shape with or without --mix: the plans are a list, of one mix or of the common ones.
    if args.json {
        print_json("plan", &PlanReport::new(profile, &source.note, plans))?;
        return Ok(ExitCode::SUCCESS);
    }

    println!("Planning on {}.", source.note);
    let tier_desc: Vec<String> = profile
        .tiers
        .iter()
        .map(|t| {
            let nodes = if t.nodes.is_empty() {
                String::new()
            } else {
                format!(
                    " nodes {}",
                    t.nodes
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )
            };
            format!(
                "{} ({}{}, {}, {:.0} ns idle)",
                t.name,
                t.kind.as_str(),
                nodes,
                cxltier_topo::format_bytes(t.capacity_bytes),
                t.idle_latency_ns
            )
        })
        .collect();
    println!("Tiers, fastest first: {}.", tier_desc.join(", "));
    let first = &plans[0];
    let search = match &args.candidates {
        Some(c) => format!("candidates {c}"),
        None => format!("every ratio with weights 1..={} per tier", args.max_weight),
    };
    match first.goal {
        Goal::Bandwidth => println!("Goal: peak bandwidth; searched {search}."),
        Goal::Latency => println!(
            "Goal: lowest mean latency at {} GB/s{}; searched {search}.",
            first.demand_gbps.map_or("?".into(), |d| format!("{d:.0}")),
            if args.demand.is_none() {
                " (half of DRAM-only peak; pass --demand)"
            } else {
                ""
            }
        ),
    }
    println!();

    let mut table = Table::new([
        "mix",
        "advice",
        "weights",
        "GB/s",
        "latency ns",
        "vs DRAM only",
        "kernel auto",
        "auto GB/s",
        "vs auto",
        "equivalent",
    ]);
    for p in &plans {
        let equivalent: Vec<String> = p
            .recommended
            .equivalent
            .iter()
            .map(|w| cxltier_model::Split(w.clone()).to_string())
            .collect();
        table.row([
            p.mix.to_string(),
            p.recommended.action.to_string(),
            p.recommended.weights_text(),
            format!("{:.1}", p.recommended.bandwidth_gbps),
            format!("{:.0}", p.recommended.latency_ns),
            pct(p.recommended.gain_vs_dram_only),
            p.kernel_auto.weights_text(),
            format!("{:.1}", p.kernel_auto.bandwidth_gbps),
            match p.goal {
                Goal::Bandwidth => pct(p.recommended.bandwidth_gbps / p.kernel_auto.bandwidth_gbps),
                Goal::Latency => format!(
                    "{:+.0} ns",
                    p.recommended.latency_ns - p.kernel_auto.latency_ns
                ),
            },
            if equivalent.is_empty() {
                "-".to_string()
            } else {
                equivalent.join(" ")
            },
        ]);
    }
    print!("{}", table.render());
    println!();
    for p in &plans {
        println!(
            "mix {}: {}: {}.",
            p.mix, p.recommended.action, p.recommended.reason
        );
    }
    let err = &first.model_error;
    println!(
        "\nModel error against the {} published figures: median {:.1}%, max {:.1}%; against the {} it\n\
         predicts (splits over both tiers): median {:.1}%, max {:.1}%. Predictions within {:.1}% count as equal{}.",
        err.all.figures,
        err.all.median_abs_error * 100.0,
        err.all.max_abs_error * 100.0,
        err.predicted.figures,
        err.predicted.median_abs_error * 100.0,
        err.predicted.max_abs_error * 100.0,
        first.tolerance * 100.0,
        if args.tolerance.is_some() {
            " (--tolerance)"
        } else {
            " (the median; --tolerance to change)"
        }
    );

    if args.sweep {
        for p in &plans {
            println!("\nSweep for mix {} (best first):", p.mix);
            let mut t = Table::new(["weights", "GB/s", "latency ns", "vs DRAM only"]);
            for c in &p.sweep {
                t.row([
                    c.weights_text(),
                    format!("{:.1}", c.bandwidth_gbps),
                    format!("{:.0}", c.latency_ns),
                    pct(c.gain_vs_dram_only),
                ]);
            }
            print!("{}", t.render());
        }
    }
    println!(
        "\nWeights are pages per tier, fastest tier first; `kernel auto` is what the kernel derives from firmware bandwidth;\n\
         `do not interleave` means leave memory on {} (the default policy), `keep auto` means weighted interleave with\n\
         the kernel's own weights.\n\
         Latency is at full load (bandwidth goal) or at the demand (latency goal). Figures are model predictions\n\
         (docs/model.md), not measurements. Apply with: cxltier apply --plan MIX, or cxltier run --plan MIX -- CMD.",
        profile.tiers[0].name
    );
    Ok(ExitCode::SUCCESS)
}

fn write_svg(
    path: &std::path::Path,
    profile: &Profile,
    plans: &[WeightPlan],
) -> Result<(), CliError> {
    if profile.tiers.len() != 2 {
        return Err(CliError::bad_input(
            "--svg plots two-tier sweeps; this profile has a different number of tiers",
        ));
    }
    let goal = plans[0].goal;
    let series: Vec<crate::plot::Series> = plans
        .iter()
        .map(|p| {
            let label = |name: String, c: &Candidate| {
                c.curve_point(goal)
                    .map(|at| crate::plot::Label { text: name, at })
            };
            crate::plot::Series {
                name: format!(
                    "mix {} ({} {})",
                    p.mix,
                    p.recommended.action,
                    p.recommended.weights_text()
                ),
                marked: p.recommended.curve_point(goal),
                labels: [
                    label("DRAM only".into(), &p.dram_only),
                    label(
                        format!("auto {}", p.kernel_auto.weights_text()),
                        &p.kernel_auto,
                    ),
                ]
                .into_iter()
                .flatten()
                .collect(),
                points: p.sweep_curve(),
            }
        })
        .collect();
    let (title, y) = match goal {
        Goal::Bandwidth => (
            format!("{}: predicted peak bandwidth by weights", profile.name),
            "GB/s",
        ),
        Goal::Latency => (
            format!(
                "{}: predicted latency at {:.0} GB/s by weights",
                profile.name,
                plans[0].demand_gbps.unwrap_or_default()
            ),
            "ns",
        ),
    };
    let x = format!("pages on {} (%)", profile.tiers[0].name);
    crate::plot::line_plot(path, &title, &x, y, &series)
}

/// The planner's advice for `mix` (e.g. "R", "2:1", "W5") on the live machine, as `apply --plan`
/// and `run --plan` use it. Fails with a bad-input error for an unparsable mix.
pub fn planned_advice(mix: &str) -> Result<cxltier_advice::Advice, CliError> {
    cxltier_advice::advise_live(parse_mix(mix)?).map_err(CliError::classified)
}
