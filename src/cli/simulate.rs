//! `goodput simulate`: the offline what-if on the engine model; its setup flags are
//! `serve-sim`'s too.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use serde::Serialize;

use super::OutputFormat;
use goodput::sim::fleet_model::simulate_fleet_rate;
use goodput::sim::offline::{
    Arrival, ClassShape, SharedPrefix, WorkloadSpec, find_max_rate, gate_for, simulate_rates,
};
use goodput::sim::{PRESETS, Setup, apply_overrides, apply_yaml_overrides, resolve_preset};
use goodput::workload::WorkloadManifest;

/// The engine model's configuration: a preset and overrides.
#[derive(clap::Args)]
pub struct SetupArgs {
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

/// Flags of `goodput simulate`.
#[derive(clap::Args)]
pub struct SimulateArgs {
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
    /// Replicas behind a round-robin router (the simulated engine's default): each rate is
    /// dealt across them and judged as one point.
    #[arg(long, default_value_t = 1)]
    replicas: u32,
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
pub fn simulated_setup(args: &SetupArgs) -> Result<Setup> {
    let mut setup = resolve_preset(&args.preset, None)?;
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
            let w = WorkloadSpec::for_manifest(m).context(
                "the manifest's trace arrivals cannot be simulated offline; pass --arrival",
            )?;
            (w.classes, w.requests, w.seed, w.arrival)
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

pub fn run(args: SimulateArgs) -> Result<ExitCode> {
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
        .map(|p| super::manifest_or_seed(Some(p)))
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
            let row = match simulate_fleet_rate(&setup, &spec, rate, args.replicas, gate.as_ref()) {
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

    let rows = if args.replicas > 1 {
        args.rates
            .iter()
            .map(|&r| simulate_fleet_rate(&setup, &spec, r, args.replicas, gate.as_ref()))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        simulate_rates(&setup, &spec, &args.rates, gate.as_ref())?
    };
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
