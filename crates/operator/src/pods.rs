//! Pure readings of a point's pods: why one failed (exit code, OOM kill, eviction, the tail
//! of its log), and whether any has started at all. The controller turns these into the
//! reasons of a retried or invalid point, so a missing result always says why.

use k8s_openapi::api::core::v1::{ContainerState, Pod};

/// Most characters of one pod's failure kept (the log tail is cut from the front).
const MAX_FAILURE_CHARS: usize = 240;

/// Why the failed pods of a point failed, one line per pod, in name order: `pod p-0-abc:
/// exit 1 (Error): <log tail>`, `pod p-1-def: OOMKilled`, `pod p-0-xyz: Evicted: <message>`.
pub fn failures(pods: &[Pod]) -> Vec<String> {
    let mut failed: Vec<&Pod> = pods.iter().filter(|p| phase(p) == Some("Failed")).collect();
    failed.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    failed
        .into_iter()
        .map(|p| {
            let name = p.metadata.name.as_deref().unwrap_or("?");
            format!("pod {name}: {}", failure(p))
        })
        .collect()
}

/// One failed pod's story: a terminated container's exit code, reason and message (with
/// `FallbackToLogsOnError`, the tail of its log), else the pod's own reason (`Evicted`).
fn failure(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let terminated = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .find_map(|c| {
            c.state
                .as_ref()
                .and_then(|s: &ContainerState| s.terminated.as_ref())
                .filter(|t| t.exit_code != 0)
        });
    let text = match terminated {
        Some(t) => {
            let reason = t.reason.as_deref().unwrap_or("Error");
            let head = if reason == "OOMKilled" {
                format!("OOMKilled (exit {})", t.exit_code)
            } else {
                format!("exit {} ({reason})", t.exit_code)
            };
            match t
                .message
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
            {
                // The exit code first, whole; the log line keeps its end.
                Some(m) => {
                    let room = MAX_FAILURE_CHARS.saturating_sub(head.chars().count() + 2);
                    format!("{head}: {}", tail(last_line(m), room.max(16)))
                }
                None => head,
            }
        }
        None => {
            let reason = status.and_then(|s| s.reason.as_deref()).unwrap_or("Failed");
            match status.and_then(|s| s.message.as_deref()) {
                Some(m) if !m.is_empty() => format!("{reason}: {m}"),
                _ => reason.to_owned(),
            }
        }
    };
    tail(&text, MAX_FAILURE_CHARS)
}

/// The last non-empty line of a log tail: where a failing program says why.
fn last_line(message: &str) -> &str {
    message
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or(message)
}

/// At most `max` characters: the end of `text`, marked as cut.
fn tail(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().skip(n - (max - 1)).collect();
    format!("…{kept}")
}

