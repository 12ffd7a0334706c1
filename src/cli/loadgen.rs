//! `goodput loadgen`: one test point against an OpenAI-compatible endpoint.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use goodput::api::CacheMode;

/// Flags of `goodput loadgen`.
#[derive(clap::Args)]
pub struct LoadgenArgs {
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
    #[arg(long, default_value_t = CacheMode::Cold)]
    cache: CacheMode,
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

pub fn run(args: LoadgenArgs) -> Result<ExitCode> {
    use goodput::loadgen::prompt::PromptMethod;
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
    let manifest = super::manifest_or_seed(args.manifest.as_deref())?;
    let c = manifest.client.clone();
    let arrival = match &args.trace {
        Some(path) => Arrival::Trace(goodput::workload::schedule::read_trace(path)?),
        None => manifest.arrival().context(
            "the manifest's arrival pattern is `trace`: give the trace with --trace FILE",
        )?,
    };
    let warm = args.cache == CacheMode::Warm;
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
        let result_config_map = connect_result_config_map(&args).await?;
        let client = goodput::http_client::load_client(args.http2)?;
        // Chat prompts start from the estimate; the point calibrates it against the
        // server's tokenizer before any load.
        let (text_words_per_token, prompt_method) = match args.api {
            ApiArg::Completions => (None, PromptMethod::TokenIds),
            ApiArg::Chat => (
                Some(goodput::loadgen::prompt::ESTIMATED_WORDS_PER_TOKEN),
                PromptMethod::TextEstimated,
            ),
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
            cache: args.cache,
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
        super::shutdown_signal().await;
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
        let result_config_map = connect_result_config_map(&args).await?;
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

/// The ConfigMap the result is handed over in (`--result-config-map`), reached before any
/// load: a result that cannot be handed over would waste the run.
async fn connect_result_config_map(
    args: &LoadgenArgs,
) -> Result<Option<goodput::loadgen::publish::ResultConfigMap>> {
    match &args.result_config_map {
        Some(name) => Ok(Some(
            goodput::loadgen::publish::ResultConfigMap::connect(
                name,
                args.result_namespace.as_deref(),
                args.shard,
            )
            .await?,
        )),
        None => Ok(None),
    }
}
