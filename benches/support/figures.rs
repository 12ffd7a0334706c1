//! What the benchmarks of `goodput operator` (`operator.rs`, `serving_plan.rs`) print and
//! how they read it (included with `#[path]`): a table of figures, each with its bar when
//! it has one, the verdict on the bars, latencies as nearest-rank percentiles, and what the
//! operator's `/metrics` says of its reconciles.

#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

pub const MIB: f64 = 1024.0 * 1024.0;

/// One printed figure, with its bar when it has one.
struct Figure {
    name: String,
    value: String,
    bar: String,
    met: Option<bool>,
}

/// The figures of a run, in the order they are printed.
#[derive(Default)]
pub struct Figures(Vec<Figure>);

impl Figures {
    /// Adds a figure that has no bar.
    pub fn add(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.push(name.into(), value.into(), String::new(), None);
    }

    /// Adds a figure with its `bar` and whether it `met` it.
    pub fn bar(
        &mut self,
        name: impl Into<String>,
        value: impl Into<String>,
        bar: impl Into<String>,
        met: bool,
    ) {
        self.push(name.into(), value.into(), bar.into(), Some(met));
    }

    /// Adds `<what> P50`, `P95`, `P99` and `max` of a sorted list of seconds, the P99 with
    /// its bar: under `bar`, none of the `missed` (those never seen) allowed.
    pub fn latencies(&mut self, what: &str, sorted: &[f64], bar: Duration, missed: usize) {
        let p99 = goodput::analysis::nearest_rank(sorted, 0.99);
        let met = missed == 0 && p99.is_some_and(|v| v < bar.as_secs_f64());
        self.add(format!("{what} P50"), pct(sorted, 0.50));
        self.add(format!("{what} P95"), pct(sorted, 0.95));
        self.bar(
            format!("{what} P99"),
            pct(sorted, 0.99),
            format!("< {} s (none missed)", bar.as_secs_f64()),
            met,
        );
        self.add(format!("{what} max"), pct(sorted, 1.0));
    }

    fn push(&mut self, name: String, value: String, bar: String, met: Option<bool>) {
        self.0.push(Figure {
            name,
            value,
            bar,
            met,
        });
    }

    /// Prints the table, a line a figure: name, value, bar (at least 20 wide) and verdict
    /// (`met`, `NOT met`, nothing without a bar).
    pub fn print(&self) {
        let w1 = self.0.iter().map(|f| f.name.len()).max().unwrap_or(0);
        let w2 = self.0.iter().map(|f| f.value.len()).max().unwrap_or(0);
        for f in &self.0 {
            let verdict = match f.met {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "",
            };
            println!("  {:w1$}  {:w2$}  {:20}  {verdict}", f.name, f.value, f.bar);
        }
    }

    /// Prints the verdict on the bars (`all bars: met`, or those not met) and exits 1 when
    /// one was not met.
    pub fn conclude(&self) {
        let failed: Vec<&str> = self
            .0
            .iter()
            .filter(|f| f.met == Some(false))
            .map(|f| f.name.as_str())
            .collect();
        if failed.is_empty() {
            println!("  all bars: met");
        } else {
            println!("  bars NOT met: {}", failed.join(", "));
            std::process::exit(1);
        }
    }
}

/// A duration in milliseconds, to a tenth.
pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Resident memory now and at its peak (`VmRSS`, `VmHWM`, in bytes) as `R / H MiB`.
pub fn rss_hwm((rss, hwm): (f64, f64)) -> String {
    format!("{:.1} / {:.1} MiB", rss / MIB, hwm / MIB)
}

/// Durations in seconds, sorted (for [`pct`]).
pub fn sorted_secs(v: impl Iterator<Item = Duration>) -> Vec<f64> {
    let mut v: Vec<f64> = v.map(|d| d.as_secs_f64()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The nearest-rank percentile `p` (0 to 1) of sorted seconds, in ms; `-` of none.
pub fn pct(sorted: &[f64], p: f64) -> String {
    goodput::analysis::nearest_rank(sorted, p)
        .map_or("-".into(), |v| ms(Duration::from_secs_f64(v)))
}

/// Failed reconciles by category, from the operator's `/metrics` text
/// (`goodput_operator_reconcile_failures_total{category="…"} n`): `category n, …`, or
/// `none`.
pub fn reconcile_failures(metrics: &str) -> String {
    let failures: Vec<String> = metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("goodput_operator_reconcile_failures_total{category=\"")?;
            let (category, count) = rest.split_once("\"} ")?;
            Some(format!("{category} {}", count.trim()))
        })
        .collect();
    if failures.is_empty() {
        "none".into()
    } else {
        failures.join(", ")
    }
}

/// Waits until the operator's reconcile count (what `reconciles` reads from its
/// `/metrics`; `None`: unread, no change) has not moved for `quiet`, or `deadline`.
pub async fn settle<F: Future<Output = Option<u64>>>(
    mut reconciles: impl FnMut() -> F,
    quiet: Duration,
    deadline: Instant,
) {
    let mut last = reconciles().await;
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < quiet && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let n = reconciles().await;
        if n.is_some() && n != last {
            last = n;
            quiet_since = Instant::now();
        }
    }
}
