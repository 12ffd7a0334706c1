//! `goodput bench`: a whole CapacityBenchmark run here, writing the capacity pack.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

/// Flags of `goodput bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// CapacityBenchmark YAML file.
    file: PathBuf,
    /// Capacity pack folder (default: ./capacity-pack/<name>-<UTC timestamp>/).
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

/// Lints the benchmark (refusing it on any error), runs it, writes the pack and prints the
/// one-screen summary.
pub fn run(args: BenchArgs) -> Result<ExitCode> {
    let loaded = goodput::api::load_benchmark(&args.file).map_err(|e| anyhow::anyhow!("{e}"))?;
    for finding in &loaded.findings {
        eprintln!("{}: {finding}", args.file.display());
    }
    if loaded.has_errors() {
        bail!(
            "{} is refused before any traffic: fix the errors above (`goodput lint` lists them)",
            args.file.display()
        );
    }
    let name = loaded
        .benchmark
        .metadata
        .name
        .clone()
        .unwrap_or_else(|| "benchmark".into());
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| goodput::bench::default_pack_dir(&name));
    let options = goodput::bench::BenchOptions {
        out: out.clone(),
        progress: !args.quiet,
    };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let result = runtime.block_on(async {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            super::shutdown_signal().await;
            eprintln!(
                "bench: stopping; the current point is written as measured, no further point \
                 runs, and the pack is marked incomplete"
            );
            let _ = stop_tx.send(true);
        });
        goodput::bench::run_bench(&loaded.benchmark, &loaded.manifest, &options, stop_rx).await
    })?;
    goodput::pack::write_reports(&out, &result)
        .with_context(|| format!("writing the capacity pack's reports into {}", out.display()))?;
    print!("{}", goodput::pack::summary_text(&result));
    println!("capacity pack: {}", out.display());
    if result.interrupted.is_some() {
        eprintln!("bench: interrupted; the pack is incomplete");
        // The shell's convention for a run ended by a signal (128 + SIGINT).
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}
