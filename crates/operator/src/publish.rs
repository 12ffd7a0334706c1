//! The pod's side of the hand-off: writing a [`ShardResult`] into the ConfigMap the operator
//! created for it (`goodput loadgen --result-config-map NAME`).
//!
//! The pod never creates the ConfigMap: its role may `get`, `patch` and `update` its own
//! ConfigMaps only. [`ResultConfigMap::connect`] checks, before any load is sent, that the
//! ConfigMap exists, is readable and is not annotated for another shard
//! ([`SHARD_ANNOTATION`]); [`ResultConfigMap::publish`] then merge-patches its `data` and
//! `binaryData` (field manager [`FIELD_MANAGER`]), removing a key an earlier attempt left
//! that this result does not have. Transient API errors (connection failures, 408, 429,
//! 5xx) are retried with backoff ([`ATTEMPTS`] tries over about 7.5 s, on top of the kube
//! client's own retries of 429, 503 and 504); a final failure is
//! an error with the ConfigMap's namespace and name, so the command exits non-zero and the
//! Job retries the pod.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Map, Value, json};

use super::handoff::{
    ENGINE_METRICS_KEY, HandoffError, REQUESTS_KEY, SHARD_ANNOTATION, SUMMARY_KEY, ShardResult,
};

/// Field manager of the pod's writes.
pub const FIELD_MANAGER: &str = "goodput-loadgen";
/// Where a pod finds its own namespace.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
/// Tries of one API call before giving up.
pub const ATTEMPTS: u32 = 5;
/// Wait before the second try; doubled before each further one.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// Why a shard result could not be handed over.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// No Kubernetes client could be configured.
    #[error("cannot reach the Kubernetes API (in-cluster configuration or KUBECONFIG): {source}")]
    Client {
        /// kube's error.
        source: kube::Error,
    },
    /// The ConfigMap does not exist.
    #[error(
        "ConfigMap {namespace}/{name} does not exist: the operator creates a point's result \
         ConfigMaps before its Job, and goodput loadgen never creates one (check \
         --result-config-map and --result-namespace)"
    )]
    NotFound {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The pod's identity may not do this to the ConfigMap.
    #[error("not allowed to {verb} ConfigMap {namespace}/{name}: {message}")]
    Forbidden {
        /// `get` or `patch`.
        verb: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API server's message.
        message: String,
    },
    /// The ConfigMap is annotated for another shard.
    #[error(
        "ConfigMap {namespace}/{name} is for shard {annotated} ({SHARD_ANNOTATION}), but this \
         pod runs shard {shard}: check --shard and --result-config-map"
    )]
    WrongShard {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The annotation's `i/N`.
        annotated: String,
        /// This pod's `i/N`.
        shard: String,
    },
    /// An API call failed for good (after retries when the error was transient).
    #[error("cannot {verb} ConfigMap {namespace}/{name} (after {attempts} attempt(s)): {source}")]
    Api {
        /// `get` or `patch`.
        verb: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Tries made.
        attempts: u32,
        /// The last error.
        source: kube::Error,
    },
    /// The result cannot be written as a ConfigMap (too large, say).
    #[error(transparent)]
    Handoff(#[from] HandoffError),
}

/// A result ConfigMap checked to exist, ready to receive this pod's shard result.
pub struct ResultConfigMap {
    api: Api<ConfigMap>,
    namespace: String,
    name: String,
    shard: String,
}