/// Whether no pod of the point has started a container: what a Job that never starts looks
/// like (image pull errors, unschedulable, missing config). `None` once any has started (or
/// before any pod exists, when there is nothing to say); else why the first one waits.
pub fn not_started(pods: &[Pod]) -> Option<String> {
    let mut sorted: Vec<&Pod> = pods.iter().collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let first = sorted.first()?;
    let started = sorted.iter().any(|p| {
        matches!(phase(p), Some("Running" | "Succeeded" | "Failed"))
            || p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .any(|c| {
                    c.state
                        .as_ref()
                        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
                })
    });
    if started {
        return None;
    }
    let name = first.metadata.name.as_deref().unwrap_or("?");
    let status = first.status.as_ref();
    let waiting = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .find_map(|c| c.state.as_ref().and_then(|s| s.waiting.as_ref()));
    let why = match waiting {
        Some(w) => {
            let reason = w.reason.as_deref().unwrap_or("Waiting");
            match w.message.as_deref().filter(|m| !m.is_empty()) {
                Some(m) => format!("{reason}: {m}"),
                None => reason.to_owned(),
            }
        }
        None => status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .map_or_else(
                || "Pending".to_owned(),
                |c| {
                    format!(
                        "Unschedulable: {}",
                        c.message.as_deref().unwrap_or_default()
                    )
                },
            ),
    };
    Some(tail(&format!("pod {name}: {why}"), MAX_FAILURE_CHARS))
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("a pod literal")
    }

    #[test]
    fn a_failed_pod_says_its_exit_code_and_the_last_line_of_its_log() {
        let pods = [
            pod(serde_json::json!({
                "metadata": {"name": "p-1"},
                "status": {"phase": "Failed", "containerStatuses": [{
                    "name": "loadgen", "image": "goodput", "imageID": "", "ready": false,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
                }]}
            })),
            pod(serde_json::json!({
                "metadata": {"name": "p-0"},
                "status": {"phase": "Failed", "containerStatuses": [{
                    "name": "loadgen", "image": "goodput", "imageID": "", "ready": false,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 1, "reason": "Error",
                        "message": "starting\nerror: the result ConfigMap is forbidden\n"}}
                }]}
            })),
            pod(serde_json::json!({
                "metadata": {"name": "p-2"},
                "status": {"phase": "Failed", "reason": "Evicted",
                    "message": "The node was low on resource: memory."}
            })),
            pod(serde_json::json!({"metadata": {"name": "p-3"}, "status": {"phase": "Running"}})),
        ];
        assert_eq!(
            failures(&pods),
            [
                "pod p-0: exit 1 (Error): error: the result ConfigMap is forbidden",
                "pod p-1: OOMKilled (exit 137)",
                "pod p-2: Evicted: The node was low on resource: memory.",
            ]
        );
    }

    #[test]
    fn a_long_log_line_keeps_the_exit_code_and_its_own_end() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Failed", "containerStatuses": [{
                "name": "loadgen", "image": "goodput", "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "reason": "Error",
                    "message": format!("error: {} the end", "y".repeat(1000))}}
            }]}
        }));
        let f = &failures(&[p])[0];
        assert!(f.starts_with("pod p: exit 137 (Error): …"), "{f}");
        assert!(f.ends_with("the end"), "{f}");
        assert!(f.chars().count() <= MAX_FAILURE_CHARS + 10, "{f}");
    }

    #[test]
    fn a_long_failure_keeps_its_end() {
        let long = format!("error: {}", "x".repeat(1000));
        let p = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Failed", "reason": "Boom", "message": long}
        }));
        let f = &failures(&[p])[0];
        let story = f.strip_prefix("pod p: ").expect("the pod's name first");
        assert_eq!(story.chars().count(), MAX_FAILURE_CHARS);
        assert!(story.starts_with('…') && story.ends_with("xxx"), "{f}");
    }

    #[test]
    fn pods_waiting_on_their_image_have_not_started() {
        let waiting = pod(serde_json::json!({
            "metadata": {"name": "p-0"},
            "status": {"phase": "Pending", "containerStatuses": [{
                "name": "loadgen", "image": "goodput", "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff",
                    "message": "Back-off pulling image \"goodput\""}}
            }]}
        }));
        assert_eq!(
            not_started(std::slice::from_ref(&waiting)).as_deref(),
            Some("pod p-0: ImagePullBackOff: Back-off pulling image \"goodput\"")
        );
        let unscheduled = pod(serde_json::json!({
            "metadata": {"name": "p-0"},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "message": "0/3 nodes are available"}]}
        }));
        assert_eq!(
            not_started(&[unscheduled]).as_deref(),
            Some("pod p-0: Unschedulable: 0/3 nodes are available")
        );
        let running =
            pod(serde_json::json!({"metadata": {"name": "p-1"}, "status": {"phase": "Running"}}));
        assert_eq!(not_started(&[waiting, running]), None, "one shard started");
        assert_eq!(not_started(&[]), None, "no pod yet: nothing to say");
    }
}
