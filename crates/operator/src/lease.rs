//! Leader election on a `coordination.k8s.io/v1` Lease: several operator replicas run, and
//! only the one holding the Lease may write.
//!
//! [`lead`] spawns a task that reads the Lease every [`LeaseConfig::renew_every`] and
//! claims it when it is absent, vacated, expired (`renewTime + leaseDurationSeconds < now`)
//! or already ours. Every claim and renewal is a write guarded by the `resourceVersion`
//! that was read (a create when the Lease is absent), so of two contenders that read the
//! same version only one write succeeds; the other gets 409 and reads again on its next
//! tick. API errors are logged and retried on the next tick.
//!
//! The holder counts its claim valid until `lease_duration` after the moment it *started*
//! its last successful renewal, which is no later than the `renewTime` the others read, so
//! (with clocks in sync) it stops leading before anyone else may claim. When another holder
//! shows up, or renewals fail until that moment, [`Leadership::subscribe`]'s channel turns
//! `false`; the task keeps contending and may lead again later.
//!
//! [`Leadership::release`] (on SIGTERM) stops renewing and vacates the claim
//! (`holderIdentity` cleared by a guarded write), so a successor claims it on its next tick
//! instead of waiting out the lease. Dropping the [`Leadership`] stops renewing without
//! vacating, as a crash would.
//!
//! Identities must be unique among the contenders (the pod name, say): a Lease that names
//! this identity is taken to be ours.
//!
//! Written here rather than taken from a crate: `kube-lease-manager` 0.13 (the one release
//! built on kube 5) counts durations in whole seconds, keeps reporting leadership while its
//! renewals fail, and vacates an expired holder's claim with an unguarded patch; `kubert`'s
//! lease support is built on an older kube.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Where the Lease lives, who contends for it, and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease (one per group of replicas that elect a leader).
    pub name: String,
    /// This contender's identity, written as `holderIdentity`; unique among the contenders.
    pub identity: String,
    /// How long a claim stays valid after its last renewal; written as
    /// `leaseDurationSeconds`, rounded up to whole seconds.
    pub lease_duration: Duration,
    /// How often the Lease is read and, while held, renewed; shorter than `lease_duration`.
    pub renew_every: Duration,
}

impl LeaseConfig {
    /// The default lease duration (what Kubernetes' own controllers use).
    pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
    /// The default renewal period: a claim outlives two failed renewals, not three.
    pub const DEFAULT_RENEW_EVERY: Duration = Duration::from_secs(5);

