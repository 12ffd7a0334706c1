//! Checks of a `CapacityBenchmark` before any traffic: every finding names the field path it
//! is about (`spec.experiments.rateSweep.rates[1]`) and says what to change.
//!
//! The lint refuses benchmarks whose result could not mean what it claims (a capacity from
//! a closed loop, a gate no point can pass, a "cold" run the prefix cache serves, mean-only
//! reports) and flags ones that probably do not measure what the user expects.

use super::{
    CacheMode, CapacityBenchmarkSpec, ColdPrompts, SimulatedTarget, Statistic, TimeScale,
    WorkloadSource,
};
use crate::sim::setup::Setup;
use crate::workload::Findings;
use crate::workload::{ArrivalPattern, Finding, Toggle, WorkloadManifest};

/// The no-warmup warning, worded as the manifest validator words it, so that a loader
/// merging both lists shows it once.
const NO_WARMUP: &str = "no warmup: compilation and cache fill land in the measurement window";

/// Every finding of a benchmark whose workload manifest is resolved: [`lint_spec`] plus the
/// checks that need the manifest (sample rule, warm cache, warmup, model name). The manifest
/// is the one the benchmark runs; the gate is `spec.acceptance` when given, else the
/// manifest's. The manifest's own validation (`crate::workload::validate`) is not repeated.
pub fn lint(spec: &CapacityBenchmarkSpec, manifest: &WorkloadManifest) -> Vec<Finding> {
    let mut out = Lint::of(lint_spec(spec));
    out.with_manifest(spec, manifest);
    out.found()
}

/// The checks that need no manifest (usable before a `manifestConfigMap` is read).
pub fn lint_spec(spec: &CapacityBenchmarkSpec) -> Vec<Finding> {
    let mut out = Lint::default();
    out.workload_source(&spec.workload);
    out.target(spec);
    out.experiments(spec);
    if spec.repeats == 0 {
        out.error(
            "spec.repeats",
            "must be at least 1 (one run of every point)",
        );
    }
    out.peak(spec);
    out.reporting(spec);
    out.loadgen(spec);
    out.failure_test(spec);
    out.found()
}

/// What the operator cannot run: `simulated.timeScale: auto` (it calibrates against the
/// machine `goodput bench` runs on) and the parts of `spec.failureTest` of
/// [`cluster_failure_test`]. Errors, none when it can run it all.
pub fn cluster_unsupported(spec: &CapacityBenchmarkSpec) -> Vec<Finding> {
    let mut out = Lint::default();
    if spec.target.is_simulated()
        && spec.target.simulated.as_ref().map(|s| s.time_scale) == Some(TimeScale::Auto)
    {
        out.error(
            "spec.target.simulated.timeScale",
            "auto calibrates the engine on the machine goodput bench runs on; in a cluster \
             give a number (the K goodput bench chose is in its capacity pack)",
        );
    }
    let mut found = out.found();
    found.extend(cluster_failure_test(spec));
    found
}

/// What the operator cannot run of `spec.failureTest`: in a cluster a fault is
/// `KillReplica`, injected by deleting a ready pod of `spec.target.service`, or
/// `RequestCancel`, the load's own clients cancelling (the simulated engine's replicas
/// share one pod, and the other kinds need its admin API: `goodput bench` runs them).
/// Errors, none when it can run it all.
pub fn cluster_failure_test(spec: &CapacityBenchmarkSpec) -> Vec<Finding> {
    let Some(test) = spec.failure_test.as_ref() else {
        return Vec::new();
    };
    let mut out = Lint::default();
    let kills = test
        .faults
        .iter()
        .any(|f| f.kind == super::FaultKind::KillReplica);
    if spec.target.is_simulated() {
        out.error(
            "spec.failureTest",
            "the operator's simulated engine runs its replicas in one pod: run failure \
             tests against it with goodput bench",
        );
    } else if kills && spec.target.service.is_none() {
        out.error(
            "spec.failureTest",
            "in a cluster KillReplica deletes a pod of spec.target.service; against a URL \
             run it with goodput bench",
        );
    }
    let in_cluster: Vec<&str> = super::FaultKind::ALL
        .into_iter()
        .filter(|k| k.in_cluster())
        .map(super::FaultKind::as_str)
        .collect();
    for (i, f) in test.faults.iter().enumerate() {
        if !f.kind.in_cluster() {
            out.error(
                format!("spec.failureTest.faults[{i}].kind"),
                format!(
                    "{} needs the simulated engine's admin API (goodput bench); in a cluster \
                     the faults are {}",
                    f.kind,
                    in_cluster.join(" and ")
                ),
            );
        }
    }
    out.found()
}

