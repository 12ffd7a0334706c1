//! Scraping engines' `/metrics` over HTTP while a test point runs, and finding the targets:
//! from the simulated engine's router (`GET /replicas`) or from a text file.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::future::join_all;
use serde::Deserialize;
use tokio::time::{Instant, MissedTickBehavior};

use super::parse::{Exposition, parse};
use super::profile::{self, DetectedProfile, detect};
use super::series::{MetricsSeries, ScrapeSample};

/// Largest `/metrics` page read (a vLLM page is tens of KiB).
const MAX_PAGE_BYTES: usize = 16 << 20;

/// Shortest scrape interval [`scrape_loop`] uses.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Time allowed for `GET /replicas`.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// An error and its sources, `: `-separated (reqwest's own message omits the cause, e.g.
/// "connection refused").
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}

/// Why one scrape failed.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// Connecting, sending or reading failed.
    #[error("{url}: {}", chain(.source))]
    Request {
        /// The metrics URL.
        url: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The target answered with a status other than 200.
    #[error("{url}: HTTP {status}")]
    Status {
        /// The metrics URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// No complete answer within the timeout.
    #[error("{url}: no answer within {timeout:?}")]
    Timeout {
        /// The metrics URL.
        url: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The page is not UTF-8 text.
    #[error("{url}: the page is not UTF-8")]
    NotText {
        /// The metrics URL.
        url: String,
    },
    /// The page is larger than the limit.
    #[error("{url}: the page is larger than {limit} bytes")]
    TooLarge {
        /// The metrics URL.
        url: String,
        /// The limit.
        limit: usize,
    },
}

/// Why the router's replica list could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// Connecting, sending or reading failed.
    #[error("{url}: {}", chain(.source))]
    Request {
        /// The `/replicas` URL.
        url: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The router answered with a status other than 200.
    #[error("{url}: HTTP {status}")]
    Status {
        /// The `/replicas` URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// The body is not `{"replicas":[{"url": ...}, ...]}`.
    #[error("{url}: not a replica list: {source}")]
    Json {
        /// The `/replicas` URL.
        url: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The list is empty.
    #[error("{url}: the router lists no replicas")]
    NoReplicas {
        /// The `/replicas` URL.
        url: String,
    },
}

/// Why a target file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TargetsError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A line is not an `http://` or `https://` URL.
    #[error("line {line}: `{text}` is not an http:// or https:// URL")]
    BadUrl {
        /// 1-based line number.
        line: usize,
        /// The line's text (comment removed).
        text: String,
    },
}

/// The metrics URL of a target: `base` itself when its path already ends in `/metrics`
/// (TensorRT-LLM's `/prometheus/metrics`, DCGM's `:9400/metrics`), else `base/metrics`.
pub fn metrics_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/metrics") {
        base.to_string()
    } else {
        format!("{base}/metrics")
    }
}

/// Fetches and parses one page, giving up after `timeout` (connect, send and body).
pub async fn scrape_once(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> Result<Exposition, ScrapeError> {
    let failed = |source: reqwest::Error| {
        if source.is_timeout() {
            ScrapeError::Timeout {
                url: url.to_string(),
                timeout,
            }
        } else {
            ScrapeError::Request {
                url: url.to_string(),
                source,
            }
        }
    };
    let fetch = async {
        let mut resp = client
            .get(url)
            .timeout(timeout)
            .send()
            .await
            .map_err(failed)?;
        if resp.status() != reqwest::StatusCode::OK {
            return Err(ScrapeError::Status {
                url: url.to_string(),
                status: resp.status().as_u16(),
            });
        }
        let too_large = || ScrapeError::TooLarge {
            url: url.to_string(),
            limit: MAX_PAGE_BYTES,
        };
        if resp
            .content_length()
            .is_some_and(|n| n > MAX_PAGE_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_PAGE_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        String::from_utf8(body).map_err(|_| ScrapeError::NotText {
            url: url.to_string(),
        })
    };
    // reqwest's own timeout covers the body too; this one also bounds anything else.
    let text = match tokio::time::timeout(timeout, fetch).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(ScrapeError::Timeout {
                url: url.to_string(),
                timeout,
            });
        }
    };
    Ok(parse(&text))
}

/// Scrapes every target's `/metrics` (see [`metrics_url`]) at `start`, `start + interval`,
/// `start + 2 × interval`, ... until `stop` completes, and returns the series.
///
/// - The targets of a round are scraped concurrently, each with a timeout of 80% of the
///   interval, so a round never runs into the next.
/// - Deadlines are absolute (no drift); a round that is missed entirely (the process was
///   stalled) is skipped, not made up.
/// - A failing target gives an `ok: false` sample with the error; the loop goes on.
/// - Each target's engine is detected from its first page with known names; its samples
///   carry that profile's concept values. `series.profile` is the first detection.
/// - `stop` is checked between rounds; a round in progress finishes (it is bounded by the
///   timeout). An interval under 1 ms is taken as 1 ms.
pub async fn scrape_loop(
    client: reqwest::Client,
    targets: Vec<String>,
    interval: Duration,
    start: Instant,
    stop: impl Future<Output = ()>,
) -> MetricsSeries {
    scrape_loop_from(client, targets, interval, start, stop, Vec::new()).await
}

/// Every target's page once, now (each with `timeout`), in target order: a point's
/// baseline, taken before its load so that the counters' increase over the point holds
/// every request of it (an engine that answers its metrics page between requests, as
/// llama.cpp does, would otherwise count the first requests before the first round).
pub async fn scrape_round(
    client: &reqwest::Client,
    targets: &[String],
    timeout: Duration,
) -> Vec<Result<Exposition, ScrapeError>> {
    let urls: Vec<String> = targets.iter().map(|t| metrics_url(t)).collect();
    join_all(urls.iter().map(|u| scrape_once(client, u, timeout))).await
}

/// [`scrape_loop`] whose series starts with `baseline` ([`scrape_round`]'s pages, taken
/// before `start`) as round 0 at time 0.
pub async fn scrape_loop_from(
    client: reqwest::Client,
    targets: Vec<String>,
    interval: Duration,
    start: Instant,
    stop: impl Future<Output = ()>,
    baseline: Vec<Result<Exposition, ScrapeError>>,
) -> MetricsSeries {
    let interval = interval.max(MIN_INTERVAL);
    let timeout = interval.mul_f64(0.8);
    let urls: Vec<String> = targets.iter().map(|t| metrics_url(t)).collect();
    let mut series = MetricsSeries::new(targets, interval.as_secs_f64());
    let mut detected: Vec<Option<DetectedProfile>> = vec![None; urls.len()];
    let mut record = |series: &mut MetricsSeries, pages, round, t_s| {
        let pages: Vec<Result<Exposition, ScrapeError>> = pages;
        for (target, page) in pages.into_iter().enumerate() {
            let sample = match page {
                Ok(page) => {
                    if detected[target].is_none() {
                        detected[target] = detect(&page.samples);
                        if let Some(d) = &detected[target] {
                            series.target_engines[target] = Some(d.engine);
                            if series.profile.is_none() {
                                series.profile = Some(d.clone());
                            }
                        }
                    }
                    ScrapeSample {
                        round,
                        t_s,
                        target,
                        ok: true,
                        error: None,
                        values: detected[target]
                            .as_ref()
                            .map(|d| profile::values(&page.samples, d.profile()))
                            .unwrap_or_default(),
                        skipped_lines: page.skipped_lines,
                    }
                }
                Err(e) => ScrapeSample {
                    round,
                    t_s,
                    target,
                    ok: false,
                    error: Some(e.to_string()),
                    values: Default::default(),
                    skipped_lines: 0,
                },
            };
            series.samples.push(sample);
        }
    };
    if !baseline.is_empty() {
        record(&mut series, baseline, 0, 0.0);
    }
    let mut ticker = tokio::time::interval_at(start, interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    tokio::pin!(stop);
    let mut last_round = None;
    let mut stopped = false;
    while !stopped {
        let due = tokio::select! {
            biased;
            // One more round once stopped: the counters then hold every response of the
            // run, which the truth checks compare with the client's.
            () = &mut stop => {
                stopped = true;
                Instant::now()
            }
            due = ticker.tick() => due,
        };
        // Rounds are numbered by their deadline, so skipped rounds leave gaps; the final
        // round follows the last.
        let by_deadline: u64 = (due.saturating_duration_since(start).as_nanos()
            / interval.as_nanos())
        .try_into()
        .unwrap_or(u64::MAX);
        let round = match last_round {
            Some(last) if by_deadline <= last => last + 1,
            _ => by_deadline,
        };
        last_round = Some(round);
        let t_s = Instant::now()
            .saturating_duration_since(start)
            .as_secs_f64();
        let pages = join_all(urls.iter().map(|u| scrape_once(&client, u, timeout))).await;
        record(&mut series, pages, round, t_s);
    }
    series
}

#[derive(Deserialize)]
struct ReplicaList {
    replicas: Vec<ReplicaEntry>,
}

#[derive(Deserialize)]
struct ReplicaEntry {
    url: String,
}

/// The replica base URLs listed by the simulated engine's router at `GET {router}/replicas`
/// (all of them, in rotation or not: a dead replica shows as failed scrapes).
pub async fn discover_targets(
    client: &reqwest::Client,
    router_url: &str,
) -> Result<Vec<String>, DiscoverError> {
    let url = format!("{}/replicas", router_url.trim_end_matches('/'));
    let request = |source| DiscoverError::Request {
        url: url.clone(),
        source,
    };
    let resp = client
        .get(&url)
        .timeout(DISCOVER_TIMEOUT)
        .send()
        .await
        .map_err(request)?;
    if resp.status() != reqwest::StatusCode::OK {
        return Err(DiscoverError::Status {
            url: url.clone(),
            status: resp.status().as_u16(),
        });
    }
    let body = resp.bytes().await.map_err(request)?;
    let list: ReplicaList =
        serde_json::from_slice(&body).map_err(|source| DiscoverError::Json {
            url: url.clone(),
            source,
        })?;
    if list.replicas.is_empty() {
        return Err(DiscoverError::NoReplicas { url });
    }
    Ok(list.replicas.into_iter().map(|r| r.url).collect())
}

/// Target URLs from text: one per line; blank lines and `#` comments (whole-line or
/// trailing) are ignored; each URL must start with `http://` or `https://`.
pub fn parse_targets(text: &str) -> Result<Vec<String>, TargetsError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        if !(line.starts_with("http://") || line.starts_with("https://"))
            || line.contains(char::is_whitespace)
        {
            return Err(TargetsError::BadUrl {
                line: i + 1,
                text: line.to_string(),
            });
        }
        out.push(line.to_string());
    }
    Ok(out)
}