    /// A config with the default timings (15 s lease, renewed every 5 s).
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Self::DEFAULT_LEASE_DURATION,
            renew_every: Self::DEFAULT_RENEW_EVERY,
        }
    }

    /// The same config with other timings.
    pub fn with_timing(mut self, lease_duration: Duration, renew_every: Duration) -> Self {
        self.lease_duration = lease_duration;
        self.renew_every = renew_every;
        self
    }

    fn validate(&self) -> Result<(), LeaseError> {
        let invalid = |reason: &str| {
            Err(LeaseError::InvalidConfig {
                reason: reason.to_owned(),
            })
        };
        if self.namespace.is_empty() || self.name.is_empty() {
            return invalid("the Lease needs a namespace and a name");
        }
        if self.identity.is_empty() {
            return invalid("the identity is empty (an empty holderIdentity means vacant)");
        }
        if self.renew_every.is_zero() {
            return invalid("renew_every is zero");
        }
        if self.renew_every >= self.lease_duration {
            return invalid("renew_every must be shorter than lease_duration");
        }
        if self.lease_duration > Duration::from_secs(i32::MAX as u64) {
            return invalid("lease_duration does not fit leaseDurationSeconds");
        }
        Ok(())
    }

    /// `leaseDurationSeconds`: the duration rounded up, so that the others never count the
    /// claim as lapsed before its holder does.
    fn duration_seconds(&self) -> i32 {
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX)
    }

    fn lease_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Why leader election could not start, or why one attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The [`LeaseConfig`] cannot work.
    #[error("invalid lease config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// Reading the Lease failed.
    #[error("reading Lease {lease}")]
    Read {
        /// `namespace/name`.
        lease: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Creating the Lease failed (other than someone else creating it first).
    #[error("creating Lease {lease}")]
    Create {
        /// `namespace/name`.
        lease: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing the Lease failed (other than a resourceVersion conflict).
    #[error("writing Lease {lease}")]
    Write {
        /// `namespace/name`.
        lease: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer in time.
    #[error("no answer about Lease {lease} within {after:?}")]
    Timeout {
        /// `namespace/name`.
        lease: String,
        /// How long was waited.
        after: Duration,
    },
}

impl LeaseError {
    /// Errors that retrying will not fix (refused credentials or permissions, an invalid
    /// object or config); [`lead`] returns these from its first attempt instead of retrying.
    fn is_permanent(&self) -> bool {
        let api = match self {
            Self::InvalidConfig { .. } => return true,
            Self::Timeout { .. } => return false,
            Self::Read { source, .. }
            | Self::Create { source, .. }
            | Self::Write { source, .. } => source,
        };
        matches!(api, kube::Error::Api(s) if matches!(s.code, 400 | 401 | 403 | 422))
    }
}

/// The handle on a running election: whether this process leads now, and how to stop.
///
/// Dropping it stops renewing without vacating the Lease (as a crash would: a successor
/// waits out the lease); call [`Leadership::release`] to hand over promptly.
pub struct Leadership {
    shared: Arc<Shared>,
    leading: watch::Receiver<bool>,
    task: Option<JoinHandle<()>>,
    elector: Elector,
}

impl Leadership {
    /// Whether this process holds the Lease now.
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// A channel that is `true` while this process holds the Lease and `false` otherwise
    /// (also after [`Leadership::release`] or drop).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.shared.tx.subscribe()
    }

    /// Resolves once this process holds the Lease (at once if it does already).
    pub async fn leading(&mut self) {
        // The sender lives in `self.shared`, so the channel cannot close while we wait.
        let _ = self.leading.wait_for(|leading| *leading).await;
    }

    /// Stops renewing and vacates the Lease if this process holds it, so that a successor
    /// need not wait out the lease duration; used on SIGTERM. Leadership ends (the channel
    /// turns `false`) before the Lease is written. Failures are logged: the claim then lapses
    /// after the lease duration as if this process had crashed.
    pub async fn release(mut self) {
        self.shared.stop();
        if let Some(task) = self.task.take() {
            task.abort();
            // Wait until the task is gone, so no renewal can follow the vacating write.
            let _ = task.await;
        }
        let lease = self.elector.config.lease_ref();
        let limit = self.elector.config.lease_duration;
        match tokio::time::timeout(limit, self.elector.vacate()).await {
            Ok(Ok(true)) => {
                tracing::info!(%lease, identity = %self.elector.config.identity, "Lease vacated")
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(%lease, error = %chain(&e), "vacating the Lease failed; it will lapse")
            }
            Err(_) => {
                tracing::warn!(%lease, after = ?limit, "vacating the Lease timed out; it will lapse")
            }
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.shared.stop();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Starts contending for the Lease: makes the first attempt (so a lone replica returns
/// already leading), then spawns a task that keeps claiming or renewing every
/// `renew_every`.
///
/// # Errors
/// [`LeaseError::InvalidConfig`] for an unusable config, and the first attempt's error when
/// retrying cannot help (401, 403, 400, 422). Other errors are logged and retried.
pub async fn lead(client: kube::Client, config: LeaseConfig) -> Result<Leadership, LeaseError> {
    config.validate()?;
    let (tx, leading) = watch::channel(false);
    let shared = Arc::new(Shared {
        tx,
        stopped: AtomicBool::new(false),
    });
    let elector = Elector {
        api: Api::namespaced(client, &config.namespace),
        config,
    };
    let mut state = Renewals::default();
    let started = Instant::now();
    let first = match elector
        .attempt(state.deadline(started, &elector.config))
        .await
    {
        Err(e) if e.is_permanent() => return Err(e),
        other => other,
    };
    state.record(first, started, &elector.config, &shared);
    let task = tokio::spawn(run(elector.clone(), state, shared.clone()));
    Ok(Leadership {
        shared,
        leading,
        task: Some(task),
        elector,
    })
}

/// The channel's sender and a flag that keeps it `false` once the election is stopped.
struct Shared {
    tx: watch::Sender<bool>,
    stopped: AtomicBool,
}

impl Shared {
    /// Publishes whether we lead; never `true` after [`Shared::stop`]. The flag is read under
    /// the channel's lock, which `stop` also takes after setting it, so a publish racing a
    /// stop cannot leave `true` behind.
    fn publish(&self, leading: bool) {
        self.tx.send_if_modified(|v| {
            let next = leading && !self.stopped.load(Ordering::SeqCst);
            std::mem::replace(v, next) != next
        });
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.tx.send_if_modified(|v| std::mem::replace(v, false));
    }
}

/// The loop of the spawned task: one attempt per `renew_every`, stepping down as soon as
/// the claim lapses without a renewal.
async fn run(elector: Elector, mut state: Renewals, shared: Arc<Shared>) {
    let config = &elector.config;
    let mut next = Instant::now() + config.renew_every;
    loop {
        // Wake at the next tick, or earlier when the claim lapses before it.
        let wake = state.valid_until.map_or(next, |v| v.min(next));
        tokio::time::sleep_until(wake).await;
        state.expire(Instant::now(), config, &shared);
        if Instant::now() < next {
            tokio::time::sleep_until(next).await;
        }
        let started = Instant::now();
        next = started + config.renew_every;
        let outcome = elector.attempt(state.deadline(started, config)).await;
        state.record(outcome, started, config, &shared);
        state.expire(Instant::now(), config, &shared);
    }
}

/// What this process knows about its own claim.
#[derive(Debug, Default)]
struct Renewals {
    /// Until when our last successful claim or renewal holds; `None` while not leading.
    valid_until: Option<Instant>,
}

impl Renewals {
    /// How long an attempt started at `started` may take: no longer than our claim holds
    /// (we must notice a lapse on time), and never longer than a lease duration.
    fn deadline(&self, started: Instant, config: &LeaseConfig) -> Instant {
        let cap = started + config.lease_duration;
        self.valid_until.map_or(cap, |v| v.min(cap))
    }

    /// Takes in the outcome of an attempt started at `started`.
    fn record(
        &mut self,
        outcome: Result<Outcome, LeaseError>,
        started: Instant,
        config: &LeaseConfig,
        shared: &Shared,
    ) {
        let lease = config.lease_ref();
        match outcome {
            Ok(Outcome::Holding) => {
                if self.valid_until.is_none() {
                    tracing::info!(%lease, identity = %config.identity, "acquired the Lease: leading");
                }
                self.valid_until = Some(started + config.lease_duration);
                shared.publish(true);
            }
            Ok(Outcome::HeldBy(holder)) => {
                if self.valid_until.take().is_some() {
                    tracing::warn!(%lease, %holder, "the Lease was taken over: no longer leading");
                }
                shared.publish(false);
            }
            Ok(Outcome::Conflict) => {
                tracing::debug!(%lease, "the Lease changed under our write; reading again next tick");
            }
            Err(e) => {
                tracing::warn!(%lease, error = %chain(&e), "leader election attempt failed; retrying next tick");
            }
        }
    }

    /// Steps down once the claim has lapsed without a renewal.
    fn expire(&mut self, now: Instant, config: &LeaseConfig, shared: &Shared) {
        if self.valid_until.is_some_and(|v| now >= v) {
            self.valid_until = None;
            tracing::warn!(lease = %config.lease_ref(), "no renewal within the lease duration: no longer leading");
            shared.publish(false);
        }
    }
}

/// The result of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// We claimed or renewed the Lease.
    Holding,
    /// Someone else holds it, validly.
    HeldBy(String),
    /// Someone else wrote (or created) it between our read and our write.
    Conflict,
}

/// What to do with the Lease as read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    /// It is ours: renew it.
    Renew,
    /// It is vacant or lapsed: claim it.
    Claim,
    /// Someone else holds it and their claim is still valid.
    Wait(String),
}

/// Decides from the Lease's spec (as read at wall time `now`) what `identity` may do.
fn decide(spec: Option<&LeaseSpec>, identity: &str, now: SystemTime) -> Decision {
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty());
    match holder {
        None => Decision::Claim,
        Some(h) if h == identity => Decision::Renew,
        Some(h) => match spec.and_then(expiry) {
            Some(until) if until >= now => Decision::Wait(h.to_owned()),
            // Lapsed, or a holder without a renewTime or duration (nothing keeps it valid).
            _ => Decision::Claim,
        },
    }
}

/// `renewTime + leaseDurationSeconds`, when both are set.
fn expiry(spec: &LeaseSpec) -> Option<SystemTime> {
    let renewed = SystemTime::from(spec.renew_time.as_ref()?.0);
    let secs = u64::try_from(spec.lease_duration_seconds?.max(0)).unwrap_or(0);
    renewed.checked_add(Duration::from_secs(secs))
}

/// The Lease API and the config: everything an attempt or the vacating write needs.
#[derive(Clone)]
struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
}

impl Elector {
    /// One attempt, bounded by `deadline`.
    async fn attempt(&self, deadline: Instant) -> Result<Outcome, LeaseError> {
        let begun = Instant::now();
        match tokio::time::timeout_at(deadline, self.try_claim()).await {
            Ok(outcome) => outcome,
            Err(_) => Err(LeaseError::Timeout {
                lease: self.config.lease_ref(),
                after: deadline.saturating_duration_since(begun),
            }),
        }
    }

    /// Reads the Lease and claims, renews or leaves it.
    async fn try_claim(&self) -> Result<Outcome, LeaseError> {
        let config = &self.config;
        let lease = config.lease_ref();
        let current = self
            .api
            .get_opt(&config.name)
            .await
            .map_err(|source| LeaseError::Read {
                lease: lease.clone(),
                source,
            })?;
        let Some(current) = current else {
            let now = MicroTime(Timestamp::now());
            let new = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    namespace: Some(config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(config.identity.clone()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_duration_seconds: Some(config.duration_seconds()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &new).await {
                Ok(_) => Ok(Outcome::Holding),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Outcome::Conflict),
                Err(source) => Err(LeaseError::Create { lease, source }),
            };
        };
        let old = current.spec.clone().unwrap_or_default();
        let now = Timestamp::now();
        let spec = match decide(
            current.spec.as_ref(),
            &config.identity,
            SystemTime::from(now),
        ) {
            Decision::Wait(holder) => return Ok(Outcome::HeldBy(holder)),
            Decision::Renew => LeaseSpec {
                acquire_time: old.acquire_time.clone().or(Some(MicroTime(now))),
                renew_time: Some(MicroTime(now)),
                lease_duration_seconds: Some(config.duration_seconds()),
                ..old
            },
            Decision::Claim => LeaseSpec {
                holder_identity: Some(config.identity.clone()),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_duration_seconds: Some(config.duration_seconds()),
                lease_transitions: Some(old.lease_transitions.unwrap_or(0).saturating_add(1)),
                ..old
            },
        };
        self.replace(current, spec).await.map(|written| {
            if written {
                Outcome::Holding
            } else {
                Outcome::Conflict
            }
        })
    }

    /// Writes `spec` into `current`, guarded by the resourceVersion it was read at: `false`
    /// when that version is gone (409).
    async fn replace(&self, current: Lease, spec: LeaseSpec) -> Result<bool, LeaseError> {
        let updated = Lease {
            metadata: current.metadata,
            spec: Some(spec),
        };
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(source) => Err(LeaseError::Write {
                lease: self.config.lease_ref(),
                source,
            }),
        }
    }

    /// Clears `holderIdentity` if the Lease names us; `Ok(true)` when it was vacated,
    /// `Ok(false)` when it was not ours (or absent). Retries conflicts and errors (the
    /// caller bounds the time).
    async fn vacate(&self) -> Result<bool, LeaseError> {
        let mut last_error = None;
        for _ in 0..5 {
            if let Some(e) = last_error.take() {
                tracing::debug!(error = %chain(&e), "vacating the Lease: retrying");
                tokio::time::sleep(self.config.renew_every / 4).await;
            }
            let current = match self.api.get_opt(&self.config.name).await {
                Ok(Some(current)) => current,
                Ok(None) => return Ok(false),
                Err(source) => {
                    last_error = Some(LeaseError::Read {
                        lease: self.config.lease_ref(),
                        source,
                    });
                    continue;
                }
            };
            let old = current.spec.clone().unwrap_or_default();
            if old.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(false);
            }
            let spec = LeaseSpec {
                holder_identity: None,
                acquire_time: None,
                renew_time: Some(MicroTime(Timestamp::now())),
                ..old
            };
            match self.replace(current, spec).await {
                Ok(true) => return Ok(true),
                // Someone wrote in between: read again (it may no longer be ours).
                Ok(false) => {}
                Err(e) => last_error = Some(e),
            }
        }
        match last_error {
            Some(e) => Err(e),
            None => Ok(false),
        }
    }
}

