//! Truth checks: what the client measured over a point beside what the engine counted over
//! the same point, from the engine's own counters and histograms. Both sides see every
//! request the run sent, warmup included, from the first scrape (the schedule's time zero)
//! to the last (after the last response).
//!
//! - **Requests**: completed by the client, finished by the engine.
//! - **Prompt tokens**: for token-id prompts the ids sent, exactly; for text prompts what
//!   the server's `usage.prompt_tokens` said (and the schedule's lengths beside it: the
//!   error of the prompt sizing).
//! - **Output tokens**: the client's (usage) beside the engine's generation counter.
//! - **TTFT**: the client's, from the actual send, beside the engine's histogram: the mean
//!   exactly (its `_sum ÷ _count`), the median read from its buckets (linear within the
//!   bucket, as Prometheus' `histogram_quantile` does) with the bucket's bounds. The
//!   difference is the client and the wire; a client TTFT below the engine's would be a
//!   measurement error.
//! - **Prefix cache**: the engine's hit rate (hits ÷ queries) beside the share the
//!   workload implies: the shared prefix of every warm request, in whole cache blocks
//!   (a block is cached only when full), over all prompt tokens; 0 for a cold point.

use serde::{Deserialize, Serialize};

use super::profile::{CACHE_BLOCK_SIZE, Concept};
use super::series::MetricsSeries;
use crate::record::RunTotals;

/// A cold point whose engine hit rate is above this did not start cold (1%).
pub const COLD_HIT_RATE_MAX: f64 = 0.01;
/// A warm point whose hit rate is further than this from the workload's share did not
/// hold the cache state it claims (5 percentage points).
pub const WARM_HIT_RATE_TOLERANCE: f64 = 0.05;
/// A mean client TTFT this much over the engine's is more than a loopback client and wire
/// should add (ms): flagged.
pub const TTFT_GAP_FLAG_MS: f64 = 50.0;

/// One count as each side has it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Counted {
    /// The client's figure.
    pub client: f64,
    /// The engine's increase over the point.
    pub engine: f64,
}

impl Counted {
    /// Whether the two are the same count.
    pub fn equal(&self) -> bool {
        (self.client - self.engine).abs() < 0.5
    }
}

/// Prompt tokens as each side counted them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptTokens {
    /// The client's figure and the engine's.
    #[serde(flatten)]
    pub counted: Counted,
    /// Where the client's figure comes from: `token ids sent` (exact) or
    /// `usage.prompt_tokens`.
    pub client_source: String,
    /// Text prompts: the schedule's lengths summed, what the sizing aimed at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<u64>,
    /// Text prompts: (counted − scheduled) ÷ scheduled, the sizing's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizing_error: Option<f64>,
}

/// Time to first token as each side measured it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ttft {
    /// The client's mean, from the actual send (ms).
    pub client_mean_ms: f64,
    /// The engine's mean, its histogram's sum ÷ count over the point (ms).
    pub engine_mean_ms: f64,
    /// Client − engine (ms): the client and the wire.
    pub mean_gap_ms: f64,
    /// The client's median, from the actual send (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_p50_ms: Option<f64>,
    /// The engine's median, read from its buckets (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_p50_ms: Option<f64>,
    /// The bucket the engine's median lies in (ms): its resolution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_p50_bucket_ms: Option<(f64, f64)>,
}

/// The prefix cache as the engine counted it beside what the workload implies.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrefixCache {
    /// The engine's hits ÷ queries over the point.
    pub engine_hit_rate: f64,
    /// The share of prompt tokens the workload lets a prefix cache serve.
    pub expected_hit_rate: f64,
    /// The engine's cache block (tokens), when its page states it; 1 otherwise.
    pub block_size: Option<f64>,
}

/// Every check of one point.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineTruth {
    /// Requests completed by the client, finished by the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<Counted>,
    /// Prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<PromptTokens>,
    /// Output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<Counted>,
    /// Time to first token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft: Option<Ttft>,
    /// Prefix cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache: Option<PrefixCache>,
    /// What disagrees, in words.
    pub flags: Vec<String>,
}

