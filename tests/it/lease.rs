//! Leader election on a Lease against the test cluster's API server: two contenders, one
//! leader; a crashed leader is succeeded once its claim lapses, a released one at once; a
//! leader steps down when another holder shows up or its renewals fail past the duration.

use std::time::{Duration, Instant};

use goodput::controller::lease::{Leadership, LeaseConfig, lead};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use testcluster::cluster::{Cluster, ClusterConfig};
use tokio::sync::watch;

const NAMESPACE: &str = "default";
const LEASE: &str = "goodput-operator";
/// The short timings of these tests: a 2 s lease renewed every 0.5 s.
const DURATION: Duration = Duration::from_secs(2);
const RENEW: Duration = Duration::from_millis(500);
/// Slack for a loaded two-core machine on top of every bound that follows from the timings.
const SLACK: Duration = Duration::from_millis(1500);

async fn start() -> Cluster {
    Cluster::start(ClusterConfig::default())
        .await
        .expect("cluster starts")
}

async fn client(cluster: &Cluster) -> kube::Client {
    let kc = Kubeconfig::from_yaml(&cluster.kubeconfig()).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    kube::Client::try_from(config).expect("client builds")
}

fn config(identity: &str, duration: Duration) -> LeaseConfig {
    LeaseConfig::new(NAMESPACE, LEASE, identity).with_timing(duration, RENEW)
}

async fn contender(cluster: &Cluster, identity: &str, duration: Duration) -> Leadership {
    lead(client(cluster).await, config(identity, duration))
        .await
        .expect("election starts")
}

async fn spec(cluster: &Cluster) -> LeaseSpec {
    let leases: Api<Lease> = Api::namespaced(client(cluster).await, NAMESPACE);
    leases
        .get(LEASE)
        .await
        .expect("the Lease exists")
        .spec
        .expect("the Lease has a spec")
}

/// Waits until the channel shows `want`, returning how long that took; panics after
/// `within`.
async fn until(
    rx: &mut watch::Receiver<bool>,
    want: bool,
    within: Duration,
    what: &str,
) -> Duration {
    let start = Instant::now();
    tokio::time::timeout(within, rx.wait_for(|v| *v == want))
        .await
        .unwrap_or_else(|_| panic!("{what}: not {want} within {within:?}"))
        .expect("the election's channel stays open");
    start.elapsed()
}