/// An error and its sources, `: `-separated, for one log line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn spec(holder: Option<&str>, renewed: Option<u64>, duration: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: renewed
                .map(|s| MicroTime(Timestamp::try_from(at(s)).expect("a time in jiff's range"))),
            lease_duration_seconds: duration,
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn vacant_or_missing_holders_are_claimed() {
        assert_eq!(decide(None, "a", at(0)), Decision::Claim);
        assert_eq!(
            decide(Some(&LeaseSpec::default()), "a", at(0)),
            Decision::Claim
        );
        let empty = spec(Some(""), Some(0), Some(15));
        assert_eq!(decide(Some(&empty), "a", at(1)), Decision::Claim);
    }

    #[test]
    fn our_own_claim_is_renewed_even_when_lapsed() {
        let ours = spec(Some("a"), Some(0), Some(15));
        assert_eq!(decide(Some(&ours), "a", at(1)), Decision::Renew);
        assert_eq!(decide(Some(&ours), "a", at(100)), Decision::Renew);
    }

    #[test]
    fn another_holder_is_respected_until_renew_time_plus_duration() {
        let theirs = spec(Some("b"), Some(10), Some(15));
        assert_eq!(
            decide(Some(&theirs), "a", at(10)),
            Decision::Wait("b".into())
        );
        assert_eq!(
            decide(Some(&theirs), "a", at(25)),
            Decision::Wait("b".into())
        );
        assert_eq!(decide(Some(&theirs), "a", at(26)), Decision::Claim);
    }

    #[test]
    fn a_holder_without_renew_time_or_duration_has_lapsed() {
        assert_eq!(
            decide(Some(&spec(Some("b"), None, Some(15))), "a", at(0)),
            Decision::Claim
        );
        assert_eq!(
            decide(Some(&spec(Some("b"), Some(0), None)), "a", at(0)),
            Decision::Claim
        );
    }

    #[test]
    fn durations_round_up_to_whole_seconds() {
        let c = LeaseConfig::new("ns", "l", "a");
        assert_eq!(c.duration_seconds(), 15);
        let c = c.with_timing(Duration::from_millis(2500), Duration::from_millis(500));
        assert_eq!(c.duration_seconds(), 3);
    }

    #[test]
    fn unusable_configs_are_refused() {
        let ok = LeaseConfig::new("ns", "l", "a");
        assert!(ok.validate().is_ok());
        for bad in [
            LeaseConfig::new("", "l", "a"),
            LeaseConfig::new("ns", "", "a"),
            LeaseConfig::new("ns", "l", ""),
            ok.clone()
                .with_timing(Duration::from_secs(2), Duration::ZERO),
            ok.clone()
                .with_timing(Duration::from_secs(2), Duration::from_secs(2)),
        ] {
            assert!(
                matches!(bad.validate(), Err(LeaseError::InvalidConfig { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_claim_lapses_without_renewal_and_a_stop_wins_over_a_publish() {
        let (tx, rx) = watch::channel(false);
        let shared = Shared {
            tx,
            stopped: AtomicBool::new(false),
        };
        let config = LeaseConfig::new("ns", "l", "a")
            .with_timing(Duration::from_secs(2), Duration::from_millis(500));
        let mut state = Renewals::default();
        let t0 = Instant::now();
        state.record(Ok(Outcome::Holding), t0, &config, &shared);
        assert!(*rx.borrow());
        // A failed renewal or a conflict keeps the claim until it lapses.
        let failed = Err(LeaseError::Timeout {
            lease: config.lease_ref(),
            after: Duration::ZERO,
        });
        state.record(failed, t0 + Duration::from_millis(500), &config, &shared);
        state.record(
            Ok(Outcome::Conflict),
            t0 + Duration::from_secs(1),
            &config,
            &shared,
        );
        state.expire(t0 + Duration::from_millis(1999), &config, &shared);
        assert!(*rx.borrow());
        assert_eq!(
            state.deadline(t0 + Duration::from_secs(1), &config),
            t0 + Duration::from_secs(2)
        );
        state.expire(t0 + Duration::from_secs(2), &config, &shared);
        assert!(!*rx.borrow());
        // Another holder ends leadership at once.
        state.record(Ok(Outcome::Holding), t0, &config, &shared);
        assert!(*rx.borrow());
        state.record(Ok(Outcome::HeldBy("b".into())), t0, &config, &shared);
        assert!(!*rx.borrow());
        assert_eq!(state.valid_until, None);
        // After a stop nothing publishes `true`.
        shared.stop();
        shared.publish(true);
        assert!(!*rx.borrow());
    }
}
