//! One live replica: the engine model stepped in real time on its own thread, the
//! per-request inboxes its tokens are delivered to, and the control handle ([`Replica`])
//! through which the HTTP layer submits requests and a router or a test injects faults.
//!
//! The engine runs on a dedicated OS thread rather than a tokio task: it sleeps once per
//! engine step until the step's end (`wall = epoch + engine_time / time_scale`, absolute
//! deadlines, so no drift), and a thread sleep is accurate to tens of microseconds while
//! tokio's timer rounds up to the next millisecond, which alone would make every token up
//! to 1 ms late. Everything else (HTTP, SSE writing) stays on the tokio runtime; the thread
//! only wakes the streams whose tokens are due.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::metrics::{LatenessRecorder, LatenessSnapshot, Published, ServerMetrics};
use super::{LiveError, ReplicaConfig};
use goodput_model::engine::{Engine, EngineStats, NewRequest, RequestId};

/// Locks a mutex, ignoring poisoning: every critical section here leaves the data valid.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) use goodput_core::workload::hashing::splitmix64 as mix;

pub(crate) use goodput_core::workload::hashing::unit;

// ---------------------------------------------------------------------------------------
// Faults

/// How a stream is cut mid-way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutMode {
    /// vLLM's mid-stream error: `data: {"error":{...}}` then `data: [DONE]`, on the 200
    /// stream.
    ErrorFrame,
    /// The connection is dropped without finishing the chunked body.
    Disconnect,
}

/// Cut a fraction of streams after some tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamCut {
    /// Fraction of streaming requests cut (0..=1), drawn per request.
    pub fraction: f64,
    /// Token frames a cut stream delivers before it is cut.
    pub after_tokens: u32,
    /// How it is cut.
    pub mode: CutMode,
}

/// Faults injected at one replica's HTTP layer. The default injects none. Faults persist
/// across [`Replica::kill_engine`] / [`Replica::start_engine`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultConfig {
    /// Fraction of generation requests (0..=1, drawn per request) answered with
    /// `error_status` and an OpenAI-style error body instead of being served.
    pub error_fraction: f64,
    /// HTTP status of injected errors (500, 503, 429, ...).
    pub error_status: u16,
    /// Delay added before a request reaches the engine.
    pub added_latency: Duration,
    /// Extra delay drawn uniformly from `[0, latency_jitter)` per request.
    pub latency_jitter: Duration,
    /// Streams cut mid-way, if any.
    pub stream_cut: Option<StreamCut>,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            error_fraction: 0.0,
            error_status: 500,
            added_latency: Duration::ZERO,
            latency_jitter: Duration::ZERO,
            stream_cut: None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Inbox: where the engine thread leaves a request's tokens

/// One delivery to a request: tokens up to `generated`, due at `due` (the end of the step
/// that produced the last of them, in wall time).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Chunk {
    pub generated: u32,
    pub due: Instant,
}

#[derive(Debug, Default)]
struct InboxState {
    /// Deliveries not taken yet, oldest first.
    pending: VecDeque<Chunk>,
    /// The last pending chunk is the request's last.
    finished: bool,
    failed: bool,
    waker: Option<Waker>,
}

/// The engine thread's delivery point for one request. Each delivery stays a separate
/// chunk (one SSE frame) even when the reader lags, so frame boundaries do not depend on
/// how busy the server is; a reader that stops reading holds its undelivered chunks (at
/// most one per token) until it resumes or goes away.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    state: Mutex<InboxState>,
}

/// What a reader finds in its inbox.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Update {
    /// Chunks were moved to the reader; `true` when the last of them ends the request.
    Chunks(bool),
    /// The replica died under the request.
    Failed,
}