/// Target URLs from a file (see [`parse_targets`]).
pub fn read_targets_file(path: &Path) -> Result<Vec<String>, TargetsError> {
    let text = std::fs::read_to_string(path).map_err(|source| TargetsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_targets(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_urls() {
        assert_eq!(
            metrics_url("http://10.0.0.1:8000"),
            "http://10.0.0.1:8000/metrics"
        );
        assert_eq!(
            metrics_url("http://10.0.0.1:8000/"),
            "http://10.0.0.1:8000/metrics"
        );
        assert_eq!(
            metrics_url("http://h:8000/prometheus/metrics"),
            "http://h:8000/prometheus/metrics"
        );
        assert_eq!(
            metrics_url("http://h:9400/metrics/"),
            "http://h:9400/metrics"
        );
    }

    #[test]
    fn target_files() {
        let text = "# replicas of the point\n\
                    http://10.0.0.1:8000\n\
                    \n   https://10.0.0.2:8000/  # second\n";
        assert_eq!(
            parse_targets(text).unwrap_or_default(),
            vec!["http://10.0.0.1:8000", "https://10.0.0.2:8000/"]
        );
        let err = parse_targets("http://a\n10.0.0.3:8000\n");
        assert!(
            matches!(err, Err(TargetsError::BadUrl { line: 2, ref text }) if text == "10.0.0.3:8000"),
            "{err:?}"
        );
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("targets.txt");
        std::fs::write(&path, "http://127.0.0.1:1\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            read_targets_file(&path).unwrap_or_default(),
            vec!["http://127.0.0.1:1"]
        );
        assert!(matches!(
            read_targets_file(&dir.path().join("absent")),
            Err(TargetsError::Read { .. })
        ));
    }
}
