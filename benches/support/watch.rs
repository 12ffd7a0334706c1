//! The watch with which the benchmarks of `goodput operator` (`operator.rs`,
//! `serving_plan.rs`) time what the operator writes (included with `#[path]`).

#![allow(dead_code)]

use std::fmt::Debug;
use std::time::Instant;

use futures_util::StreamExt as _;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Watches `api` in a task and returns once it has listed what is there, with the task
/// (abort it to stop) and a channel of what it sees from then on: every object written (a
/// re-listing's too) as `see(object, when its event arrived)`. Watch errors are printed
/// after `label` and retried with backoff.
pub async fn watch<K, T>(
    api: Api<K>,
    label: &'static str,
    see: impl Fn(K, Instant) -> T + Send + 'static,
) -> (JoinHandle<()>, UnboundedReceiver<T>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = unbounded_channel();
    let (listed, synced) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        let mut listed = Some(listed);
        while let Some(event) = events.next().await {
            let at = Instant::now();
            let object = match event {
                Ok(Event::Apply(o) | Event::InitApply(o)) => o,
                Ok(Event::InitDone) => {
                    if let Some(listed) = listed.take() {
                        let _ = listed.send(());
                    }
                    continue;
                }
                Ok(Event::Init | Event::Delete(_)) => continue,
                Err(e) => {
                    eprintln!("{label}: watch error (retrying): {e}");
                    continue;
                }
            };
            // The initial listing is what was there before: not timed.
            if listed.is_none() && tx.send(see(object, at)).is_err() {
                return;
            }
        }
    });
    synced
        .await
        .unwrap_or_else(|_| panic!("{label}: the watch ended before it listed"));
    (task, rx)
}