/// The checks of a point whose run sent `totals` (token-id prompts when `token_ids`; a warm
/// cache when `warm`) while `series` was scraped.
pub fn check(
    totals: &RunTotals,
    series: &MetricsSeries,
    token_ids: bool,
    warm: bool,
) -> EngineTruth {
    let mut t = EngineTruth::default();
    let clean = totals.not_completed == 0;
    t.requests = series
        .key_delta(Concept::RequestSuccess.key())
        .map(|engine| Counted {
            client: totals.completed as f64,
            engine,
        });
    if let Some(c) = t.requests.filter(|c| clean && !c.equal()) {
        t.flags.push(format!(
            "the engine finished {} requests, the client completed {}: they did not see the \
             same requests",
            c.engine, c.client
        ));
    }
    if let Some(engine) = series.key_delta(Concept::PromptTokens.key()) {
        let (client, client_source) = if token_ids {
            (totals.prompt_tokens_scheduled, "token ids sent")
        } else {
            (totals.prompt_tokens_usage, "usage.prompt_tokens")
        };
        let usable = token_ids || totals.prompt_usage_reports == totals.completed;
        let scheduled = (!token_ids).then_some(totals.prompt_tokens_scheduled);
        let p = PromptTokens {
            counted: Counted {
                client: client as f64,
                engine,
            },
            client_source: client_source.into(),
            scheduled,
            sizing_error: scheduled
                .filter(|&s| s > 0 && usable)
                .map(|s| (client as f64 - s as f64) / s as f64),
        };
        if usable && clean && !p.counted.equal() {
            t.flags.push(format!(
                "the engine counted {} prompt tokens, the client {} ({client_source})",
                engine, client
            ));
        }
        t.prompt_tokens = usable.then_some(p);
    }
    t.output_tokens = series
        .key_delta(Concept::GenerationTokens.key())
        .map(|engine| Counted {
            client: totals.completion_tokens as f64,
            engine,
        });
    if let Some(c) = t.output_tokens.filter(|c| clean && !c.equal()) {
        t.flags.push(format!(
            "the engine generated {} tokens, the client received {}",
            c.engine, c.client
        ));
    }
    t.ttft = ttft(totals, series);
    // Requests the client gave up (stopped early, cancelled) had their first token, or
    // waited for it, on the engine's side only: the means then describe different requests.
    if let Some(x) = t.ttft.filter(|_| clean) {
        if x.mean_gap_ms < -1.0 {
            t.flags.push(format!(
                "the client's mean TTFT ({:.1} ms) is below the engine's ({:.1} ms): one of \
                 the two clocks is wrong",
                x.client_mean_ms, x.engine_mean_ms
            ));
        } else if x.mean_gap_ms > TTFT_GAP_FLAG_MS {
            t.flags.push(format!(
                "the client's mean TTFT is {:.1} ms over the engine's: more than a client \
                 and a wire should add",
                x.mean_gap_ms
            ));
        }
    }
    t.prefix_cache = prefix_cache(totals, series);
    if let Some(p) = t.prefix_cache {
        if !warm && p.engine_hit_rate > COLD_HIT_RATE_MAX {
            t.flags.push(format!(
                "cold point with an engine prefix-cache hit rate of {:.1}% (at most {:.0}%): \
                 the cache was not cold",
                p.engine_hit_rate * 100.0,
                COLD_HIT_RATE_MAX * 100.0
            ));
        }
        let short: Vec<String> = totals
            .shared_prefix_tokens
            .iter()
            .filter(|&(&len, _)| warm && p.block_size.is_some_and(|b| f64::from(len) < b))
            .map(|(len, n)| format!("{n} requests sharing {len} tokens"))
            .collect();
        if let (false, Some(b)) = (short.is_empty(), p.block_size) {
            t.flags.push(format!(
                "warm point with shared prefixes shorter than the engine's cache block of {b} \
                 tokens ({}): a prefix cache serves whole blocks, so they never hit; raise \
                 warmPool.prefixTokens or lengthen those classes",
                short.join(", ")
            ));
        }
        if warm && (p.engine_hit_rate - p.expected_hit_rate).abs() > WARM_HIT_RATE_TOLERANCE {
            t.flags.push(format!(
                "warm point with an engine prefix-cache hit rate of {:.1}% where the workload \
                 implies {:.1}% (within {:.0} points): the cache state is not the one claimed",
                p.engine_hit_rate * 100.0,
                p.expected_hit_rate * 100.0,
                WARM_HIT_RATE_TOLERANCE * 100.0
            ));
        }
    }
    t
}