/// Two contenders on one Lease, `a` leading; returns them with `b`'s channel.
async fn a_leads_b_follows(
    cluster: &Cluster,
    duration: Duration,
) -> (Leadership, Leadership, watch::Receiver<bool>) {
    let a = contender(cluster, "a", duration).await;
    assert!(
        a.is_leader(),
        "the first contender claims the absent Lease at once"
    );
    let b = contender(cluster, "b", duration).await;
    assert!(!b.is_leader());
    let rx = b.subscribe();
    (a, b, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_two_contenders_leads_and_the_lease_names_it() {
    let cluster = start().await;
    let (a, c) = tokio::join!(
        contender(&cluster, "a", DURATION),
        contender(&cluster, "b", DURATION)
    );
    let (mut ra, mut rb) = (a.subscribe(), c.subscribe());
    // Started together, one of them wins the guarded writes and keeps winning: watched over
    // more than twice the lease duration, never both and never neither.
    let leader = if a.is_leader() { "a" } else { "b" };
    let deadline = Instant::now() + 2 * DURATION + RENEW;
    while Instant::now() < deadline {
        let (la, lb) = (*ra.borrow_and_update(), *rb.borrow_and_update());
        assert!(la != lb, "exactly one leads: a={la} b={lb}");
        assert_eq!(
            if la { "a" } else { "b" },
            leader,
            "the leader keeps its claim"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let spec = spec(&cluster).await;
    assert_eq!(spec.holder_identity.as_deref(), Some(leader));
    assert_eq!(spec.lease_duration_seconds, Some(2));
    assert_eq!(spec.lease_transitions, Some(0), "nobody else ever held it");
    let renewed = spec.renew_time.expect("renewTime").0;
    let age = Timestamp::now().duration_since(renewed).unsigned_abs();
    assert!(age < RENEW + SLACK, "renewed {age:?} ago");
    assert!(spec.acquire_time.expect("acquireTime").0 < renewed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_is_succeeded_once_its_claim_lapses() {
    let cluster = start().await;
    let (a, mut b, mut rb) = a_leads_b_follows(&cluster, DURATION).await;
    // Dropped without release: renewals stop, the claim stays until it lapses.
    drop(a);
    let took = until(&mut rb, true, DURATION + RENEW + SLACK, "b after a crashed").await;
    // The last renewal was at most one period before the drop, so the claim held at least
    // `DURATION - RENEW` longer (less the time a request takes).
    assert!(
        took >= DURATION - RENEW - Duration::from_millis(300),
        "b took over after {took:?}: before a's claim lapsed"
    );
    b.leading().await;
    assert!(b.is_leader());
    let spec = spec(&cluster).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_leader_is_succeeded_promptly() {
    // A long lease: a successor that waited it out would take 10 s.
    let duration = Duration::from_secs(10);
    let cluster = start().await;
    let (a, mut b, mut rb) = a_leads_b_follows(&cluster, duration).await;
    let ra = a.subscribe();
    let released = Instant::now();
    a.release().await;
    assert!(!*ra.borrow(), "a stops leading when it releases");
    let vacated = spec(&cluster).await;
    assert!(
        vacated.holder_identity.is_none() || vacated.holder_identity.as_deref() == Some("b"),
        "{vacated:?}"
    );
    let took = until(&mut rb, true, RENEW + SLACK, "b after a released").await;
    assert!(
        released.elapsed() < duration / 2,
        "b took over after {:?}",
        released.elapsed()
    );
    b.leading().await;
    assert_eq!(
        spec(&cluster).await.holder_identity.as_deref(),
        Some("b"),
        "after {took:?}"
    );
    // Releasing a follower leaves the leader's claim alone.
    let c = contender(&cluster, "c", duration).await;
    assert!(!c.is_leader());
    c.release().await;
    assert_eq!(spec(&cluster).await.holder_identity.as_deref(), Some("b"));
    assert!(b.is_leader());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_steps_down_when_another_holder_takes_the_lease() {
    let cluster = start().await;
    let a = contender(&cluster, "a", DURATION).await;
    let mut ra = a.subscribe();
    // Someone else writes a fresh claim (as a contender with a skewed clock might).
    let leases: Api<Lease> = Api::namespaced(client(&cluster).await, NAMESPACE);
    let mut lease = leases.get(LEASE).await.expect("the Lease exists");
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some("intruder".into());
    spec.renew_time = Some(MicroTime(Timestamp::now()));
    leases
        .replace(LEASE, &PostParams::default(), &lease)
        .await
        .expect("the takeover is written");
    until(&mut ra, false, RENEW + SLACK, "a after the takeover").await;
    // The intruder never renews: once its claim lapses, a claims the Lease again.
    until(
        &mut ra,
        true,
        DURATION + RENEW + SLACK,
        "a after the intruder lapsed",
    )
    .await;
    assert_eq!(spec_holder(&cluster).await.as_deref(), Some("a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_renewals_end_leadership_after_the_duration_and_errors_are_retried() {
    let cluster = start().await;
    let a = contender(&cluster, "a", DURATION).await;
    let mut ra = a.subscribe();
    // Every Lease request fails for about 4 s: one request per tick while reads fail (500,
    // which kube's client does not retry by itself, unlike 429 and 503).
    let failing = Instant::now();
    cluster
        .faults()
        .fail_next("*", "coordination.k8s.io", "leases", 8, 500);
    let took = until(
        &mut ra,
        false,
        DURATION + SLACK,
        "a while its renewals fail",
    )
    .await;
    assert!(
        took >= DURATION - RENEW - Duration::from_millis(300),
        "a stepped down after {took:?}: before its claim lapsed"
    );
    // Once the API answers again, a renews its own (lapsed) claim.
    until(
        &mut ra,
        true,
        8 * RENEW + SLACK,
        "a after the API recovered",
    )
    .await;
    assert!(failing.elapsed() >= DURATION);
    assert_eq!(spec_holder(&cluster).await.as_deref(), Some("a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_fail_at_start() {
    let cluster = start().await;
    // A ServiceAccount without RBAC bindings may not read Leases.
    let kc =
        Kubeconfig::from_yaml(&cluster.kubeconfig_for(NAMESPACE, "nobody")).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    let client = kube::Client::try_from(config).expect("client builds");
    let err = lead(client, self::config("a", DURATION))
        .await
        .err()
        .expect("a forbidden read fails the start");
    assert!(
        err.to_string()
            .contains("reading Lease default/goodput-operator"),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_some());
}

async fn spec_holder(cluster: &Cluster) -> Option<String> {
    spec(cluster).await.holder_identity
}
