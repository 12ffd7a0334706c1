//! The integration tests that measure time or rates: simulated engines, load generators,
//! the router and the operator running benchmarks on the test cluster. Every test here
//! holds its share of [`MACHINE`] for its whole run, and the binary runs only when named
//! (`cargo test --test measured`, `test = false` in `Cargo.toml`), alone, so a measurement
//! has the machine to itself: nothing else's load becomes its latency.
//! The shared fixtures under `tests/support/` are mounted once here.

#[path = "../support/prometheus.rs"]
mod fake_prometheus;
#[path = "../support/serving_plan.rs"]
mod fixture;
#[path = "../support/forge_stub.rs"]
mod forge_stub;
#[path = "../support/git_remote.rs"]
mod git_remote;
#[path = "../support/operator.rs"]
mod harness;
#[path = "../support/live.rs"]
mod live;
#[path = "../support/scenarios.rs"]
mod scenarios;

mod bench;
mod e2e;
mod engine_metrics;
mod failure;
mod fleet;
mod gitops;
mod loadgen;
mod loadgen_client;
mod loadgen_metrics;
mod operator;
mod operator_failure;
mod router;
mod serve_sim;
mod serving_plan;

/// Held by every test of this binary from its first line to its last.
pub static MACHINE: Machine = Machine::new();

/// The machine's two cores, shared out to the tests of this binary. A test that measures
/// latency (or rests a verdict on one) takes the whole machine: with two cores, a second test
/// beside a measurement would be measured too. A test that asserts only behaviour
/// (conditions, events, retries, files, who reconciles) and mostly waits on timeouts takes
/// a part, so two such tests may wait side by side. Permits are handed out first come, first
/// served: a test waiting for the whole machine holds back later parts.
pub struct Machine(tokio::sync::Semaphore);

/// Parts of the machine (libtest runs two tests at a time on two cores).
const PARTS: u32 = 2;

impl Machine {
    const fn new() -> Self {
        Machine(tokio::sync::Semaphore::const_new(PARTS as usize))
    }

    /// The whole machine, for a test that measures.
    pub async fn whole(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.0
            .acquire_many(PARTS)
            .await
            // The semaphore is a static that nothing closes.
            .expect("the machine's semaphore is never closed")
    }

    /// The whole machine, from a test without a runtime of its own.
    pub fn whole_blocking(&self) -> tokio::sync::SemaphorePermit<'_> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime")
            .block_on(self.whole())
    }

    /// A part of the machine, for a test that asserts behaviour, not latency.
    pub async fn part(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.0
            .acquire()
            .await
            // The semaphore is a static that nothing closes.
            .expect("the machine's semaphore is never closed")
    }
}
