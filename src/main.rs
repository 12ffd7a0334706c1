//! The `goodput` binary: one subcommand per role, each a thin shell over the library.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;

use goodput::analysis::{QueueTrend, analyze_requests_csv};
use goodput::planning::{
    CapacitySelection, PlanInput, ReplicaPlan, SweepFile, SweepPoint, plan_replicas,
    select_capacity,
};
use goodput::sim::offline::{
    Arrival, ClassShape, SharedPrefix, WorkloadSpec, find_max_rate, gate_for, simulate_rate,
    simulate_rates,
};
use goodput::sim::{PRESETS, Setup, apply_overrides, apply_yaml_overrides, preset};
use goodput::workload::{LoadedManifest, WorkloadManifest, load_manifest, seed_manifest};

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
    Analyze(AnalyzeArgs),
    /// Replica arithmetic: from a capacity (or a sweep's reports) to replicas and GPUs.
    Plan(PlanArgs),
    /// Offline what-if on the engine model: a rate sweep table or the highest rate meeting
    /// the SLO (bisection).
    Simulate(SimulateArgs),
    /// Serve the engine model live: replicas with an OpenAI-compatible API and engine
    /// metrics behind a router, with fault injection.
    ServeSim(ServeSimArgs),
    /// Run one test point against an OpenAI-compatible endpoint: open loop at a rate or
    /// closed loop at a concurrency; writes requests.csv, summary.json, engine-metrics.json.
    Loadgen(Box<LoadgenArgs>),
    /// Run a whole CapacityBenchmark here: saturation sweep, rate sweep per cache mode,
    /// capacity, replica plan; writes the capacity pack. Without `target.url` it runs against
    /// the built-in simulated engine.
    Bench(BenchArgs),
    /// Check CapacityBenchmark files before any traffic: one line per error or warning,
    /// with the field path; exit status 1 if any file has an error.
    Lint(LintArgs),
    /// Print the CustomResourceDefinitions (CapacityBenchmark, ServingPlan) as one YAML
    /// stream (`| kubectl apply -f -`), write them as files, or check committed files.
    Crds(CrdsArgs),
    /// Reconcile CapacityBenchmarks in a cluster: each test point a Job of `goodput
    /// loadgen` pods, every finished point kept in status.
    Operator(cli::operator::OperatorArgs),
    /// A ServingPlan's replica change for a GitOps repository, offline: the exact edit of
    /// the one replica number, as a patch, a pull request body, or JSON (for pipelines that
    /// open pull requests with their own tooling).
    Propose(cli::propose::ProposeArgs),
}

