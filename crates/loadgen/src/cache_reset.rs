//! A cold point's prefix cache emptied through the engine's own call, where it has one:
//! vLLM's `POST /reset_prefix_cache` (served when the engine runs with
//! `VLLM_SERVER_DEV_MODE=1`) and SGLang's `POST /flush_cache`. Without one, a cold point
//! stays cold by its prompts alone (each draws its own token ids or words), and the
//! engine's prefix-cache counters (`engine_truth`) prove it either way. Behind a Service or
//! a router each replica keeps its own cache, so a point that knows its replicas' addresses
//! resets each one there: one reset through the front door would empty one of them.

use std::time::Duration;

use goodput_core::engine_metrics::EngineKind;

use super::vocabulary::ServedModel;

/// How often a refused reset is asked again: vLLM refuses while blocks are held by
/// requests still running.
const ATTEMPTS: u32 = 5;
/// The pause between attempts.
const PAUSE: Duration = Duration::from_millis(500);

/// The engine's reset call for `served` (named by `/v1/models`' `owned_by`): its path, and
/// whether it answers `{"success": bool}`.
fn call(served: &ServedModel) -> Option<(&'static str, bool)> {
    let engine = EngineKind::from_name(served.owned_by.as_deref()?)?;
    let reset = engine.descriptor().cache_reset?;
    Some((reset.path, reset.says_success))
}

/// What a cold point's reset did (`summary.json`'s `cache_reset`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheReset {
    /// The call and its outcome, in words.
    pub said: String,
    /// Requests it sent to the target's address, which a router in front counts beside
    /// the load's; 0 when each replica was reset at its own address.
    pub requests: u32,
}

/// Empties the prefix cache of the engine behind `target` before a cold point, and says
/// what happened: `None` when the engine has no such call known to goodput. With several
/// `replicas` (their base URLs: the engine serves its API and `/metrics` on one port) each
/// is reset at its own address.
pub async fn reset(
    client: &reqwest::Client,
    target: &str,
    replicas: &[String],
    served: Option<&ServedModel>,
) -> Option<CacheReset> {
    let (path, reports_success) = call(served?)?;
    if replicas.len() <= 1 {
        let (said, requests) = ask(client, target, path, reports_success).await;
        return Some(CacheReset { said, requests });
    }
    let mut each = Vec::with_capacity(replicas.len());
    for replica in replicas {
        // A metrics target may name the page itself.
        let base = replica.trim_end_matches('/');
        let base = base.strip_suffix("/metrics").unwrap_or(base);
        each.push(ask(client, base, path, reports_success).await.0);
    }
    Some(CacheReset {
        said: each_replica(path, replicas, &each),
        requests: 0,
    })
}

/// One line for the resets of several replicas: `POST /reset_prefix_cache: emptied on each
/// of 2 replicas`, else what each said.
fn each_replica(path: &str, replicas: &[String], said: &[String]) -> String {
    let emptied = format!("POST {path}: emptied");
    if said.iter().all(|s| *s == emptied) {
        return format!("{emptied} on each of {} replicas", replicas.len());
    }
    replicas
        .iter()
        .zip(said)
        .map(|(r, s)| format!("{r}: {s}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Sends the reset until it is done or refused for good: what happened, and how many
/// requests that took.
async fn ask(
    client: &reqwest::Client,
    target: &str,
    path: &str,
    reports_success: bool,
) -> (String, u32) {
    let url = format!("{}{path}", target.trim_end_matches('/'));
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        let response = client
            .post(&url)
            .timeout(goodput_engine_metrics::identify::PROBE_TIMEOUT)
            .send()
            .await;
        match response {
            Ok(r) if r.status().is_success() => {
                let success = !reports_success
                    || r.json::<serde_json::Value>()
                        .await
                        .ok()
                        .and_then(|v| v["success"].as_bool())
                        .unwrap_or(false);
                if success {
                    return (format!("POST {path}: emptied"), attempt);
                }
                last = "refused (blocks still in use)".to_owned();
            }
            // vLLM serves it only in its development mode (`VLLM_SERVER_DEV_MODE=1`), and
            // goodput's simulated engine not at all.
            Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => {
                return (
                    format!("POST {path}: not served here; cold by unique prompts alone"),
                    attempt,
                );
            }
            Ok(r) => last = format!("HTTP {}", r.status().as_u16()),
            Err(e) => last = super::client::error_chain(&e),
        }
        if attempt < ATTEMPTS {
            tokio::time::sleep(PAUSE).await;
        }
    }
    (
        format!("POST {path}: {last} after {ATTEMPTS} attempts; cold by unique prompts alone"),
        ATTEMPTS,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_has_its_own_call_or_none() {
        let served = |owner: &str| ServedModel {
            owned_by: Some(owner.to_owned()),
            n_vocab: None,
        };
        assert_eq!(call(&served("vllm")), Some(("/reset_prefix_cache", true)));
        assert_eq!(call(&served("sglang")), Some(("/flush_cache", false)));
        assert_eq!(call(&served("llamacpp")), None);
        assert_eq!(call(&ServedModel::default()), None);
    }

    #[test]
    fn several_replicas_are_summed_up_in_one_line_or_each_named() {
        let path = "/reset_prefix_cache";
        let replicas = ["http://a:8000".to_owned(), "http://b:8000".to_owned()];
        let emptied = format!("POST {path}: emptied");
        assert_eq!(
            each_replica(path, &replicas, &[emptied.clone(), emptied.clone()]),
            "POST /reset_prefix_cache: emptied on each of 2 replicas"
        );
        let refused =
            format!("POST {path}: HTTP 500 after 5 attempts; cold by unique prompts alone");
        assert_eq!(
            each_replica(path, &replicas, &[emptied, refused.clone()]),
            format!("http://a:8000: POST {path}: emptied; http://b:8000: {refused}")
        );
    }
}