impl ResultConfigMap {
    /// Connects with `kube::Client::try_default()` (in-cluster configuration or
    /// `KUBECONFIG`) and checks that ConfigMap `name` exists in `namespace` (default: the
    /// pod's own, from [`SERVICE_ACCOUNT_NAMESPACE_FILE`], else the kubeconfig's) and is
    /// not annotated for another shard than `shard` (`(i, N)`).
    pub async fn connect(
        name: &str,
        namespace: Option<&str>,
        shard: (u32, u32),
    ) -> Result<Self, PublishError> {
        // kube's TLS uses the process's rustls provider: ring, the one this crate builds.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = kube::Client::try_default()
            .await
            .map_err(|source| PublishError::Client { source })?;
        let namespace = match namespace {
            Some(ns) => ns.to_owned(),
            None => own_namespace().unwrap_or_else(|| client.default_namespace().to_owned()),
        };
        let this = ResultConfigMap {
            api: Api::namespaced(client, &namespace),
            namespace,
            name: name.to_owned(),
            shard: format!("{}/{}", shard.0, shard.1),
        };
        let existing = this.retrying("get", || this.api.get(&this.name)).await?;
        if let Some(annotated) = existing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SHARD_ANNOTATION))
            && annotated.trim() != this.shard
        {
            return Err(PublishError::WrongShard {
                namespace: this.namespace,
                name: this.name,
                annotated: annotated.clone(),
                shard: this.shard,
            });
        }
        Ok(this)
    }

    /// `namespace/name`.
    pub fn display_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Writes `result` into the ConfigMap (a merge patch of `data` and `binaryData`; a
    /// result too large for a ConfigMap is an error before anything is sent).
    pub async fn publish(&self, result: &ShardResult) -> Result<(), PublishError> {
        let (data, binary) = result.to_config_map_data()?;
        let mut binary_data = Map::new();
        for key in [SUMMARY_KEY, REQUESTS_KEY, ENGINE_METRICS_KEY] {
            // Null removes a key an earlier attempt wrote that this result lacks.
            binary_data.insert(key.to_owned(), Value::Null);
        }
        for (key, bytes) in binary {
            let value = serde_json::to_value(bytes).map_err(|source| {
                PublishError::Handoff(HandoffError::Serialize {
                    key: "binaryData",
                    source,
                })
            })?;
            binary_data.insert(key, value);
        }
        let patch = Patch::Merge(json!({"data": data, "binaryData": binary_data}));
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        self.retrying("patch", || self.api.patch(&self.name, &params, &patch))
            .await?;
        Ok(())
    }

    /// Runs `call` until it succeeds, fails for good, or [`ATTEMPTS`] tries are spent.
    async fn retrying<T, F, Fut>(&self, verb: &'static str, mut call: F) -> Result<T, PublishError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            match call().await {
                Ok(v) => return Ok(v),
                Err(e) if attempt < ATTEMPTS && transient(&e) => {
                    // Always said (a pod's log is where a flaky API shows), whatever the
                    // log filter.
                    eprintln!(
                        "loadgen: {verb} ConfigMap {}: {e}; trying again in {backoff:?}",
                        self.display_name()
                    );
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                    attempt += 1;
                }
                Err(e) => return Err(self.failure(verb, attempt, e)),
            }
        }
    }

    fn failure(&self, verb: &'static str, attempts: u32, e: kube::Error) -> PublishError {
        match &e {
            kube::Error::Api(s) if s.code == 404 => PublishError::NotFound {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
            },
            kube::Error::Api(s) if s.code == 403 => PublishError::Forbidden {
                verb,
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                message: s.message.clone(),
            },
            _ => PublishError::Api {
                verb,
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                attempts,
                source: e,
            },
        }
    }
}

/// An error worth another try: the connection, a timeout, throttling, a server error.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 408 | 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// The pod's namespace from its service-account mount, when there is one.
fn own_namespace() -> Option<String> {
    let text = std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE).ok()?;
    let ns = text.trim();
    (!ns.is_empty()).then(|| ns.to_owned())
}

/// Checks a ConfigMap name (a DNS subdomain: at most 253 characters of `a-z`, `0-9`, `-`
/// and `.`, starting and ending with a letter or digit) before any load is sent. A name
/// with `$(` is an unexpanded variable: Kubernetes expands `$(JOB_COMPLETION_INDEX)` in
/// args only where the variable exists (an Indexed Job's pods).
pub fn check_config_map_name(name: &str) -> Result<(), String> {
    if name.contains("$(") {
        return Err(format!(
            "`{name}` holds an unexpanded `$(...)`: Kubernetes expands `$(JOB_COMPLETION_INDEX)` \
             only in an Indexed Job's pods"
        ));
    }
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if name.is_empty()
        || name.len() > 253
        || !name.chars().all(ok_char)
        || !edge(name.chars().next())
        || !edge(name.chars().last())
    {
        return Err(format!(
            "`{name}` is not a ConfigMap name (a DNS subdomain: lowercase letters, digits, `-` \
             and `.`, at most 253, starting and ending with a letter or digit)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_map_names_are_checked_before_the_run() {
        assert!(check_config_map_name("cb-x-p3-2").is_ok());
        assert!(check_config_map_name("a.b-1").is_ok());
        let unexpanded = check_config_map_name("cb-x-p3-$(JOB_COMPLETION_INDEX)").unwrap_err();
        assert!(unexpanded.contains("unexpanded"), "{unexpanded}");
        for bad in ["", "Upper", "-lead", "trail-", "sp ace", &"a".repeat(254)] {
            assert!(check_config_map_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_transient_errors_are_retried() {
        let api = |code| {
            kube::Error::Api(
                kube::core::Status {
                    code,
                    ..kube::core::Status::default()
                }
                .boxed(),
            )
        };
        for code in [408, 429, 500, 503, 504] {
            assert!(transient(&api(code)), "{code}");
        }
        for code in [400, 403, 404, 409, 422] {
            assert!(!transient(&api(code)), "{code}");
        }
    }
}
