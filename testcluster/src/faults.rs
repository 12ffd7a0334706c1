//! Faults a test can inject into the API server: failed requests, dropped or slowed
//! watches. (Compaction lives on the store; pod faults on the kubelet.)

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::error::ApiError;

#[derive(Debug, Clone)]
struct FailRule {
    verb: String,
    group: String,
    resource: String,
    remaining: u32,
    code: u16,
}

/// The fault table of one cluster.
pub struct Faults {
    rules: Mutex<Vec<FailRule>>,
    drop_watches: broadcast::Sender<()>,
    watch_delay_ms: AtomicU64,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            rules: Mutex::new(Vec::new()),
            drop_watches: broadcast::channel(16).0,
            watch_delay_ms: AtomicU64::new(0),
        }
    }
}

impl Faults {
    /// Fails the next `n` requests of `verb` (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`, `deletecollection`, or `*`) on `group`/`resource` (`*` for any; a
    /// subresource as `deployments/scale`) with `code` (500, 429, 409, 503, ...).
    pub fn fail_next(&self, verb: &str, group: &str, resource: &str, n: u32, code: u16) {
        self.rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(FailRule {
                verb: verb.into(),
                group: group.into(),
                resource: resource.into(),
                remaining: n,
                code,
            });
    }

    /// Takes one failure for this request, if a rule matches.
    pub(crate) fn take(&self, verb: &str, group: &str, resource: &str) -> Option<ApiError> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let rule = rules.iter_mut().find(|r| {
            r.remaining > 0
                && (r.verb == "*" || r.verb == verb)
                && (r.group == "*" || r.group == group)
                && (r.resource == "*" || r.resource == resource)
        })?;
        rule.remaining -= 1;
        let code = rule.code;
        rules.retain(|r| r.remaining > 0);
        Some(match code {
            409 => ApiError::conflict("injected fault: conflict"),
            429 => ApiError::new(429, "TooManyRequests", "injected fault: too many requests"),
            503 => ApiError::new(
                503,
                "ServiceUnavailable",
                "injected fault: service unavailable",
            ),
            404 => ApiError::new(404, "NotFound", "injected fault: not found"),
            c => ApiError::new(c, "InternalError", "injected fault: internal error"),
        })
    }

    /// Closes every open watch stream now (clients re-watch from their last resourceVersion).
    pub fn drop_watches(&self) {
        let _ = self.drop_watches.send(());
    }

    pub(crate) fn watch_dropped(&self) -> broadcast::Receiver<()> {
        self.drop_watches.subscribe()
    }

    /// Delays every watch event by `delay` (zero to stop).
    pub fn delay_watches(&self, delay: Duration) {
        self.watch_delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    pub(crate) fn watch_delay(&self) -> Duration {
        Duration::from_millis(self.watch_delay_ms.load(Ordering::Relaxed))
    }
}
