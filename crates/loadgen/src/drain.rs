//! Before a point's baseline scrape the engines finish what earlier load left with them:
//! an engine that keeps serving a request whose client went away (llama.cpp finishes an
//! abandoned closed-loop request; vLLM aborts it) would otherwise count that request's
//! tokens in the next point, and its queue in the next point's trend.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use goodput_engine_metrics::identify::PROBE_TIMEOUT;
use goodput_engine_metrics::parse::{Exposition, Sample};
use goodput_engine_metrics::profile::{Concept, concept_value, detect};
use goodput_engine_metrics::scrape::{ScrapeError, scrape_round};

/// The longest a point waits for its engines to drain: a deployment that serves other
/// traffic never does, and a point then starts anyway, saying what was left.
pub const MAX_WAIT: Duration = Duration::from_secs(10);
/// Between looks at the engines' pages.
const POLL: Duration = Duration::from_millis(250);

/// What a point waited for before its load (`summary.json`'s `drain`): present only when
/// its engines still had requests when it began.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Drain {
    /// Requests running or waiting on the engines at the first look.
    pub found: f64,
    /// Seconds waited.
    pub waited_s: f64,
    /// Requests still running or waiting when the wait ended (0: drained).
    pub left: f64,
}

/// Requests running plus waiting on one engine's page; `None` when the page names neither
/// (no known engine, or one that exports neither gauge).
pub fn in_flight(samples: &[Sample]) -> Option<f64> {
    let profile = detect(samples)?.engine.profile();
    let running = concept_value(samples, profile, Concept::Running);
    let waiting = concept_value(samples, profile, Concept::QueueWaiting);
    match (running, waiting) {
        (None, None) => None,
        (r, w) => Some(r.unwrap_or(0.0) + w.unwrap_or(0.0)),
    }
}

/// Waits, at most `max_wait`, until no page of `targets` shows a request running or
/// waiting, and returns the wait (`None` when nothing was in flight at the first look, or
/// no page says) with the last round of pages: a point's baseline, taken once the engines
/// are idle.
pub async fn drain(
    client: &reqwest::Client,
    targets: &[String],
    max_wait: Duration,
) -> (Option<Drain>, Vec<Result<Exposition, ScrapeError>>) {
    let start = Instant::now();
    let mut found = None;
    loop {
        let pages = scrape_round(client, targets, PROBE_TIMEOUT).await;
        let Some(left) = pages
            .iter()
            .filter_map(|p| p.as_ref().ok())
            .filter_map(|p| in_flight(&p.samples))
            .reduce(|a, b| a + b)
        else {
            return (None, pages);
        };
        let found = *found.get_or_insert(left);
        if found <= 0.0 {
            return (None, pages);
        }
        let waited = start.elapsed();
        if left <= 0.0 || waited >= max_wait {
            let drain = Drain {
                found,
                waited_s: waited.as_secs_f64(),
                left: left.max(0.0),
            };
            return (Some(drain), pages);
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use goodput_engine_metrics::parse::parse;

    #[test]
    fn running_and_waiting_add_up_and_a_page_without_them_says_nothing() {
        let vllm = "vllm:num_requests_running{model_name=\"m\"} 3\n\
                    vllm:num_requests_waiting{model_name=\"m\"} 2\n\
                    vllm:kv_cache_usage_perc{model_name=\"m\"} 0.1\n";
        assert_eq!(in_flight(&parse(vllm).samples), Some(5.0));
        assert_eq!(in_flight(&parse("other_metric 1\n").samples), None);
    }
}
