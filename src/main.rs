//! The `goodput` binary: one subcommand per role, each a thin shell over the library.

#![deny(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// SLO-driven capacity management for GPU LLM inference.
#[derive(Parser)]
#[command(name = "goodput", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines on stderr as text, or as one JSON object per line (for log collectors).
    /// `RUST_LOG` sets the level (default `warn`).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, with the span (e.g. the reconciled object) as fields.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Analyse a requests.csv into slo-report.json: per-class attainment, percentiles, gate.
    Analyze(cli::analyze::AnalyzeArgs),
    /// Replica arithmetic: from a capacity (or a sweep's reports) to replicas and GPUs.
    Plan(cli::plan::PlanArgs),
    /// Offline what-if on the engine model: a rate sweep table or the highest rate meeting
    /// the SLO (bisection).
    Simulate(cli::simulate::SimulateArgs),
    /// Serve the engine model live: replicas with an OpenAI-compatible API and engine
    /// metrics behind a router, with fault injection.
    ServeSim(cli::serve_sim::ServeSimArgs),
    /// Run one test point against an OpenAI-compatible endpoint: open loop at a rate or
    /// closed loop at a concurrency; writes requests.csv, summary.json, engine-metrics.json.
    Loadgen(Box<cli::loadgen::LoadgenArgs>),
    /// Run a whole CapacityBenchmark here: saturation sweep, rate sweep per cache mode,
    /// capacity, replica plan; writes the capacity pack. Without `target.url` it runs against
    /// the built-in simulated engine.
    Bench(cli::bench::BenchArgs),
    /// Check CapacityBenchmark files before any traffic: one line per error or warning,
    /// with the field path; exit status 1 if any file has an error.
    Lint(cli::lint::LintArgs),
    /// Print the CustomResourceDefinitions (CapacityBenchmark, ServingPlan) as one YAML
    /// stream (`| kubectl apply -f -`), write them as files, or check committed files.
    Crds(cli::crds::CrdsArgs),
    /// Reconcile CapacityBenchmarks in a cluster: each test point a Job of `goodput
    /// loadgen` pods, every finished point kept in status.
    Operator(cli::operator::OperatorArgs),
    /// A ServingPlan's replica change for a GitOps repository, offline: the exact edit of
    /// the one replica number, as a patch, a pull request body, or JSON (for pipelines that
    /// open pull requests with their own tooling).
    Propose(cli::propose::ProposeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // Colour only for a terminal: a pod's log file or a CI log gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match cli.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().with_current_span(true).init(),
    }
    let result = match cli.command {
        Command::Analyze(args) => cli::analyze::run(args),
        Command::Plan(args) => cli::plan::run(args),
        Command::Simulate(args) => cli::simulate::run(args),
        Command::ServeSim(args) => cli::serve_sim::run(args),
        Command::Loadgen(args) => cli::loadgen::run(*args),
        Command::Bench(args) => cli::bench::run(args),
        Command::Lint(args) => cli::lint::run(args),
        Command::Crds(args) => cli::crds::run(args),
        Command::Operator(args) => cli::operator::run(args),
        Command::Propose(args) => cli::propose::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