impl Inbox {
    fn publish(&self, chunk: Chunk, finished: bool) {
        let waker = {
            let mut st = lock(&self.state);
            st.pending.push_back(chunk);
            st.finished |= finished;
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn fail(&self) {
        let waker = {
            let mut st = lock(&self.state);
            st.failed = true;
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Moves the pending chunks into `into` (which must be empty; its allocation is
    /// swapped in for reuse), or registers the task to be woken when there are some.
    pub(crate) fn poll_take(
        &self,
        into: &mut VecDeque<Chunk>,
        cx: &mut Context<'_>,
    ) -> Poll<Update> {
        let mut st = lock(&self.state);
        if !st.pending.is_empty() {
            into.clear();
            std::mem::swap(&mut st.pending, into);
            return Poll::Ready(Update::Chunks(st.finished));
        }
        if st.failed {
            return Poll::Ready(Update::Failed);
        }
        match &st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

// ---------------------------------------------------------------------------------------
// Engine thread

pub(crate) enum Command {
    Submit(Submission),
    Cancel(u64),
    KvFactor(f64),
    Stop,
}

pub(crate) struct Submission {
    key: u64,
    req: NewRequest,
    arrival: Instant,
    inbox: Arc<Inbox>,
    /// Publish every this many tokens (plus the first and the last); 0: only the last.
    every: u32,
    /// Reaching the output length counts as "stop" (sampled EOS) rather than "length".
    finish_stop: bool,
}

/// The channel to a running engine thread and what it publishes.
pub(crate) struct EngineLink {
    tx: mpsc::Sender<Command>,
    published: Arc<Mutex<Published>>,
}

struct Clock {
    epoch: Instant,
    scale: f64,
}

impl Clock {
    /// Engine time corresponding to now.
    fn engine_now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64() * self.scale
    }
    /// Engine time corresponding to the wall instant `at` (0 before the epoch).
    fn engine_at(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.epoch).as_secs_f64() * self.scale
    }
    /// Wall time of engine time `t`.
    fn wall(&self, t: f64) -> Instant {
        self.epoch + Duration::from_secs_f64((t / self.scale).max(0.0))
    }
}

/// Sleeps until `deadline`. A thread sleep wakes 50–200 µs late (timer slack, idle
/// states), so for steps of 2 ms or more the last 200 µs are spent spinning instead: at most
/// 10% of one core while the engine is busy, for wake-ups within microseconds.
fn sleep_until(deadline: Instant, step: Duration) {
    const SPIN: Duration = Duration::from_micros(200);
    let now = Instant::now();
    if deadline <= now {
        return;
    }
    if step < Duration::from_millis(2) {
        std::thread::sleep(deadline - now);
        return;
    }
    let left = deadline - now;
    if left > SPIN {
        std::thread::sleep(left - SPIN);
    }
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

struct Active {
    key: u64,
    id: RequestId,
    inbox: Arc<Inbox>,
    arrival: Instant,
    every: u32,
    published: u32,
    finish_stop: bool,
    /// Wall time the request was most recently scheduled (admitted).
    scheduled_at: Option<Instant>,
    /// Last step it was seen running.
    seen_step: Option<u64>,
    first_token: Option<Instant>,
    last_token: Instant,
}

struct EngineLoop {
    engine: Engine,
    rx: mpsc::Receiver<Command>,
    published: Arc<Mutex<Published>>,
    clock: Clock,
    slots: Vec<Option<Active>>,
    keys: HashMap<u64, RequestId>,
    metrics: ServerMetrics,
    step_no: u64,
    step_lateness: Option<Arc<LatenessRecorder>>,
    /// Deliveries of the current step, woken after the metrics are published.
    outbox: Vec<(Arc<Inbox>, Chunk, bool)>,
}

impl EngineLoop {
    fn run(mut self) {
        loop {
            loop {
                match self.rx.try_recv() {
                    Ok(cmd) => {
                        if !self.handle(cmd) {
                            return self.stop();
                        }
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => return self.stop(),
                }
            }
            if self.engine.is_idle() {
                self.publish();
                let Ok(cmd) = self.rx.recv() else {
                    return self.stop();
                };
                // The engine idled until the request arrived: the time the server spent
                // reading and tokenizing it is already part of its model time, not added
                // to it (at time scale K every real millisecond would cost K).
                let until = match &cmd {
                    Command::Submit(s) => self.clock.engine_at(s.arrival),
                    _ => self.clock.engine_now(),
                };
                self.engine.advance_to(until);
                if !self.handle(cmd) {
                    return self.stop();
                }
                continue;
            }
            let Some(step) = self.engine.step() else {
                continue;
            };
            self.step_no += 1;
            let step_start = self.clock.wall(step.start);
            self.note_scheduled(step_start);
            let deadline = self.clock.wall(step.end);
            sleep_until(deadline, deadline.saturating_duration_since(step_start));
            let now = Instant::now();
            if let Some(r) = &self.step_lateness {
                r.record(now.saturating_duration_since(deadline));
            }
            self.deliver(step_start, deadline, now);
            self.publish();
            self.wake();
        }
    }

    /// Applies one command; false to stop.
    fn handle(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Submit(s) => {
                let id = self.engine.submit(s.req);
                let slot = id.slot();
                if self.slots.len() <= slot {
                    self.slots.resize_with(slot + 1, || None);
                }
                self.keys.insert(s.key, id);
                self.slots[slot] = Some(Active {
                    key: s.key,
                    id,
                    inbox: s.inbox,
                    arrival: s.arrival,
                    every: s.every,
                    published: 0,
                    finish_stop: s.finish_stop,
                    scheduled_at: None,
                    seen_step: None,
                    first_token: None,
                    last_token: s.arrival,
                });
            }
            Command::Cancel(key) => {
                if let Some(id) = self.keys.remove(&key) {
                    self.engine.cancel(id);
                    if let Some(s) = self.slots.get_mut(id.slot()) {
                        *s = None;
                    }
                    self.metrics.aborted += 1;
                }
            }
            Command::KvFactor(f) => self.engine.set_kv_capacity_factor(f),
            Command::Stop => return false,
        }
        true
    }

    /// Notes the scheduling time of requests that started running in this step.
    fn note_scheduled(&mut self, step_start: Instant) {
        let step = self.step_no;
        for id in self.engine.running() {
            let Some(Some(a)) = self.slots.get_mut(id.slot()) else {
                continue;
            };
            if a.id != id {
                continue;
            }
            // Newly admitted, or admitted again after a preemption.
            if a.seen_step.is_none_or(|s| s + 1 != step) {
                a.scheduled_at = Some(step_start.max(a.arrival));
            }
            a.seen_step = Some(step);
        }
    }

    /// Records the step's tokens in the metrics and queues their deliveries; the inboxes
    /// are woken by [`EngineLoop::wake`] after the metrics are published, so a client that
    /// sees its last token also sees it counted.
    fn deliver(&mut self, step_start: Instant, due: Instant, now: Instant) {
        for ev in self.engine.events() {
            let slot = ev.id.slot();
            let Some(Some(a)) = self.slots.get_mut(slot) else {
                continue;
            };
            if a.id != ev.id {
                continue;
            }
            let m = &mut self.metrics;
            if ev.generated == 1 || a.first_token.is_none() {
                m.ttft.observe((now - a.arrival).as_secs_f64());
                a.first_token = Some(now);
                // Admitted and finished within one step: never seen running.
                a.scheduled_at.get_or_insert(step_start.max(a.arrival));
            } else {
                m.itl.observe((now - a.last_token).as_secs_f64());
            }
            a.last_token = now;
            let publish = ev.finished
                || (a.every > 0 && (ev.generated == 1 || ev.generated - a.published >= a.every));
            if publish {
                let chunk = Chunk {
                    generated: ev.generated,
                    due,
                };
                self.outbox.push((a.inbox.clone(), chunk, ev.finished));
                a.published = ev.generated;
            }
            if ev.finished {
                m.e2e.observe((now - a.arrival).as_secs_f64());
                let scheduled = a.scheduled_at.unwrap_or(a.arrival);
                m.queue
                    .observe(scheduled.saturating_duration_since(a.arrival).as_secs_f64());
                if ev.generated > 1 {
                    let first = a.first_token.unwrap_or(a.arrival);
                    m.tpot
                        .observe((now - first).as_secs_f64() / f64::from(ev.generated - 1));
                }
                if a.finish_stop {
                    m.finished_stop += 1;
                } else {
                    m.finished_length += 1;
                }
                self.keys.remove(&a.key);
                self.slots[slot] = None;
            }
        }
    }

    /// Hands the queued deliveries to their requests.
    fn wake(&mut self) {
        for (inbox, chunk, finished) in self.outbox.drain(..) {
            inbox.publish(chunk, finished);
        }
    }

    fn publish(&self) {
        let mut p = lock(&self.published);
        p.stats = self.engine.stats();
        p.metrics.clone_from(&self.metrics);
    }

    /// The replica is going away.
    fn stop(self) {
        drop(self);
    }
}

impl Drop for EngineLoop {
    /// Every request still in the engine fails (its stream breaks), whether the loop was
    /// stopped or, should it ever happen, panicked.
    fn drop(&mut self) {
        for a in self.slots.drain(..).flatten() {
            a.inbox.fail();
        }
        for (inbox, _, _) in self.outbox.drain(..) {
            inbox.fail();
        }
    }
}

// ---------------------------------------------------------------------------------------
// The replica handle

struct Inner {
    config: ReplicaConfig,
    link: Mutex<Option<Arc<EngineLink>>>,
    next_key: AtomicU64,
    outstanding: AtomicUsize,
    faults: Mutex<FaultConfig>,
    kv_factor: Mutex<f64>,
    frame_lateness: Option<Arc<LatenessRecorder>>,
    step_lateness: Option<Arc<LatenessRecorder>>,
}

/// A live simulated replica: the engine model running in real time plus the state its
/// HTTP API needs. Cheap to clone (a shared handle). The engine thread stops when it is
/// killed or when the last handle (and every in-flight request) is gone.
#[derive(Clone)]
pub struct Replica {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("model", &self.inner.config.setup.model)
            .field("running", &self.is_running())
            .field("outstanding", &self.outstanding())
            .finish()
    }
}

/// A request submitted to the engine: its inbox and the guard that cancels it if dropped
/// before it finishes.
pub(crate) struct Ticket {
    pub inbox: Arc<Inbox>,
    pub guard: CancelGuard,
}

/// Cancels its request in the engine when dropped while armed (the client went away), and
/// keeps the replica's outstanding-request count.
pub(crate) struct CancelGuard {
    link: Arc<EngineLink>,
    inner: Arc<Inner>,
    key: u64,
    armed: bool,
}

impl CancelGuard {
    /// The request finished; dropping the guard no longer cancels it.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            // A stopped engine has nothing left to cancel.
            let _ = self.link.tx.send(Command::Cancel(self.key));
        }
        self.inner.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a request could not be submitted.
#[derive(Debug)]
pub(crate) struct EngineDown;

impl Replica {
    /// Validates the configuration and starts the engine thread.
    pub fn new(config: ReplicaConfig) -> Result<Self, LiveError> {
        config.validate()?;
        let (frame_lateness, step_lateness) = if config.record_lateness {
            (
                Some(Arc::new(LatenessRecorder::default())),
                Some(Arc::new(LatenessRecorder::default())),
            )
        } else {
            (None, None)
        };
        let r = Replica {
            inner: Arc::new(Inner {
                config,
                link: Mutex::new(None),
                next_key: AtomicU64::new(1),
                outstanding: AtomicUsize::new(0),
                faults: Mutex::new(FaultConfig::default()),
                kv_factor: Mutex::new(1.0),
                frame_lateness,
                step_lateness,
            }),
        };
        r.start_engine()?;
        Ok(r)
    }

    /// The configuration it was started with.
    pub fn config(&self) -> &ReplicaConfig {
        &self.inner.config
    }

    /// Starts a fresh engine (a cold start: empty prefix cache, zeroed counters and
    /// histograms) if none is running.
    pub fn start_engine(&self) -> Result<(), LiveError> {
        let mut link = lock(&self.inner.link);
        if link.is_some() {
            return Ok(());
        }
        let config = &self.inner.config;
        let (tx, rx) = mpsc::channel();
        let published = Arc::new(Mutex::new(Published {
            stats: EngineStats::default(),
            metrics: ServerMetrics::new(config.metrics_flavor),
        }));
        let mut engine = Engine::new(config.setup.clone());
        engine.set_kv_capacity_factor(*lock(&self.inner.kv_factor));
        let lp = EngineLoop {
            engine,
            rx,
            published: published.clone(),
            clock: Clock {
                epoch: Instant::now(),
                scale: config.time_scale,
            },
            slots: Vec::new(),
            keys: HashMap::new(),
            metrics: ServerMetrics::new(config.metrics_flavor),
            step_no: 0,
            step_lateness: self.inner.step_lateness.clone(),
            outbox: Vec::new(),
        };
        std::thread::Builder::new()
            .name("sim-engine".into())
            .spawn(move || lp.run())
            .map_err(|e| LiveError::Io {
                context: "starting the engine thread".into(),
                source: e,
            })?;
        *link = Some(Arc::new(EngineLink { tx, published }));
        Ok(())
    }

    /// Stops the engine at once, as if its process died: every in-flight request fails
    /// (streams break) and new requests get 503 until [`Replica::start_engine`].
    pub fn kill_engine(&self) {
        if let Some(link) = lock(&self.inner.link).take() {
            let _ = link.tx.send(Command::Stop);
        }
    }

    /// True while an engine is running.
    pub fn is_running(&self) -> bool {
        lock(&self.inner.link).is_some()
    }

    fn link(&self) -> Option<Arc<EngineLink>> {
        lock(&self.inner.link).clone()
    }

    /// The engine's gauges and counters after its latest step; `None` while killed.
    pub fn stats(&self) -> Option<EngineStats> {
        self.link().map(|l| lock(&l.published).stats.clone())
    }

    /// Requests accepted by the HTTP layer and not yet finished or abandoned (for
    /// least-outstanding routing).
    pub fn outstanding(&self) -> usize {
        self.inner.outstanding.load(Ordering::Relaxed)
    }

    /// Scales the engine's usable KV capacity (fault injection; 1 = all of it). Kept for
    /// engines started later.
    pub fn set_kv_capacity_factor(&self, factor: f64) {
        let factor = if factor.is_finite() {
            factor.clamp(0.0, 1.0)
        } else {
            1.0
        };
        *lock(&self.inner.kv_factor) = factor;
        if let Some(link) = self.link() {
            let _ = link.tx.send(Command::KvFactor(factor));
        }
    }

    /// Replaces the injected HTTP-layer faults.
    pub fn set_faults(&self, faults: FaultConfig) {
        *lock(&self.inner.faults) = faults;
    }

    /// The injected HTTP-layer faults.
    pub fn faults(&self) -> FaultConfig {
        *lock(&self.inner.faults)
    }

    /// Benchmark instrumentation (only with `record_lateness`): lateness of token frames
    /// (handed to the HTTP layer − the step end the model scheduled them for) and of the
    /// engine thread's wake-ups (woke − step end).
    pub fn lateness(&self) -> Option<(LatenessSnapshot, LatenessSnapshot)> {
        match (&self.inner.frame_lateness, &self.inner.step_lateness) {
            (Some(f), Some(s)) => Some((f.snapshot(), s.snapshot())),
            _ => None,
        }
    }

    /// Forgets the lateness recorded so far (start of a measurement window).
    pub fn reset_lateness(&self) {
        for r in [&self.inner.frame_lateness, &self.inner.step_lateness]
            .into_iter()
            .flatten()
        {
            r.reset();
        }
    }

    pub(crate) fn frame_lateness(&self) -> Option<&Arc<LatenessRecorder>> {
        self.inner.frame_lateness.as_ref()
    }

    /// Renders `/metrics`; `None` while killed.
    pub fn metrics_text(&self) -> Option<String> {
        let link = self.link()?;
        let published = lock(&link.published).clone();
        let setup = &self.inner.config.setup;
        let exp = super::metrics::Exposition {
            flavor: self.inner.config.metrics_flavor,
            model: &setup.model,
            engine: "0",
            kv_capacity_tokens: setup.kv_capacity_tokens,
        };
        Some(super::metrics::render(
            &exp,
            &published,
            self.inner.frame_lateness.as_deref(),
        ))
    }

    /// A fresh request key.
    pub(crate) fn next_key(&self) -> u64 {
        self.inner.next_key.fetch_add(1, Ordering::Relaxed)
    }

    /// Hands a request to the engine. `every`: publish every this many tokens (0: only
    /// when finished).
    pub(crate) fn submit(
        &self,
        key: u64,
        req: NewRequest,
        arrival: Instant,
        every: u32,
        finish_stop: bool,
    ) -> Result<Ticket, EngineDown> {
        let link = self.link().ok_or(EngineDown)?;
        let inbox = Arc::new(Inbox::default());
        link.tx
            .send(Command::Submit(Submission {
                key,
                req,
                arrival,
                inbox: inbox.clone(),
                every,
                finish_stop,
            }))
            .map_err(|_| EngineDown)?;
        self.inner.outstanding.fetch_add(1, Ordering::Relaxed);
        Ok(Ticket {
            inbox,
            guard: CancelGuard {
                link,
                inner: self.inner.clone(),
                key,
                // A server that ignores disconnects never cancels on the client's behalf.
                armed: self.inner.config.abort_on_disconnect,
            },
        })
    }
}
