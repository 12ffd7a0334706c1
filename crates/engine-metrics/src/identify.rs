//! Asking a target, before it is measured, what it runs and whether its `/metrics` pages
//! answer: the engine (from the metric names on its pages, else from `/v1/models`'
//! `owned_by`), its version (`GET /version`, which vLLM and SGLang serve) and the models it
//! lists. `goodput bench` records the answer in the frozen manifest; the operator in the
//! benchmark's status, and it refuses to start a point whose engine pages do not answer
//! (the point would have no queue, KV or preemption evidence).

use std::time::Duration;

use super::profile::detect;
use super::scrape::{ScrapeError, metrics_url, scrape_once};

/// How long one probe request may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a target said about itself. Every field is what it answered; nothing is guessed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Identity {
    /// The engine: `vllm`, `sglang`, ... from its metric names, else `/v1/models`'
    /// `owned_by`.
    pub engine: Option<String>,
    /// `GET /version`'s `version`.
    pub version: Option<String>,
    /// The model ids `GET /v1/models` lists.
    pub served_models: Vec<String>,
}

/// Asks `base_url` (the OpenAI-compatible API) and the first of `metrics_pages` that
/// answers. Unanswered questions stay `None`/empty.
pub async fn identify(
    client: &reqwest::Client,
    base_url: &str,
    metrics_pages: &[String],
) -> Identity {
    let base = base_url.trim_end_matches('/');
    let version = get_json(client, &format!("{base}/version"))
        .await
        .and_then(|v| v["version"].as_str().map(str::to_owned));
    let models = get_json(client, &format!("{base}/v1/models")).await;
    let listed: Vec<&serde_json::Value> = models
        .as_ref()
        .and_then(|m| m["data"].as_array())
        .map(|d| d.iter().collect())
        .unwrap_or_default();
    let served_models = listed
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_owned))
        .collect();
    let mut engine = None;
    for page in metrics_pages {
        if let Ok(exposition) = scrape_once(client, &metrics_url(page), PROBE_TIMEOUT).await {
            engine = detect(&exposition.samples).map(|d| d.engine.as_str().to_owned());
            break;
        }
    }
    let engine = engine.or_else(|| {
        listed
            .iter()
            .find_map(|m| m["owned_by"].as_str())
            .filter(|o| !o.is_empty())
            .map(str::to_owned)
    });
    Identity {
        engine,
        version,
        served_models,
    }
}

/// One GET of every engine page; the first that does not answer, with why.
pub async fn check_metrics(
    client: &reqwest::Client,
    metrics_pages: &[String],
) -> Result<(), ScrapeError> {
    for page in metrics_pages {
        scrape_once(client, &metrics_url(page), PROBE_TIMEOUT).await?;
    }
    Ok(())
}

async fn get_json(client: &reqwest::Client, url: &str) -> Option<serde_json::Value> {
    let response = client.get(url).timeout(PROBE_TIMEOUT).send().await.ok()?;
    response.error_for_status().ok()?.json().await.ok()
}
