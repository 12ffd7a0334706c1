//! The served model's vocabulary, measured before a point's load so that token-id prompts
//! use only ids the engine knows. A model with an 8,192-id vocabulary refuses every prompt
//! drawn from the default range (vLLM: "Token id 29956 is out of vocabulary", HTTP 400):
//! the point would fail all its requests and say nothing about capacity.
//!
//! The size comes from the server when it says (llama.cpp's `/v1/models` lists
//! `meta.n_vocab`, read once per point with [`served_model`]); otherwise one completion of the highest default id tells whether the
//! default range fits, and when it does not, a bisection over one-token prompts finds the
//! highest id the server accepts (at most 15 probes of one prompt token and one output
//! token each, before any load and before the engine's counters are read).

use serde::{Deserialize, Serialize};

use super::prompt::TokenRange;

/// What the point learnt about the served vocabulary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vocabulary {
    /// Its size in ids, when the server said or a probe found it (`None`: the default
    /// range was accepted, so the size is at least its end).
    pub size: Option<u32>,
    /// How it was found.
    pub source: String,
    /// The token ids prompts are drawn from.
    pub token_ids: TokenRange,
    /// Requests the probe sent to the server, `/v1/models` included (a router in front
    /// counts them among its requests).
    #[serde(default)]
    pub probes: u32,
}

/// Probes the vocabulary of `model` behind `target` (an OpenAI-compatible base URL).
/// `None` when the server answers no probe at all (the default range is then kept, and a
/// request that fails says why in its record).
pub async fn probe(
    client: &reqwest::Client,
    target: &str,
    model: &str,
    listed: Option<&ServedModel>,
) -> Option<Vocabulary> {
    if let Some(size) = listed.and_then(|m| m.n_vocab) {
        return Some(Vocabulary {
            size: Some(size),
            source: format!("{target}/v1/models (meta.n_vocab)"),
            token_ids: if TokenRange::DEFAULT.fits(size) {
                TokenRange::DEFAULT
            } else {
                TokenRange::within(size)
            },
            probes: 1,
        });
    }
    let mut probes = 1;
    let mut accepts = async |id: u32| {
        probes += 1;
        accepts(client, target, model, id).await
    };
    let top = TokenRange::DEFAULT.hi - 1;
    if accepts(top).await? {
        return Some(Vocabulary {
            size: None,
            source: format!("{target}/v1/completions accepted id {top}"),
            token_ids: TokenRange::DEFAULT,
            probes: 2,
        });
    }
    // Bisection: `lo` is accepted, `hi` refused.
    let (mut lo, mut hi) = (1u32, top);
    if !accepts(lo).await? {
        return None;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if accepts(mid).await? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let size = lo + 1;
    Some(Vocabulary {
        size: Some(size),
        source: format!(
            "{target}/v1/completions accepted ids up to {lo} and refused {hi} (bisection)"
        ),
        token_ids: TokenRange::within(size),
        probes,
    })
}

/// The model as the server lists it (`GET /v1/models`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServedModel {
    /// `owned_by`: `vllm`, `sglang`, `llamacpp`, ...
    pub owned_by: Option<String>,
    /// `meta.n_vocab` (llama.cpp).
    pub n_vocab: Option<u32>,
}

impl ServedModel {
    /// llama.cpp's server closes its connection after every streamed response although it
    /// answers with keep-alive: a client that reuses the connection at once fails (a third
    /// of a closed loop's requests did). Its requests carry `Connection: close`.
    pub fn closes_after_streams(&self) -> bool {
        self.owned_by.as_deref() == Some("llamacpp")
    }
}

/// `model` (or the only model) as `GET {target}/v1/models` lists it; `None` when the
/// server lists none usable.
pub async fn served_model(
    client: &reqwest::Client,
    target: &str,
    model: &str,
) -> Option<ServedModel> {
    let response = client
        .get(format!("{target}/v1/models"))
        .timeout(goodput_engine_metrics::identify::PROBE_TIMEOUT)
        .send()
        .await
        .ok()?;
    let v: serde_json::Value = response.error_for_status().ok()?.json().await.ok()?;
    let models = v["data"].as_array()?;
    let entry = models
        .iter()
        .find(|m| m["id"].as_str() == Some(model))
        .or_else(|| (models.len() == 1).then(|| &models[0]))?;
    Some(ServedModel {
        owned_by: entry["owned_by"].as_str().map(str::to_owned),
        n_vocab: entry["meta"]["n_vocab"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok()),
    })
}

/// Whether the server completes a one-token prompt of `id`: `Some(true)` on success,
/// `Some(false)` when it refuses the request (4xx), `None` when it does not answer usably
/// (no server, 5xx, a timeout): then nothing can be concluded.
async fn accepts(client: &reqwest::Client, target: &str, model: &str, id: u32) -> Option<bool> {
    let body = serde_json::json!({"model": model, "prompt": [id], "max_tokens": 1});
    let response = client
        .post(format!("{target}/v1/completions"))
        .json(&body)
        .timeout(goodput_engine_metrics::identify::PROBE_TIMEOUT)
        .send()
        .await
        .ok()?;
    let status = response.status();
    if status.is_success() {
        // Drain the body so the connection can be reused.
        let _ = response.bytes().await;
        Some(true)
    } else if status.is_client_error() {
        Some(false)
    } else {
        None
    }
}