/// Where the manifest's fields live, as the prefix of their finding paths:
/// `spec.workload.manifest` (inline), `spec.workload.manifestFile(<file>)` or
/// `spec.workload.manifestConfigMap(<name>/<key>)`.
pub fn manifest_path(source: &WorkloadSource) -> String {
    match (
        &source.manifest,
        &source.manifest_file,
        &source.manifest_config_map,
    ) {
        (None, Some(file), _) => format!("spec.workload.manifestFile({file})"),
        (None, None, Some(cm)) => {
            format!("spec.workload.manifestConfigMap({}/{})", cm.name, cm.key)
        }
        _ => "spec.workload.manifest".into(),
    }
}

/// Whether `url` is an absolute `http://` or `https://` URL with a host.
fn is_http_url(url: &str) -> bool {
    ["http://", "https://"].iter().any(|scheme| {
        url.strip_prefix(scheme)
            .is_some_and(|rest| !rest.is_empty())
    })
}

/// Whether `name` is a DNS-1123 label, as namespace names are: lowercase letters, digits
/// and `-`, starting and ending with a letter or digit, at most 63 characters.
fn is_dns1123_label(name: &str) -> bool {
    let b = name.as_bytes();
    (1..=63).contains(&b.len())
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Whether `name` is a DNS-1035 label, as Service names are: a DNS-1123 label that starts
/// with a letter.
fn is_dns1035_label(name: &str) -> bool {
    is_dns1123_label(name) && name.as_bytes()[0].is_ascii_lowercase()
}

fn positive(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

/// The manifest validator's collector (its helpers: `error`, `warning`, `positive`, ...)
/// with the custom resources' checks added.
#[derive(Default)]
struct Lint(Findings);

impl Lint {
    /// Collecting on after `found`.
    fn of(found: Vec<Finding>) -> Lint {
        Lint(Findings(found))
    }

    /// Every finding, in check order.
    fn found(self) -> Vec<Finding> {
        self.0.0
    }
}

impl std::ops::Deref for Lint {
    type Target = Findings;
    fn deref(&self) -> &Findings {
        &self.0
    }
}

impl std::ops::DerefMut for Lint {
    fn deref_mut(&mut self) -> &mut Findings {
        &mut self.0
    }
}

// Findings are collected in check order by the manifest validator's collector; the
// benchmark's rules are added to it here.
impl Lint {
    fn workload_source(&mut self, w: &WorkloadSource) {
        let given = usize::from(w.manifest.is_some())
            + usize::from(w.manifest_file.is_some())
            + usize::from(w.manifest_config_map.is_some());
        match given {
            0 => self.error(
                "spec.workload",
                "no manifest: give one of manifest (inline), manifestFile or manifestConfigMap",
            ),
            1 => {}
            _ => self.error(
                "spec.workload",
                "give exactly one of manifest, manifestFile and manifestConfigMap",
            ),
        }
        if let Some(cm) = &w.manifest_config_map {
            if cm.name.trim().is_empty() {
                self.error("spec.workload.manifestConfigMap.name", "must not be empty");
            }
            if cm.key.trim().is_empty() {
                self.error("spec.workload.manifestConfigMap.key", "must not be empty");
            }
        }
    }

    fn target(&mut self, spec: &CapacityBenchmarkSpec) {
        let t = &spec.target;
        if let Some(url) = &t.url
            && !is_http_url(url)
        {
            self.error(
                "spec.target.url",
                format!("`{url}` is not an http:// or https:// URL"),
            );
        }
        let given: Vec<&str> = [
            ("url", t.url.is_some()),
            ("service", t.service.is_some()),
            ("simulated", t.simulated.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if let [first @ .., last] = given.as_slice()
            && !first.is_empty()
        {
            self.error(
                "spec.target",
                format!(
                    "{} and {last} are set: give one (url for a server reached directly, \
                     service for one in the cluster, simulated for the built-in engine)",
                    first.join(", ")
                ),
            );
        }
        if let Some(svc) = &t.service {
            if !is_dns1035_label(&svc.name) {
                self.error(
                    "spec.target.service.name",
                    format!(
                        "`{}` is not a Service name (lowercase letters, digits and `-`, \
                         starting with a letter, at most 63 characters)",
                        svc.name
                    ),
                );
            }
            if !(1..=65535).contains(&svc.port) {
                self.error(
                    "spec.target.service.port",
                    format!("{} is not a port number (1 to 65535)", svc.port),
                );
            }
            if let Some(ns) = &svc.namespace
                && !is_dns1123_label(ns)
            {
                self.error(
                    "spec.target.service.namespace",
                    format!("`{ns}` is not a namespace name"),
                );
            }
        }
        for (i, url) in t.metrics_urls.iter().enumerate() {
            if !is_http_url(url) {
                self.error(
                    format!("spec.target.metricsUrls[{i}]"),
                    format!("`{url}` is not an http:// or https:// URL"),
                );
            }
        }
        if let Some(p) = &t.prometheus {
            if !is_http_url(&p.url) {
                self.error(
                    "spec.target.prometheus.url",
                    format!("`{}` is not an http:// or https:// URL", p.url),
                );
            }
            if !positive(p.step_seconds) {
                self.error(
                    "spec.target.prometheus.stepSeconds",
                    format!("{} must be a positive number of seconds", p.step_seconds),
                );
            }
        }
        if t.replicas == Some(0) {
            self.error("spec.target.replicas", "must be at least 1");
        }
        if t.gpus_per_replica == Some(0) {
            self.error("spec.target.gpusPerReplica", "must be at least 1");
        }
        if let Some(k) = t.time_scale {
            if !positive(k) {
                self.error(
                    "spec.target.timeScale",
                    format!("{k} must be a positive, finite speed-up"),
                );
            } else if t.is_simulated() {
                self.warning(
                    "spec.target.timeScale",
                    "applies to a url or service target only; the simulated engine's is \
                     simulated.timeScale",
                );
            }
        }
        if t.is_simulated()
            && let Some(sim) = &t.simulated
        {
            self.simulated(sim, t.replicas);
        }
    }

    /// The simulated target: preset, overrides, replicas, time scale, stream interval.
    fn simulated(&mut self, sim: &SimulatedTarget, target_replicas: Option<u32>) {
        simulated_setup(sim, Some(&mut *self));
        if sim.replicas == 0 {
            self.error("spec.target.simulated.replicas", "must be at least 1");
        } else if let Some(r) = target_replicas
            && r != sim.replicas
        {
            self.warning(
                "spec.target.replicas",
                format!(
                    "{r} differs from simulated.replicas ({}): per-replica capacity would be \
                     divided by the wrong count; drop target.replicas",
                    sim.replicas
                ),
            );
        }
        if let TimeScale::Fixed(k) = sim.time_scale
            && !positive(k)
        {
            self.error(
                "spec.target.simulated.timeScale",
                format!("{k} must be a positive, finite speed-up, or auto"),
            );
        }
        if sim.stream_interval == 0 {
            self.error(
                "spec.target.simulated.streamInterval",
                "must be at least 1 token per SSE frame",
            );
        }
    }

    fn experiments(&mut self, spec: &CapacityBenchmarkSpec) {
        let e = &spec.experiments;
        match (&e.saturation, &e.rate_sweep) {
            (Some(_), None) if spec.peak.is_some() => self.error(
                "spec.experiments.rateSweep",
                "absent, yet a peak is to be planned: a closed-loop saturation experiment \
                 throttles itself and never validates an arrival rate, so it gives no \
                 capacity; add rateSweep (empty rates sweep around the saturation knee)",
            ),
            (Some(_), None) => self.warning(
                "spec.experiments.rateSweep",
                "absent: the saturation experiment finds the knee only and this run measures \
                 no capacity; add rateSweep (empty rates sweep around the knee)",
            ),
            _ => {}
        }
        if let Some(s) = &e.saturation {
            if s.concurrency.is_empty() {
                self.error(
                    "spec.experiments.saturation.concurrency",
                    "empty: list the concurrency levels, ascending",
                );
            }
            for (i, &c) in s.concurrency.iter().enumerate() {
                let at = format!("spec.experiments.saturation.concurrency[{i}]");
                if c == 0 {
                    self.error(at, "must be at least 1 request in flight");
                } else if i > 0 && c <= s.concurrency[i - 1] {
                    self.error(
                        at,
                        format!(
                            "{c} is not above the level before it ({}): list levels \
                             ascending, each once",
                            s.concurrency[i - 1]
                        ),
                    );
                }
            }
            self.positive(
                "spec.experiments.saturation.durationSeconds",
                s.duration_seconds,
            );
        }
        if let Some(r) = &e.rate_sweep {
            for (i, &rate) in r.rates.iter().enumerate() {
                let at = format!("spec.experiments.rateSweep.rates[{i}]");
                if !positive(rate) {
                    self.error(
                        at,
                        format!("{rate} must be a positive, finite rate (requests per second)"),
                    );
                } else if i > 0 && positive(r.rates[i - 1]) && rate <= r.rates[i - 1] {
                    self.error(
                        at,
                        format!(
                            "{rate} is not above the rate before it ({}): list rates \
                             ascending, each once",
                            r.rates[i - 1]
                        ),
                    );
                }
            }
            if r.points < 2 {
                self.error(
                    "spec.experiments.rateSweep.points",
                    format!(
                        "{} points cannot bracket a capacity: use at least 2",
                        r.points
                    ),
                );
            }
            if !positive(r.low_fraction) {
                self.error(
                    "spec.experiments.rateSweep.lowFraction",
                    format!("{} must be a positive fraction of the knee", r.low_fraction),
                );
            }
            if !(r.high_fraction.is_finite() && r.high_fraction > r.low_fraction) {
                self.error(
                    "spec.experiments.rateSweep.highFraction",
                    format!(
                        "{} must be finite and above lowFraction ({})",
                        r.high_fraction, r.low_fraction
                    ),
                );
            }
            if !(r.resolution.is_finite() && (0.0..1.0).contains(&r.resolution)) {
                self.error(
                    "spec.experiments.rateSweep.resolution",
                    format!(
                        "{} must be a fraction of the passing rate from 0 (no refinement) \
                         to below 1",
                        r.resolution
                    ),
                );
            }
        }

        if e.cache_modes.is_empty() {
            self.error(
                "spec.experiments.cacheModes",
                "empty: list cold, warm or both (each is swept and reported separately)",
            );
        }
        for (i, mode) in e.cache_modes.iter().enumerate() {
            if e.cache_modes[..i].contains(mode) {
                self.error(
                    format!("spec.experiments.cacheModes[{i}]"),
                    format!("`{}` is listed twice", mode_name(*mode)),
                );
            }
        }
        let cold = e.cache_modes.contains(&CacheMode::Cold);
        match e.cold_prompts {
            ColdPrompts::Repeated if cold => self.error(
                "spec.experiments.coldPrompts",
                "`repeated` sends one prompt again and again, which the prefix cache serves: \
                 that run is warm, not cold; use `unique`",
            ),
            ColdPrompts::Repeated => self.warning(
                "spec.experiments.coldPrompts",
                "has no effect: `cold` is not among the cache modes (and `repeated` would \
                 not give a cold run anyway); use `unique`",
            ),
            ColdPrompts::Unique => {}
        }
        let pool = &e.warm_pool;
        if pool.prefixes == 0 {
            self.error(
                "spec.experiments.warmPool.prefixes",
                "must be at least 1 shared prefix",
            );
        }
        if wants_warm(spec) && pool.prefix_tokens == 0 {
            self.error(
                "spec.experiments.warmPool.prefixTokens",
                "0 tokens share nothing: the warm run would be cold",
            );
        }
        if !(pool.zipf.is_finite() && pool.zipf >= 0.0) {
            self.error(
                "spec.experiments.warmPool.zipf",
                format!("{} must be zero (uniform) or more", pool.zipf),
            );
        }
        if e.max_blocks == 0 {
            self.error(
                "spec.experiments.maxBlocks",
                "must be at least 1 schedule block per point",
            );
        }
        if !positive(e.max_lag_ms) {
            self.error(
                "spec.experiments.maxLagMs",
                format!("{} must be a positive number of milliseconds", e.max_lag_ms),
            );
        }
        self.positive(
            "spec.experiments.scrapeIntervalSeconds",
            e.scrape_interval_seconds,
        );
    }

    fn peak(&mut self, spec: &CapacityBenchmarkSpec) {
        let Some(peak) = &spec.peak else { return };
        if !positive(peak.rps) {
            self.error(
                "spec.peak.rps",
                format!("{} must be a positive rate (requests per second)", peak.rps),
            );
        }
        if let Some(u) = peak.target_utilization
            && !(u > 0.0 && u <= 1.0)
        {
            self.error(
                "spec.peak.targetUtilization",
                format!("{u} is outside (0, 1]"),
            );
        }
        if let Some(mode) = peak.cache_mode
            && !spec.experiments.cache_modes.contains(&mode)
        {
            self.error(
                "spec.peak.cacheMode",
                format!(
                    "`{}` is not among spec.experiments.cacheModes: the plan needs a capacity \
                     measured in that cache state",
                    mode_name(mode)
                ),
            );
        }
    }

    fn failure_test(&mut self, spec: &CapacityBenchmarkSpec) {
        let Some(ft) = &spec.failure_test else { return };
        let at = "spec.failureTest";
        if let Some(rate) = ft.rate
            && !positive(rate)
        {
            self.error(
                format!("{at}.rate"),
                format!("{rate} must be a positive rate (requests per second)"),
            );
        }
        if !(ft.rate_fraction > 0.0 && ft.rate_fraction <= 1.0) {
            self.error(
                format!("{at}.rateFraction"),
                format!("{} is outside (0, 1]", ft.rate_fraction),
            );
        }
        for (name, v) in [
            ("steadySeconds", ft.steady_seconds),
            ("observeSeconds", ft.observe_seconds),
        ] {
            if !positive(v) {
                self.error(format!("{at}.{name}"), format!("{v} must be positive"));
            }
        }
        if ft.faults.is_empty() {
            self.error(format!("{at}.faults"), "name at least one fault");
        }
        let replicas = spec
            .target
            .is_simulated()
            .then(|| spec.target.simulated.as_ref().map_or(1, |s| s.replicas));
        match (&spec.target.url, &ft.engine_process) {
            (Some(_), None) => self.warning(
                at,
                "faults go in through the simulated engine's admin API: against a URL the \
                 server must be `goodput serve-sim`, or name a real engine's process \
                 (failureTest.engineProcess.pidFile: KillReplica is then a SIGKILL to it)",
            ),
            (Some(_), Some(_)) => {
                for (i, f) in ft.faults.iter().enumerate() {
                    if f.kind != super::FaultKind::KillReplica {
                        self.error(
                            format!("{at}.faults[{i}].kind"),
                            format!(
                                "{} needs the simulated engine's admin API; a real engine's \
                                 process takes KillReplica only",
                                f.kind
                            ),
                        );
                    }
                }
            }
            (None, Some(_)) => self.warning(
                format!("{at}.engineProcess"),
                "only a url target's faults go to a process; it is ignored here",
            ),
            (None, None) => {}
        }
        for (i, f) in ft.faults.iter().enumerate() {
            let path = format!("{at}.faults[{i}]");
            if let Some(n) = replicas
                && f.replica >= n
            {
                self.error(
                    format!("{path}.replica"),
                    format!("replica {} does not exist: the target has {n}", f.replica),
                );
            }
            if f.kind == super::FaultKind::ColdStart && replicas == Some(1) {
                self.error(
                    format!("{path}.kind"),
                    "a cold start keeps one replica out until the injection: it needs at \
                     least two",
                );
            }
            if !(0.0..=1.0).contains(&f.kv_fraction()) {
                self.error(
                    format!("{path}.kvFraction"),
                    format!("{} is outside [0, 1]", f.kv_fraction()),
                );
            }
            if let Some(d) = f.duration_seconds
                && !positive(d)
            {
                self.error(
                    format!("{path}.durationSeconds"),
                    format!("{d} must be positive"),
                );
            }
            if f.kind == super::FaultKind::RequestCancel {
                let (fraction, _) = f.cancel();
                if !(fraction > 0.0 && fraction <= 1.0) {
                    self.error(
                        format!("{path}.cancelFraction"),
                        format!("{fraction} is outside (0, 1]"),
                    );
                }
            }
            if f.load_seconds.is_some_and(|s| !(s >= 0.0 && s.is_finite())) {
                self.error(format!("{path}.loadSeconds"), "must be at least 0");
            }
        }
    }

    fn loadgen(&mut self, spec: &CapacityBenchmarkSpec) {
        let l = &spec.loadgen;
        if l.results_claim.is_some() && l.results_bucket.is_some() {
            self.error(
                "spec.loadgen",
                "give at most one of resultsClaim and resultsBucket",
            );
        }
        let Some(bucket) = &l.results_bucket else {
            return;
        };
        if bucket.bucket_and_prefix().is_none() {
            self.error(
                "spec.loadgen.resultsBucket.url",
                format!(
                    "`{}` is not s3://<bucket> or s3://<bucket>/<prefix>",
                    bucket.url
                ),
            );
        }
        if let Some(endpoint) = &bucket.endpoint {
            if !is_http_url(endpoint) {
                self.error(
                    "spec.loadgen.resultsBucket.endpoint",
                    format!("`{endpoint}` is not an http:// or https:// URL"),
                );
            } else if endpoint.starts_with("http://") && !bucket.allow_http {
                self.error(
                    "spec.loadgen.resultsBucket.endpoint",
                    format!(
                        "`{endpoint}` is plain HTTP: set allowHttp: true to send results and \
                         signed requests without TLS, or use https://"
                    ),
                );
            }
        }
        if bucket
            .credentials_secret
            .as_ref()
            .is_some_and(|name| name.trim().is_empty())
        {
            self.error(
                "spec.loadgen.resultsBucket.credentialsSecret",
                "must not be empty (or leave it out to use the pods' own credentials)",
            );
        }
    }

    fn reporting(&mut self, spec: &CapacityBenchmarkSpec) {
        let stats = &spec.reporting.statistics;
        if !stats.iter().any(|s| *s != Statistic::Mean) {
            self.error(
                "spec.reporting.statistics",
                if stats.is_empty() {
                    "empty: list percentiles (p50, p95, p99)"
                } else {
                    "the mean alone hides the tail the SLO is about: add percentiles (p50, \
                     p95, p99)"
                },
            );
        }
    }

    /// The checks that need the manifest the benchmark runs.
    fn with_manifest(&mut self, spec: &CapacityBenchmarkSpec, manifest: &WorkloadManifest) {
        let at = manifest_path(&spec.workload);
        let acceptance = spec.acceptance.as_ref().unwrap_or(&manifest.acceptance);
        let min = acceptance.min_successful_samples_per_class;
        let min_path = if spec.acceptance.is_some() {
            "spec.acceptance.min_successful_samples_per_class".to_string()
        } else {
            format!("{at}.acceptance.min_successful_samples_per_class")
        };
        let blocks = u64::from(spec.experiments.max_blocks.max(1));
        for class in &manifest.workload {
            let Some(&count) = manifest.client.class_schedule_counts.get(&class.name) else {
                continue; // the manifest validator reports the missing count
            };
            let most = count.saturating_mul(blocks);
            if most < min {
                self.error(
                    format!("{at}.client.class_schedule_counts.{}", class.name),
                    format!(
                        "{count} requests per schedule block × {blocks} blocks \
                         (spec.experiments.maxBlocks) schedule at most {most} of class `{}`, \
                         fewer than the {min} successes the sample rule needs ({min_path}): \
                         no point can be adequate, {most} requests give no tail evidence; \
                         schedule more requests",
                        class.name
                    ),
                );
            }
        }

        if manifest.client.warmup_seconds == 0.0 {
            self.warning(format!("{at}.client.warmup_seconds"), NO_WARMUP);
        }
        if manifest.client.arrival_pattern == ArrivalPattern::Trace {
            self.error(
                format!("{at}.client.arrival_pattern"),
                "`trace` arrivals replay recorded timestamps and cannot be offered at the \
                 rate sweep's rates: use poisson, gamma or constant",
            );
        }

        if wants_warm(spec) {
            if manifest.engine.prefix_cache == Toggle::Disabled {
                self.warning(
                    "spec.experiments.cacheModes",
                    format!(
                        "`warm` asked, but the manifest's engine.prefix_cache is disabled \
                         ({at}.engine.prefix_cache): a warm run then measures nothing a cold \
                         run does not"
                    ),
                );
            }
            let t = &spec.target;
            if t.is_simulated()
                && let Some(setup) = simulated_setup(&t.simulated.clone().unwrap_or_default(), None)
                && !setup.prefix_caching
            {
                self.warning(
                    "spec.target.simulated.overrides",
                    "`warm` asked, but the simulated engine's prefix_caching is off: add \
                     `prefix_caching: true` to the overrides",
                );
            }
            let tokens = spec.experiments.warm_pool.prefix_tokens;
            let short: Vec<String> = manifest
                .workload
                .iter()
                .filter(|c| c.input_tokens <= tokens)
                .map(|c| format!("`{}` ({})", c.name, c.input_tokens))
                .collect();
            if tokens > 0 && !short.is_empty() {
                self.warning(
                    "spec.experiments.warmPool.prefixTokens",
                    format!(
                        "{tokens} tokens reach the input length of class {}: the prefix is \
                         capped one token below the prompt, so those warm prompts repeat all \
                         but their last token; use fewer tokens than every class's \
                         input_tokens, and at least one of the engine's cache blocks (a \
                         prefix cache serves whole blocks: vLLM's are 16 tokens on GPUs and \
                         128 on its CPU build), or the class never hits",
                        short.join(", ")
                    ),
                );
            }
        }

        if !spec.target.is_simulated() && spec.target.model.is_none() {
            self.warning(
                "spec.target.model",
                format!(
                    "absent: the manifest's model.id `{}` is sent as the model name; set the \
                     name the server serves if it differs",
                    manifest.model.id
                ),
            );
        }
    }
}

/// The simulated engine's setup: the preset with the overrides applied. With `out`, a preset
/// or overrides that do not work are reported there.
fn simulated_setup(sim: &SimulatedTarget, out: Option<&mut Lint>) -> Option<Setup> {
    let report = |path: &str, message: String| {
        if let Some(out) = out {
            out.error(path, message);
        }
        None
    };
    if sim.preset.trim().is_empty() {
        return report(
            "spec.target.simulated.preset",
            format!(
                "must name a preset (one of {})",
                crate::sim::preset_names().join(", ")
            ),
        );
    }
    match sim.setup() {
        Ok(setup) => Some(setup),
        Err(e) => report(e.field, e.error.to_string()),
    }
}

/// Whether the warm cache mode is asked for.
fn wants_warm(spec: &CapacityBenchmarkSpec) -> bool {
    spec.experiments.cache_modes.contains(&CacheMode::Warm)
}

fn mode_name(mode: CacheMode) -> &'static str {
    match mode {
        CacheMode::Cold => "cold",
        CacheMode::Warm => "warm",
    }
}

#[cfg(test)]
mod tests;