#[derive(clap::Args)]
struct AnalyzeArgs {
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

#[derive(clap::Args)]
struct PlanArgs {
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

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OutputFormat {
    Text,
    Json,
}

mod cli {
    pub mod operator;
    pub mod propose;
}

/// Resolves on Ctrl-C or SIGTERM (what Kubernetes sends a pod before it kills it).
async fn shutdown_signal() {
    let term = async {
        #[cfg(unix)]
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
            return;
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
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
        Command::Analyze(args) => analyze(args),
        Command::Plan(args) => plan(args),
        Command::Simulate(args) => simulate(args),
        Command::ServeSim(args) => serve_sim(args),
        Command::Loadgen(args) => loadgen(*args),
        Command::Bench(args) => bench(args),
        Command::Lint(args) => lint(args),
        Command::Crds(args) => crds(args),
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

/// The manifest from `--manifest`, or the seed's; warnings go to stderr.
fn manifest_or_seed(path: Option<&Path>) -> Result<WorkloadManifest> {
    let Some(path) = path else {
        return Ok(seed_manifest());
    };
    let LoadedManifest { manifest, warnings } = load_manifest(path)?;
    for w in warnings {
        eprintln!("{}: {w}", path.display());
    }
    Ok(manifest)
}

fn analyze(args: AnalyzeArgs) -> Result<ExitCode> {
    let manifest = manifest_or_seed(args.manifest.as_deref())?;
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

/// `plan --output json`: the arithmetic's fields at the top level, plus the sweep if any.
#[derive(Serialize)]
struct PlanOutput<'a> {
    #[serde(flatten)]
    plan: &'a ReplicaPlan,
    #[serde(skip_serializing_if = "Option::is_none")]
    sweep: Option<&'a CapacitySelection>,
}

fn plan(args: PlanArgs) -> Result<ExitCode> {
    let manifest = args
        .manifest
        .as_deref()
        .map(|p| manifest_or_seed(Some(p)))
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

/// The engine model's configuration: a preset and overrides.
#[derive(clap::Args)]
struct SetupArgs {
    /// Hardware and model preset (see `goodput simulate --list-presets`).
    #[arg(long, default_value = "qwen2.5-7b-h100")]
    preset: String,
    /// Override one setup field with a YAML value, e.g. `--set max_num_seqs=512`; repeatable.
    #[arg(long = "set", value_name = "FIELD=VALUE", value_parser = parse_key_value)]
    set: Vec<(String, String)>,
    /// YAML file with setup field overrides (applied before --set).
    #[arg(long)]
    setup_file: Option<PathBuf>,
}

#[derive(clap::Args)]
struct SimulateArgs {
    #[command(flatten)]
    setup: SetupArgs,
    /// List the presets and exit.
    #[arg(long)]
    list_presets: bool,
    /// Requests per simulated point (default 2,000; with --manifest, its initial schedule).
    #[arg(long)]
    requests: Option<usize>,
    /// Prompt tokens of the single request shape.
    #[arg(long, conflicts_with = "manifest")]
    input_tokens: Option<u32>,
    /// Output tokens of the single request shape.
    #[arg(long, conflicts_with = "manifest")]
    output_tokens: Option<u32>,
    /// TTFT cutoff of one request (single shape).
    #[arg(long, conflicts_with = "manifest")]
    ttft_slo_ms: Option<f64>,
    /// TPOT cutoff of one request (single shape).
    #[arg(long, conflicts_with = "manifest")]
    tpot_slo_ms: Option<f64>,
    /// Take the class mix, cutoffs, arrival process and seed from a workload manifest; the
    /// per-class gate of the analysis core then judges each rate.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Offered rates to simulate (requests per second), comma-separated.
    #[arg(long, value_delimiter = ',', required_unless_present_any = ["find_max_rate", "list_presets"])]
    rates: Vec<f64>,
    /// Bisect for the highest rate that meets the SLO instead of printing a table.
    #[arg(long, conflicts_with = "rates")]
    find_max_rate: bool,
    /// Fraction of requests that must meet their SLO (single shape, with --find-max-rate).
    #[arg(long, default_value_t = 0.99)]
    slo_met: f64,
    /// Lower end of the bisection (req/s).
    #[arg(long, default_value_t = 1.0)]
    rate_lo: f64,
    /// Upper end of the bisection (req/s).
    #[arg(long, default_value_t = 40.0)]
    rate_hi: f64,
    /// Bisection steps.
    #[arg(long, default_value_t = 12)]
    iterations: u32,
    /// Schedule seed (default 0; with --manifest, its request_schedule_seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Arrival process (default poisson; with --manifest, its arrival_pattern).
    #[arg(long, value_enum)]
    arrival: Option<ArrivalArg>,
    /// Gamma shape for --arrival gamma (1 = Poisson, below 1 burstier).
    #[arg(long)]
    burstiness: Option<f64>,
    /// Vary output lengths uniformly within ±this fraction (0 = fixed lengths).
    #[arg(long, default_value_t = 0.0)]
    output_jitter: f64,
    /// Prompts start with one of this many shared prefixes (pair with
    /// `--set prefix_caching=true`).
    #[arg(long, requires = "prefix_tokens")]
    prefix_pool: Option<u32>,
    /// Tokens of each shared prefix.
    #[arg(long, requires = "prefix_pool")]
    prefix_tokens: Option<u32>,
    /// Zipf exponent of prefix popularity (0 = every prefix equally likely).
    #[arg(long, default_value_t = 0.0)]
    prefix_zipf: f64,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    output: OutputFormat,
}

#[derive(Clone, Copy, ValueEnum)]
enum ArrivalArg {
    Poisson,
    Gamma,
    Constant,
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .ok_or_else(|| format!("expected FIELD=VALUE, got `{s}`"))
}

/// The preset with the file's and the flags' overrides applied.
fn simulated_setup(args: &SetupArgs) -> Result<Setup> {
    let mut setup = preset(&args.preset).with_context(|| {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        format!(
            "unknown preset `{}` (presets: {})",
            args.preset,
            names.join(", ")
        )
    })?;
    if let Some(path) = &args.setup_file {
        let yaml = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        setup = apply_yaml_overrides(&setup, &yaml)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    if !args.set.is_empty() {
        setup = apply_overrides(&setup, &args.set).map_err(|e| anyhow::anyhow!("--set {e}"))?;
    }
    Ok(setup)
}

/// The simulated workload: a manifest's class mix, or the single shape from the flags.
fn simulated_workload(
    args: &SimulateArgs,
    manifest: Option<&WorkloadManifest>,
) -> Result<WorkloadSpec> {
    let (classes, requests, seed, arrival) = match manifest {
        Some(m) => {
            let classes = m
                .workload
                .iter()
                .map(|c| ClassShape {
                    name: c.name.clone(),
                    mix: c.mix,
                    input_tokens: c.input_tokens,
                    output_tokens: c.output_tokens,
                    ttft_cutoff_ms: c.request_ttft_cutoff_ms,
                    tpot_cutoff_ms: c.request_tpot_cutoff_ms,
                })
                .collect();
            let arrival = m.arrival().context(
                "the manifest's trace arrivals cannot be simulated offline; pass --arrival",
            )?;
            (
                classes,
                m.client.initial_scheduled_requests as usize,
                m.client.request_schedule_seed,
                arrival,
            )
        }
        None => {
            let need = |v: Option<f64>, flag: &str| {
                v.with_context(|| format!("give {flag} (or --manifest)"))
            };
            let class = ClassShape {
                name: "default".into(),
                mix: 1.0,
                input_tokens: need(args.input_tokens.map(f64::from), "--input-tokens")? as u32,
                output_tokens: need(args.output_tokens.map(f64::from), "--output-tokens")? as u32,
                ttft_cutoff_ms: need(args.ttft_slo_ms, "--ttft-slo-ms")?,
                tpot_cutoff_ms: need(args.tpot_slo_ms, "--tpot-slo-ms")?,
            };
            (vec![class], 2000, 0, Arrival::Poisson)
        }
    };
    let arrival = match args.arrival {
        None => arrival,
        Some(ArrivalArg::Poisson) => Arrival::Poisson,
        Some(ArrivalArg::Constant) => Arrival::Constant,
        Some(ArrivalArg::Gamma) => Arrival::Gamma {
            shape: args
                .burstiness
                .context("--arrival gamma needs --burstiness")?,
        },
    };
    if let Arrival::Gamma { shape } = arrival
        && !(shape.is_finite() && shape > 0.0)
    {
        bail!("burstiness must be a positive gamma shape, got {shape}");
    }
    for c in &classes {
        if c.input_tokens == 0 || c.output_tokens == 0 {
            bail!(
                "class {}: input and output tokens must be at least 1",
                c.name
            );
        }
    }
    if !(0.0..1.0).contains(&args.output_jitter) {
        bail!("--output-jitter must be in [0, 1)");
    }
    Ok(WorkloadSpec {
        classes,
        requests: args.requests.unwrap_or(requests),
        seed: args.seed.unwrap_or(seed),
        arrival,
        output_jitter: args.output_jitter,
        shared_prefix: args
            .prefix_pool
            .zip(args.prefix_tokens)
            .map(|(pool, tokens)| SharedPrefix {
                pool,
                tokens,
                zipf: args.prefix_zipf,
            }),
    })
}

#[derive(Serialize)]
struct MaxRateOutput {
    max_rate: f64,
    criterion: String,
    probes: Vec<Probe>,
}

#[derive(Serialize)]
struct Probe {
    rate: f64,
    slo_met: f64,
    pass: bool,
}

fn simulate(args: SimulateArgs) -> Result<ExitCode> {
    if args.list_presets {
        for p in PRESETS {
            println!("{:<24} {}", p.name, p.description);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let setup = simulated_setup(&args.setup)?;
    let manifest = args
        .manifest
        .as_deref()
        .map(|p| manifest_or_seed(Some(p)))
        .transpose()?;
    let spec = simulated_workload(&args, manifest.as_ref())?;
    if spec.requests == 0 {
        bail!("--requests must be at least 1");
    }
    let gate = manifest
        .as_ref()
        .map(|m| gate_for(&spec.classes, &m.gate_config()));
    for &r in &args.rates {
        if !(r.is_finite() && r > 0.0) {
            bail!("rates must be positive, got {r}");
        }
    }

    if args.find_max_rate {
        if !(args.rate_lo > 0.0 && args.rate_hi > args.rate_lo) {
            bail!("need 0 < --rate-lo < --rate-hi");
        }
        let mut probes = Vec::new();
        let mut failure = None;
        let max_rate = find_max_rate(args.rate_lo, args.rate_hi, args.iterations, |rate| {
            let row = match simulate_rate(&setup, &spec, rate, gate.as_ref()) {
                Ok(row) => row,
                Err(e) => {
                    failure = Some(e);
                    return false;
                }
            };
            let pass = match (&row.report, gate.as_ref()) {
                (Some(report), Some(gate)) => {
                    goodput::planning::assess(rate, report, gate).verdict
                        == goodput::analysis::Verdict::Pass
                }
                _ => row.slo_met >= args.slo_met,
            };
            probes.push(Probe {
                rate,
                slo_met: row.slo_met,
                pass,
            });
            pass
        });
        if let Some(e) = failure {
            return Err(e.into());
        }
        let criterion = if gate.is_some() {
            "the per-class capacity gate of the manifest passes".to_owned()
        } else {
            format!("at least {} of requests meet TTFT and TPOT", args.slo_met)
        };
        match args.output {
            OutputFormat::Json => {
                let out = MaxRateOutput {
                    max_rate,
                    criterion,
                    probes,
                };
                println!("{}", serde_json::to_string_pretty(&out)?);
            }
            OutputFormat::Text => {
                for p in &probes {
                    println!(
                        "{:8.3} req/s  SLO met {:6.2}%  {}",
                        p.rate,
                        p.slo_met * 100.0,
                        if p.pass { "pass" } else { "fail" }
                    );
                }
                println!("highest rate where {criterion}: {max_rate:.1} req/s");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }

    let rows = simulate_rates(&setup, &spec, &args.rates, gate.as_ref())?;
    match args.output {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        OutputFormat::Text => {
            println!(
                "{:>6}  {:>17}  {:>17}  {:>10}  {:>9}  {:>7}  {:>8}  {:>7}",
                "rate",
                "TTFT p50/p99 ms",
                "TPOT p50/p99 ms",
                "out tok/s",
                "goodput",
                "SLO met",
                "queue",
                "gate"
            );
            for r in &rows {
                let gate = r.report.as_ref().map_or("-".to_owned(), |rep| {
                    rep.verdict.map_or("-".to_owned(), |v| v.to_string())
                });
                println!(
                    "{:>6}  {:>8.0} / {:>6.0}  {:>8.1} / {:>6.1}  {:>10.0}  {:>9.1}  {:>6.0}%  {:>8}  {:>7}",
                    r.rate,
                    r.ttft_p50_ms,
                    r.ttft_p99_ms,
                    r.tpot_p50_ms,
                    r.tpot_p99_ms,
                    r.output_tps,
                    r.goodput_rps,
                    r.slo_met * 100.0,
                    r.queue_trend.to_string(),
                    gate
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
struct ServeSimArgs {
    #[command(flatten)]
    setup: SetupArgs,
    /// Address to bind (loopback by default).
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// Router port; replica i (0-based) serves on PORT+1+i with its own API and /metrics.
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Independent engine replicas behind the router.
    #[arg(long, default_value_t = 1)]
    replicas: u32,
    /// Run the model K times faster than real time: every latency a client measures is the
    /// model's divided by K (multiply measurements by K to compare with real hardware).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Tokens per SSE frame, as engines with a stream interval send them (the first token
    /// always goes alone); ITL is then per frame.
    #[arg(long, default_value_t = 1)]
    stream_interval: u32,
    /// Metric names on the replicas' /metrics.
    #[arg(long, value_enum, default_value = "vllm")]
    metrics_flavor: FlavorArg,
    /// How the router picks a replica.
    #[arg(long, value_enum, default_value = "round-robin")]
    routing: RoutingArg,
    /// How long a replica must fail health probes before the router stops sending it work.
    #[arg(long, default_value_t = 1000)]
    detection_delay_ms: u64,
    /// Interval of the router's health probes.
    #[arg(long, default_value_t = 100)]
    health_interval_ms: u64,
    /// Delay before a replica restored through the admin API serves again.
    #[arg(long, default_value_t = 0)]
    cold_start_ms: u64,
    /// Seed of sampled output lengths and injected faults.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Fault: fraction of requests answered with --error-status.
    #[arg(long, default_value_t = 0.0)]
    error_fraction: f64,
    /// Fault: HTTP status of injected errors.
    #[arg(long, default_value_t = 500)]
    error_status: u16,
    /// Fault: latency added before each request reaches the engine.
    #[arg(long, default_value_t = 0)]
    added_latency_ms: u64,
    /// Fault: uniform extra latency on top of --added-latency-ms.
    #[arg(long, default_value_t = 0)]
    latency_jitter_ms: u64,
    /// Fault: fraction of streams cut after --stream-cut-after-tokens frames.
    #[arg(long, default_value_t = 0.0)]
    stream_cut_fraction: f64,
    /// Fault: frames a cut stream delivers first.
    #[arg(long, default_value_t = 8)]
    stream_cut_after_tokens: u32,
    /// Fault: how a stream is cut (`error_frame` or `disconnect`).
    #[arg(long, default_value = "error_frame")]
    stream_cut_mode: String,
    /// Fault: keep generating for a client that went away instead of aborting its request
    /// (the leak a RequestCancel failure test catches).
    #[arg(long)]
    ignore_disconnect: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum FlavorArg {
    Vllm,
    Sglang,
}

#[derive(Clone, Copy, ValueEnum)]
enum RoutingArg {
    RoundRobin,
    LeastOutstanding,
}

fn serve_sim(args: ServeSimArgs) -> Result<ExitCode> {
    use goodput::sim::fleet::{FaultsBody, FleetConfig, StreamCutBody, run_fleet};
    use goodput::sim::live::{MetricsFlavor, ReplicaConfig};
    use goodput::sim::router::{RouterConfig, RoutingPolicy};

    let setup = simulated_setup(&args.setup)?;
    let faults = FaultsBody {
        error_fraction: args.error_fraction,
        error_status: Some(args.error_status),
        added_latency_ms: args.added_latency_ms,
        latency_jitter_ms: args.latency_jitter_ms,
        stream_cut: (args.stream_cut_fraction > 0.0).then(|| StreamCutBody {
            fraction: args.stream_cut_fraction,
            after_tokens: args.stream_cut_after_tokens,
            mode: Some(args.stream_cut_mode.clone()),
        }),
    }
    .to_faults()
    .map_err(|e| anyhow::anyhow!("fault flags: {e}"))?;
    let config = FleetConfig {
        replica: ReplicaConfig {
            time_scale: args.time_scale,
            stream_interval: args.stream_interval,
            metrics_flavor: match args.metrics_flavor {
                FlavorArg::Vllm => MetricsFlavor::Vllm,
                FlavorArg::Sglang => MetricsFlavor::Sglang,
            },
            seed: args.seed,
            abort_on_disconnect: !args.ignore_disconnect,
            ..ReplicaConfig::new(setup)
        },
        replicas: args.replicas,
        host: args.host,
        port: args.port,
        router: RouterConfig {
            policy: match args.routing {
                RoutingArg::RoundRobin => RoutingPolicy::RoundRobin,
                RoutingArg::LeastOutstanding => RoutingPolicy::LeastOutstanding,
            },
            health_interval: std::time::Duration::from_millis(args.health_interval_ms.max(1)),
            detection_delay: std::time::Duration::from_millis(args.detection_delay_ms),
            ..RouterConfig::default()
        },
        cold_start: std::time::Duration::from_millis(args.cold_start_ms),
        faults,
    };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    eprintln!(
        "serve-sim: router on http://{}:{} ({} replica(s) on ports {}..={}), time scale {}",
        args.host,
        args.port,
        args.replicas,
        u32::from(args.port) + 1,
        u32::from(args.port) + args.replicas,
        args.time_scale
    );
    runtime.block_on(run_fleet(config, shutdown_signal()))?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
struct LoadgenArgs {
    /// Base URL of the endpoint, e.g. http://127.0.0.1:8000.
    #[arg(long, required_unless_present = "point_file")]
    target: Option<String>,
    /// Run one point of a CapacityBenchmark as the operator hands it to a Job: the point
    /// file holds the spec, the manifest, the point and the target, and the load is built
    /// exactly as `goodput bench` builds it. Only --shard, --start-at, --out,
    /// --result-config-map, --result-namespace, the --results-* options, --metrics-addr
    /// and --quiet apply with it.
    #[arg(long, conflicts_with_all = ["target", "manifest", "rate", "concurrency", "trace", "time_scale"])]
    point_file: Option<PathBuf>,
    /// Workload manifest (default: the seed's).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Open loop at --rate (a rate-sweep point) or closed loop at --concurrency (a
    /// saturation experiment).
    #[arg(long, value_enum, default_value = "rate")]
    mode: LoadModeArg,
    /// Offered arrival rate (requests per second), open loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Replay a trace CSV (`timestamp_s` and optional `class`, `input_tokens`,
    /// `output_tokens`) instead of generating arrivals; --rate is then only a label.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Workers, each with one request in flight, closed loop.
    #[arg(long, required_if_eq("mode", "concurrency"))]
    concurrency: Option<usize>,
    /// How long closed-loop workers keep sending (seconds).
    #[arg(long, default_value_t = 120.0)]
    duration_s: f64,
    /// Cache state: unique prompts (cold) or a prewarmed pool of shared prefixes (warm).
    #[arg(long, value_enum, default_value = "cold")]
    cache: CacheArg,
    /// Shared prefixes in the warm pool.
    #[arg(long, default_value_t = 16)]
    prefix_pool: u32,
    /// Tokens of each shared prefix.
    #[arg(long, default_value_t = 512)]
    prefix_tokens: u32,
    /// Zipf exponent of prefix popularity (0 = uniform).
    #[arg(long, default_value_t = 1.0)]
    prefix_zipf: f64,
    /// Directory for requests.csv, summary.json and engine-metrics.json (optional with
    /// --result-config-map).
    #[arg(long, required_unless_present = "result_config_map")]
    out: Option<PathBuf>,
    /// Send only shard I of N (`I/N`), keeping the global timeline; in an Indexed Job,
    /// `--shard $(JOB_COMPLETION_INDEX)/N`.
    #[arg(long, default_value = "0/1", value_parser = parse_shard)]
    shard: (u32, u32),
    /// The target is the simulated engine run K times faster than real time (`serve-sim
    /// --time-scale K`): rates, durations and timeouts are given and reported in real time,
    /// the run itself is K times faster, exactly as `goodput bench` scales a point.
    /// --max-lag-ms and --start-at stay wall clock.
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Wall-clock instant (Unix seconds, fractions allowed) of the schedule's time zero, so
    /// that the shards of one point share one timeline. Prewarm happens before it, the
    /// schedule's warmup after it. An instant already past starts at once and records the
    /// lateness (the point is invalid when it exceeds --max-lag-ms).
    #[arg(long, value_name = "UNIX_SECONDS")]
    start_at: Option<f64>,
    /// After the run, write the shard's result into this existing ConfigMap (data and
    /// binaryData; the operator creates it, this command never does), e.g.
    /// `cb-x-p3-$(JOB_COMPLETION_INDEX)`. Checked before any load is sent; uses the
    /// in-cluster configuration or KUBECONFIG.
    #[arg(long, value_name = "NAME", value_parser = parse_config_map_name)]
    result_config_map: Option<String>,
    /// Namespace of --result-config-map (default: the pod's own namespace, else the
    /// kubeconfig's).
    #[arg(long, value_name = "NS", requires = "result_config_map")]
    result_namespace: Option<String>,
    /// After the run, upload the files written to --out to this S3-compatible location
    /// (`s3://<bucket>/<prefix>`: `<prefix>/requests.csv`, ...). Credentials come from
    /// the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, or
    /// web identity); a failed upload fails the command.
    #[arg(long, value_name = "S3_URL", requires = "out")]
    results_url: Option<String>,
    /// The S3 API endpoint of --results-url on a server other than AWS (MinIO, Ceph, R2).
    #[arg(long, value_name = "URL", requires = "results_url")]
    results_endpoint: Option<String>,
    /// The bucket's region (default: AWS_REGION, else us-east-1).
    #[arg(long, value_name = "REGION", requires = "results_url")]
    results_region: Option<String>,
    /// Allow a plain-http --results-endpoint.
    #[arg(long, requires = "results_url")]
    results_allow_http: bool,
    /// Endpoint kind: token-id prompts on /v1/completions, or text on /v1/chat/completions.
    #[arg(long, value_enum, default_value = "completions")]
    api: ApiArg,
    /// Model name to send (default: the manifest's model id).
    #[arg(long)]
    model: Option<String>,
    /// Engine /metrics base URL to scrape during the point; repeatable.
    #[arg(long = "metrics-url")]
    metrics_urls: Vec<String>,
    /// Discover replica /metrics URLs from the target's `GET /replicas` (serve-sim's router).
    #[arg(long)]
    metrics_discover: bool,
    /// Scrape interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    scrape_interval_ms: u64,
    /// Schedule seed (default: the manifest's).
    #[arg(long)]
    seed: Option<u64>,
    /// Requests per schedule block (default: the manifest's initial schedule).
    #[arg(long)]
    requests: Option<u64>,
    /// Warmup seconds excluded from measurement (default: the manifest's).
    #[arg(long)]
    warmup_s: Option<f64>,
    /// Also exclude the first N requests.
    #[arg(long, default_value_t = 0)]
    warmup_requests: u64,
    /// Shortest measured window, open loop (default: the manifest's minimum duration).
    #[arg(long)]
    min_duration_s: Option<f64>,
    /// Most schedule blocks used to meet the window and sample rules.
    #[arg(long, default_value_t = 10)]
    max_blocks: u64,
    /// Whole-request timeout (default: the manifest's cancellation timeout, else 600 s).
    #[arg(long)]
    timeout_s: Option<f64>,
    /// Longest silence inside a stream.
    #[arg(long, default_value_t = 60.0)]
    stall_timeout_s: f64,
    /// Schedule-lag P99 (wall clock) above which the point is invalid; also the most a
    /// --start-at may be missed by.
    #[arg(long, default_value_t = 10.0)]
    max_lag_ms: f64,
    /// Cap requests in flight (open loop); any lag it causes is measured and can
    /// invalidate the point.
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Write every inter-token gap in requests.csv (itl_ms column).
    #[arg(long)]
    record_itl: bool,
    /// Speak HTTP/2 without negotiation (h2c) to a plain-HTTP target that supports it;
    /// HTTPS targets negotiate HTTP/2 by ALPN anyway.
    #[arg(long)]
    http2: bool,
    /// Serve the client metrics the `goodput-client` alert rules read on
    /// `http://HOST:PORT/metrics` while the command runs (e.g. 0.0.0.0:9090; port 0 picks
    /// one): requests completed by class and result, successes meeting both cutoffs,
    /// the attainment target, and the p99 schedule lag over the last second. Warmup
    /// requests count; figures are in real time under --time-scale.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// No progress lines.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LoadModeArg {
    Rate,
    Concurrency,
}

#[derive(Clone, Copy, ValueEnum)]
enum CacheArg {
    Cold,
    Warm,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ApiArg {
    Completions,
    Chat,
}

fn parse_shard(s: &str) -> Result<(u32, u32), String> {
    if s.contains("$(") {
        return Err(format!(
            "`{s}` holds an unexpanded `$(...)`: Kubernetes expands `$(JOB_COMPLETION_INDEX)` \
             only in an Indexed Job's pods"
        ));
    }
    let (i, n) = s.split_once('/').ok_or("expected I/N, e.g. 0/4")?;
    let i: u32 = i
        .trim()
        .parse()
        .map_err(|_| format!("bad shard index in `{s}`"))?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("bad shard count in `{s}`"))?;
    if n == 0 || i >= n {
        return Err(format!("shard {i}/{n}: need 0 <= I < N"));
    }
    Ok((i, n))
}

fn parse_config_map_name(s: &str) -> Result<String, String> {
    goodput::loadgen::publish::check_config_map_name(s)?;
    Ok(s.to_owned())
}

/// Words per token of the server's tokenizer, measured with `/tokenize` on a sample text.
async fn calibrate_words_per_token(
    client: &reqwest::Client,
    target: &str,
    model: &str,
) -> Option<f64> {
    let words = 400;
    let text = goodput::loadgen::prompt::prompt_text(0, 0, words, None);
    let body = serde_json::json!({"model": model, "prompt": text});
    let r = client
        .post(format!("{target}/tokenize"))
        .json(&body)
        .send()
        .await
        .ok()?;
    let v: serde_json::Value = r.error_for_status().ok()?.json().await.ok()?;
    let count = v["count"]
        .as_f64()
        .or_else(|| v["tokens"].as_array().map(|t| t.len() as f64))?;
    (count > 0.0).then(|| f64::from(words) / count)
}

fn loadgen(args: LoadgenArgs) -> Result<ExitCode> {
    use goodput::loadgen::prompt::{CacheMode, PromptMethod};
    use goodput::loadgen::run::{LoadConfig, LoadMode};
    use goodput::loadgen::{Api, Timeouts};
    use goodput::workload::schedule::{Arrival, ScheduleSpec, SharedPrefix};

    if let Some(path) = args.point_file.clone() {
        return loadgen_point_file(args, &path);
    }
    let k = args.time_scale;
    if !(k.is_finite() && k > 0.0) {
        bail!("--time-scale must be a positive number, got {k}");
    }
    if let Some(at) = args.start_at {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if !(at.is_finite() && at > 0.0) || at - now > 86_400.0 {
            bail!("--start-at {at} is not a Unix time in seconds within a day from now ({now:.0})");
        }
    }
    let manifest = manifest_or_seed(args.manifest.as_deref())?;
    let c = manifest.client.clone();
    let arrival = match &args.trace {
        Some(path) => Arrival::Trace(goodput::workload::schedule::read_trace(path)?),
        None => manifest.arrival().context(
            "the manifest's arrival pattern is `trace`: give the trace with --trace FILE",
        )?,
    };
    let warm = matches!(args.cache, CacheArg::Warm);
    let shared_prefix = warm.then_some(SharedPrefix {
        pool: args.prefix_pool.max(1),
        tokens: args.prefix_tokens,
        zipf: args.prefix_zipf,
    });
    let schedule = ScheduleSpec {
        classes: manifest.schedule_classes(),
        requests: args.requests.unwrap_or(c.initial_scheduled_requests),
        seed: args.seed.unwrap_or(c.request_schedule_seed),
        arrival,
        output_jitter: 0.0,
        shared_prefix,
    };
    let mode = match args.mode {
        LoadModeArg::Rate => {
            let rate = args.rate.context("--rate is required in rate mode")?;
            if !(rate.is_finite() && rate > 0.0) {
                bail!("--rate must be positive");
            }
            LoadMode::Rate { rate }
        }
        LoadModeArg::Concurrency => LoadMode::Concurrency {
            concurrency: args
                .concurrency
                .context("--concurrency is required")?
                .max(1),
            duration_s: args.duration_s,
        },
    };
    let timeout_s = args
        .timeout_s
        .or(manifest
            .cancellation
            .as_ref()
            .map(|x| x.request_timeout_seconds))
        .unwrap_or(600.0);
    let model = args
        .model
        .clone()
        .unwrap_or_else(|| manifest.model.id.clone());
    let target = args
        .target
        .as_deref()
        .context("--target is required")?
        .trim_end_matches('/')
        .to_owned();

    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async move {
        // Before any load: a result that cannot be handed over would waste the run.
        let result_config_map = match &args.result_config_map {
            Some(name) => Some(
                goodput::loadgen::publish::ResultConfigMap::connect(
                    name,
                    args.result_namespace.as_deref(),
                    args.shard,
                )
                .await?,
            ),
            None => None,
        };
        let client = goodput::http_client::load_client(args.http2)?;
        let (text_words_per_token, prompt_method) = match args.api {
            ApiArg::Completions => (None, PromptMethod::TokenIds),
            ApiArg::Chat => match calibrate_words_per_token(&client, &target, &model).await {
                Some(w) => (Some(w), PromptMethod::TextCalibrated),
                None => (Some(0.75), PromptMethod::TextEstimated),
            },
        };
        let mut metrics_targets = args.metrics_urls.clone();
        if args.metrics_discover {
            let found = goodput::engine_metrics::scrape::discover_targets(&client, &target)
                .await
                .with_context(|| format!("discovering replicas from {target}/replicas"))?;
            metrics_targets.extend(found);
        }
        let config = LoadConfig {
            api: match args.api {
                ApiArg::Completions => Api::Completions,
                ApiArg::Chat => Api::Chat,
            },
            cache: if warm {
                CacheMode::Warm
            } else {
                CacheMode::Cold
            },
            shared_prefix,
            seed: schedule.seed,
            timeouts: Timeouts {
                request: std::time::Duration::from_secs_f64(timeout_s.max(0.001)),
                stall: std::time::Duration::from_secs_f64(args.stall_timeout_s.max(0.001)),
                connect: std::time::Duration::from_secs(10),
            },
            warmup_s: args.warmup_s.unwrap_or(c.warmup_seconds),
            warmup_requests: args.warmup_requests,
            text_words_per_token,
            prompt_method,
            max_in_flight: args.max_in_flight,
            progress: !args.quiet,
            ..LoadConfig::for_manifest(&manifest, target.clone(), model, mode)
        };
        let plan = goodput::loadgen::point::PointPlan {
            min_duration_s: args.min_duration_s.unwrap_or(c.minimum_duration_seconds),
            max_blocks: args.max_blocks,
            shard: args.shard,
            scrape_interval: std::time::Duration::from_millis(args.scrape_interval_ms.max(10)),
            // The lag bound is wall clock, K times as much real (model) time.
            max_lag_ms: args.max_lag_ms * k,
            record_itl: args.record_itl,
            start_at_unix_s: args.start_at,
            ..goodput::loadgen::point::PointPlan::for_manifest(&manifest, schedule, metrics_targets)
        };
        measure_and_hand_over(
            client,
            &config,
            &plan,
            k,
            &args,
            result_config_map.as_ref(),
            None,
        )
        .await
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Runs one point (scaled by `k`), writes its files under `--out` and hands its shard result
/// to the operator's ConfigMap when one is named.
async fn measure_and_hand_over(
    client: reqwest::Client,
    config: &goodput::loadgen::run::LoadConfig,
    plan: &goodput::loadgen::point::PointPlan,
    k: f64,
    args: &LoadgenArgs,
    result_config_map: Option<&goodput::loadgen::publish::ResultConfigMap>,
    prometheus: Option<&goodput::api::PrometheusSource>,
) -> Result<()> {
    // Configured before any load, so a malformed bucket URL costs no run.
    let bucket = match &args.results_url {
        Some(url) => Some(goodput::loadgen::bucket::ShardBucket::new(
            url,
            args.results_endpoint.as_deref(),
            args.results_region.as_deref(),
            args.results_allow_http,
        )?),
        None => None,
    };
    // Bound before any load too; served until this function returns (on any path), when
    // `_metrics_stop` drops.
    let (_metrics_stop, live_metrics) = match args.metrics_addr {
        Some(addr) => {
            use goodput::loadgen::live_metrics::{LiveMetrics, bind, serve};
            let listener = bind(addr)
                .await
                .with_context(|| format!("cannot listen on --metrics-addr {addr}"))?;
            let metrics = std::sync::Arc::new(LiveMetrics::new(&plan.gate, k));
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            if !args.quiet {
                let at = listener.local_addr().unwrap_or(addr);
                eprintln!("loadgen: client metrics on http://{at}/metrics");
            }
            let served = metrics.clone();
            tokio::spawn(async move {
                let shutdown = async move {
                    let _ = stopped.await;
                };
                if let Err(e) = serve(listener, served, shutdown).await {
                    eprintln!("loadgen: warning: the metrics server stopped: {e}");
                }
            });
            (Some(stop), Some(metrics))
        }
        None => (None, None),
    };
    let config = &goodput::loadgen::run::LoadConfig {
        live_metrics,
        ..config.clone()
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        eprintln!("loadgen: stopping; writing what was measured");
        let _ = stop_tx.send(true);
    });
    let mut measured =
        goodput::loadgen::point::measure_time_scaled(client.clone(), config, plan, k, stop_rx)
            .await?;
    // After rescaling, the window is on the wall clock only in a real-time run; a
    // Prometheus scrapes real servers, which run in real time.
    if let Some(p) = prometheus.filter(|_| k == 1.0) {
        let end = measured.started_unix_s + measured.run.start.elapsed().as_secs_f64();
        match goodput::bench::prometheus_series(&client, p, measured.started_unix_s, end).await {
            Ok(series) => measured.series = Some(series),
            // The point stands on the client's records; the queue trend then comes from
            // the client's in-flight count, and the summary says so.
            Err(e) => eprintln!("loadgen: warning: engine metrics from Prometheus: {e}"),
        }
    }
    let summary = measured.summarize(config, plan)?;
    if let Some(out) = &args.out {
        measured.write(&summary, plan, out)?;
        if let Some(bucket) = &bucket {
            let objects = bucket.upload_dir(out).await?;
            if !args.quiet {
                eprintln!("loadgen: uploaded {}", objects.join(", "));
            }
        }
    }
    if let Some(target) = result_config_map {
        let result = goodput::loadgen::handoff::ShardResult::new(&measured, summary.clone(), plan)?;
        target.publish(&result).await.with_context(|| {
            format!(
                "shard {} measured, but its result could not be written",
                result.shard_label()
            )
        })?;
        if !args.quiet {
            eprintln!(
                "loadgen: shard {} result written to ConfigMap {}",
                result.shard_label(),
                target.display_name()
            );
        }
    }
    if !args.quiet {
        eprint!("{}", summary.report.human_summary());
        eprintln!(
            "{}: sent {}, measured {}, lag p50/p99/max {:.2}/{:.2}/{:.2} ms, peak in flight {}, window {:.1} s",
            summary.experiment,
            summary.client.sent,
            summary.client.measured,
            summary.client.schedule_lag_ms.p50,
            summary.client.schedule_lag_ms.p99,
            summary.client.schedule_lag_ms.max,
            summary.client.peak_in_flight,
            summary.client.window_s
        );
        for r in &summary.validity.reasons {
            eprintln!("not capacity evidence: {r}");
        }
    }
    Ok(())
}

/// `goodput loadgen --point-file`: the point a benchmark Job runs, built with the same
/// function as `goodput bench`'s points, this pod's shard of it on the shared timeline.
fn loadgen_point_file(args: LoadgenArgs, path: &Path) -> Result<ExitCode> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the point file {}", path.display()))?;
    let job: goodput::bench::point_job::PointJob = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a point file", path.display()))?;
    let k = job.target.time_scale;
    if !(k.is_finite() && k > 0.0) {
        bail!("the point file's time scale must be positive, got {k}");
    }
    let (mut config, mut plan) = job.load()?;
    config.progress = false;
    plan.shard = args.shard;
    plan.start_at_unix_s = args.start_at;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let result_config_map = match &args.result_config_map {
            Some(name) => Some(
                goodput::loadgen::publish::ResultConfigMap::connect(
                    name,
                    args.result_namespace.as_deref(),
                    args.shard,
                )
                .await?,
            ),
            None => None,
        };
        let client = goodput::http_client::load_client(false)?;
        if job.target.discover_metrics {
            let found = goodput::engine_metrics::scrape::discover_targets(&client, &job.target.url)
                .await
                .with_context(|| {
                    format!("discovering replicas from {}/replicas", job.target.url)
                })?;
            plan.metrics_targets.extend(found);
        }
        // Shard 0 reads the engine series from Prometheus when the spec names one (every
        // shard sees the same engine; the merge judges with the lowest shard's series).
        let prometheus = job
            .spec
            .target
            .prometheus
            .as_ref()
            .filter(|_| plan.shard.0 == 0);
        measure_and_hand_over(
            client,
            &config,
            &plan,
            k,
            &args,
            result_config_map.as_ref(),
            prometheus,
        )
        .await
    })?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
struct LintArgs {
    /// CapacityBenchmark YAML files. A file of several documents (`---`) is linted
    /// benchmark by benchmark; its other objects (a Deployment, a Service) are left alone.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Lint for the operator, not for `goodput bench`: a Service target and a manifest in
    /// a ConfigMap, which only the operator resolves, are accepted (the operator then
    /// checks the manifest when it reads the ConfigMap).
    #[arg(long)]
    cluster: bool,
}

/// `FILE: error: PATH: message` per finding (`warning:` for warnings), `FILE: ok` for a file
/// without errors (with ` (NAME)` after FILE when the file holds several documents); exit
/// status 1 if any file could not be parsed, holds no benchmark, or has an error.
fn lint(args: LintArgs) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let mut failed = false;
    for path in &args.files {
        let name = path.display();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                failed = true;
                writeln!(out, "{name}: error: cannot read: {e}")?;
                continue;
            }
        };
        let documents = goodput::api::yaml_documents(&text);
        let several = documents.len() > 1;
        let mut benchmarks = 0;
        for doc in &documents {
            if several && !goodput::api::is_benchmark_document(doc) {
                continue;
            }
            benchmarks += 1;
            let label = match (several, goodput::api::document_name(doc)) {
                (true, Some(n)) => format!("{name} ({n})"),
                _ => name.to_string(),
            };
            match goodput::api::parse_benchmark(doc, path) {
                Err(e) => {
                    failed = true;
                    writeln!(out, "{label}: error: {}", e.message())?;
                }
                Ok(mut loaded) => {
                    if args.cluster {
                        loaded
                            .findings
                            .retain(|f| !goodput::api::resolved_in_cluster(f));
                        loaded
                            .findings
                            .extend(goodput::api::lint::cluster_failure_test(
                                &loaded.benchmark.spec,
                            ));
                    }
                    for finding in &loaded.findings {
                        writeln!(out, "{label}: {finding}")?;
                    }
                    if loaded.has_errors() {
                        failed = true;
                    } else {
                        writeln!(out, "{label}: ok")?;
                    }
                }
            }
        }
        if benchmarks == 0 {
            failed = true;
            writeln!(out, "{name}: error: no CapacityBenchmark in the file")?;
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[derive(clap::Args)]
struct CrdsArgs {
    /// Write each CRD to its file in this folder (`capacitybenchmark.yaml`,
    /// `servingplan.yaml`) instead of printing them.
    #[arg(long, value_name = "DIR", conflicts_with = "check")]
    write: Option<PathBuf>,
    /// Compare the files in this folder with the generated CRDs; exit status 1, naming
    /// each file that differs, if any does (the CRD drift check).
    #[arg(long, value_name = "DIR")]
    check: Option<PathBuf>,
}

fn crds(args: CrdsArgs) -> Result<ExitCode> {
    let files = goodput::api::crd_files();
    if let Some(dir) = args.write {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, yaml) in &files {
            let path = dir.join(name);
            std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(dir) = args.check {
        let mut drifted = false;
        for (name, yaml) in &files {
            let path = dir.join(name);
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            if &committed != yaml {
                eprintln!(
                    "{}: differs from the generated CRD: run `goodput crds --write {}`",
                    path.display(),
                    dir.display()
                );
                drifted = true;
            }
        }
        return Ok(if drifted {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        });
    }
    let stream: Vec<&str> = files.iter().map(|(_, yaml)| yaml.as_str()).collect();
    write!(std::io::stdout().lock(), "{}", stream.join("---\n"))?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
struct BenchArgs {
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
fn bench(args: BenchArgs) -> Result<ExitCode> {
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
            shutdown_signal().await;
            eprintln!("bench: stopping; the current point is written as measured");
            let _ = stop_tx.send(true);
        });
        goodput::bench::run_bench(&loaded.benchmark, &loaded.manifest, &options, stop_rx).await
    })?;
    print!("{}", goodput::pack::summary_text(&result));
    println!("capacity pack: {}", out.display());
    Ok(ExitCode::SUCCESS)
}
