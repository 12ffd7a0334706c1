//! `goodput serve-sim`: the engine model served live, replicas behind a router.

use std::process::ExitCode;

use super::simulate::{SetupArgs, simulated_setup};
use anyhow::{Context, Result};
use clap::ValueEnum;

/// Flags of `goodput serve-sim`.
#[derive(clap::Args)]
pub struct ServeSimArgs {
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

pub fn run(args: ServeSimArgs) -> Result<ExitCode> {
    use goodput::sim::live::fleet::{FaultsBody, FleetConfig, StreamCutBody, run_fleet};
    use goodput::sim::live::router::{RouterConfig, RoutingPolicy};
    use goodput::sim::live::{MetricsFlavor, ReplicaConfig};

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
    runtime.block_on(run_fleet(config, super::shutdown_signal()))?;
    Ok(ExitCode::SUCCESS)
}
