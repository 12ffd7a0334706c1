//! `goodput analyze`: the requests.csv files of a point into slo-report.json.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::ValueEnum;

use goodput::analysis::{QueueTrend, analyze_requests_csv};

/// Flags of `goodput analyze`.
#[derive(clap::Args)]
pub struct AnalyzeArgs {
    /// requests.csv files of one test point; several files (shards) are merged.
    #[arg(required = true)]
    csv: Vec<PathBuf>,
    /// Workload manifest with the classes' cutoffs and the gate thresholds
    /// (default: the seed's three classes and thresholds).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Length of the measurement window in seconds.
    #[arg(long)]
    duration_s: f64,
    /// Queue trend of the engine's waiting queue over the steady window.
    #[arg(long, value_enum)]
    queue_trend: QueueTrendArg,
    /// Write the report here instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Do not print the human summary on stderr.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum QueueTrendArg {
    Flat,
    Growing,
}

impl From<QueueTrendArg> for QueueTrend {
    fn from(q: QueueTrendArg) -> Self {
        match q {
            QueueTrendArg::Flat => QueueTrend::Flat,
            QueueTrendArg::Growing => QueueTrend::Growing,
        }
    }
}

pub fn run(args: AnalyzeArgs) -> Result<ExitCode> {
    let manifest = super::manifest_or_seed(args.manifest.as_deref())?;
    let report = analyze_requests_csv(
        manifest.gate_config(),
        &args.csv,
        args.duration_s,
        args.queue_trend.into(),
    )?;
    let json = serde_json::to_string_pretty(&report)?;
    match &args.out {
        Some(out) => std::fs::write(out, json + "\n")
            .with_context(|| format!("cannot write {}", out.display()))?,
        None => writeln!(std::io::stdout().lock(), "{json}")?,
    }
    if !args.quiet {
        eprint!("{}", report.human_summary());
    }
    Ok(ExitCode::SUCCESS)
}
