//! `goodput plan`: replica arithmetic from a capacity, or from a sweep's reports.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::OutputFormat;
use goodput::planning::{
    CapacitySelection, PlanInput, ReplicaPlan, SweepFile, SweepPoint, plan_replicas,
    select_capacity,
};
use goodput::workload::{WorkloadManifest, seed_manifest};

/// Flags of `goodput plan`.
#[derive(clap::Args)]
pub struct PlanArgs {
    /// Forecast peak arrival rate (requests per second).
    #[arg(long)]
    peak_rps: f64,
    /// Measured capacity on the tested deployment (requests per second).
    #[arg(long, conflicts_with = "sweep", required_unless_present = "sweep")]
    capacity_rps: Option<f64>,
    /// sweep.json with the points' reports; capacity = the highest passing offered rate.
    #[arg(long)]
    sweep: Option<PathBuf>,
    /// Replicas serving during the benchmark (default: the sweep file's, then the manifest's).
    #[arg(long)]
    replicas_tested: Option<u32>,
    /// GPUs per replica (default: the sweep file's, then the manifest's placement).
    #[arg(long)]
    gpus_per_replica: Option<u32>,
    /// Fraction of measured capacity to plan for (default: the manifest's, else 0.75).
    #[arg(long)]
    target_utilization: Option<f64>,
    /// Workload manifest: gate thresholds for reports without a verdict, and defaults.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    output: OutputFormat,
}

/// `plan --output json`: the arithmetic's fields at the top level, plus the sweep if any.
#[derive(Serialize)]
struct PlanOutput<'a> {
    #[serde(flatten)]
    plan: &'a ReplicaPlan,
    #[serde(skip_serializing_if = "Option::is_none")]
    sweep: Option<&'a CapacitySelection>,
}

pub fn run(args: PlanArgs) -> Result<ExitCode> {
    let manifest = args
        .manifest
        .as_deref()
        .map(|p| super::manifest_or_seed(Some(p)))
        .transpose()?;
    let placement = manifest.as_ref().map(|m| &m.engine.placement);
    let config = manifest.as_ref().map_or_else(
        || seed_manifest().gate_config(),
        WorkloadManifest::gate_config,
    );

    let (capacity_rps, selection, sweep_replicas, sweep_gpus) =
        match (&args.sweep, args.capacity_rps) {
            (Some(path), _) => {
                let (file, points) = read_sweep(path)?;
                let selection = select_capacity(&points, &config);
                (
                    selection.capacity_rps,
                    Some(selection),
                    file.replicas_tested,
                    file.gpus_per_replica,
                )
            }
            (None, Some(c)) => (Some(c), None, None, None),
            // clap requires one of the two.
            (None, None) => bail!("give --capacity-rps or --sweep"),
        };
    if let Some(selection) = &selection
        && args.output == OutputFormat::Text
    {
        print!("{}", selection.table());
        let exploratory: Vec<String> = selection
            .exploratory()
            .map(|p| p.offered_rps.to_string())
            .collect();
        if !exploratory.is_empty() {
            println!(
                "exploratory points (a class under the sample minimum; never capacity): {} RPS",
                exploratory.join(", ")
            );
        }
    }
    let Some(capacity_rps) = capacity_rps else {
        if args.output == OutputFormat::Json {
            println!("{}", serde_json::to_string_pretty(&selection)?);
        }
        bail!("no point of the sweep passes the gate, so there is no measured capacity");
    };
    let replicas_tested = args
        .replicas_tested
        .or(sweep_replicas)
        .or(placement.map(|p| p.replicas))
        .context("give --replicas-tested (or a sweep file or manifest that states it)")?;
    let gpus_per_replica = args
        .gpus_per_replica
        .or(sweep_gpus)
        .or(placement.and_then(|p| p.gpus_per_replica()))
        .context("give --gpus-per-replica (or a sweep file or manifest that states it)")?;
    let target_utilization = args
        .target_utilization
        .or(manifest.as_ref().map(|m| m.acceptance.target_utilization))
        .unwrap_or(0.75);
    let plan = plan_replicas(PlanInput {
        peak_rps: args.peak_rps,
        capacity_rps,
        replicas_tested,
        gpus_per_replica,
        target_utilization,
    })?;
    match args.output {
        OutputFormat::Text => {
            if selection.is_some() {
                println!(
                    "capacity = {capacity_rps} RPS on {replicas_tested} replicas (highest passing offered rate)"
                );
            }
            print!("{}", plan.explain());
        }
        OutputFormat::Json => {
            let out = PlanOutput {
                plan: &plan,
                sweep: selection.as_ref(),
            };
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads a sweep file and resolves reports given by path (relative to the sweep file).
fn read_sweep(path: &Path) -> Result<(SweepFile, Vec<SweepPoint>)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file: SweepFile = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a valid sweep file", path.display()))?;
    if file.points.is_empty() {
        bail!("{}: the sweep has no points", path.display());
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let mut points = Vec::with_capacity(file.points.len());
    for (i, entry) in file.points.iter().enumerate() {
        let report = match (&entry.report, &entry.report_path) {
            (Some(report), None) => (**report).clone(),
            (None, Some(rel)) => {
                let p = base.join(rel);
                let text = std::fs::read_to_string(&p).with_context(|| {
                    format!("points[{i}].report_path: cannot read {}", p.display())
                })?;
                serde_json::from_str(&text).with_context(|| {
                    format!(
                        "points[{i}].report_path: {} is not a slo-report.json",
                        p.display()
                    )
                })?
            }
            _ => bail!(
                "{}: points[{i}] needs exactly one of `report` and `report_path`",
                path.display()
            ),
        };
        if !(entry.offered_rps.is_finite() && entry.offered_rps > 0.0) {
            bail!(
                "{}: points[{i}].offered_rps must be positive",
                path.display()
            );
        }
        points.push(SweepPoint {
            offered_rps: entry.offered_rps,
            report,
        });
    }
    Ok((file, points))
}