fn ttft(totals: &RunTotals, series: &MetricsSeries) -> Option<Ttft> {
    let sum = series.key_delta("ttft_sum")?;
    let count = series.key_delta("ttft_count").filter(|&c| c > 0.0)?;
    let client_mean_ms = totals.mean_ttft_from_send_ms()?;
    let engine_mean_ms = sum / count * 1e3;
    let median = histogram_median(&series.bucket_deltas(Concept::Ttft));
    Some(Ttft {
        client_mean_ms,
        engine_mean_ms,
        mean_gap_ms: client_mean_ms - engine_mean_ms,
        client_p50_ms: totals.ttft_from_send_p50_ms,
        engine_p50_ms: median.map(|m| m.0 * 1e3),
        engine_p50_bucket_ms: median.map(|m| (m.1 * 1e3, m.2 * 1e3)),
    })
}

/// The median of cumulative buckets `(le, count)` (ascending, `+Inf` last), linear within
/// its bucket: `(median, bucket low, bucket high)`. `None` without observations or when
/// the median falls in the `+Inf` bucket.
pub fn histogram_median(buckets: &[(f64, f64)]) -> Option<(f64, f64, f64)> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = total / 2.0;
    let mut prev = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return None;
            }
            let within = count - prev.1;
            let f = if within > 0.0 {
                (rank - prev.1) / within
            } else {
                0.0
            };
            return Some((prev.0 + (le - prev.0) * f, prev.0, le));
        }
        prev = (le, count);
    }
    None
}

fn prefix_cache(totals: &RunTotals, series: &MetricsSeries) -> Option<PrefixCache> {
    let queries = series
        .key_delta(Concept::PrefixCacheQueries.key())
        .filter(|&q| q > 0.0)?;
    let hits = series.key_delta(Concept::PrefixCacheHits.key())?;
    let block = series
        .samples
        .iter()
        .rev()
        .find_map(|s| s.values.get(CACHE_BLOCK_SIZE).copied());
    let b = block.filter(|&b| b >= 1.0).unwrap_or(1.0);
    let cacheable: f64 = totals
        .shared_prefix_tokens
        .iter()
        .map(|(&len, &n)| (f64::from(len) / b).floor() * b * n as f64)
        .fold(0.0, |a, x| a + x);
    let prompts = totals.prompt_tokens_scheduled as f64;
    Some(PrefixCache {
        engine_hit_rate: hits / queries,
        expected_hit_rate: if prompts > 0.0 {
            cacheable / prompts
        } else {
            0.0
        },
        block_size: block,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_buckets_is_read_within_its_bucket() {
        // 10 observations: 2 under 20 ms, 6 more under 40 ms, 2 more under 60 ms.
        let b = [
            (0.02, 2.0),
            (0.04, 8.0),
            (0.06, 10.0),
            (f64::INFINITY, 10.0),
        ];
        let (m, lo, hi) = histogram_median(&b).expect("a median");
        assert_eq!((lo, hi), (0.02, 0.04));
        // Rank 5 is 3 of the 6 in (20, 40]: halfway.
        assert!((m - 0.03).abs() < 1e-12, "{m}");
        assert_eq!(histogram_median(&[(f64::INFINITY, 0.0)]), None);
        assert_eq!(histogram_median(&[(0.1, 1.0), (f64::INFINITY, 9.0)]), None);
    }
}
