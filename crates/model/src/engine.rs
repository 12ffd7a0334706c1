//! One engine replica as a discrete-event model: continuous batching with chunked prefill,
//! a roofline step time, a sequence cap, KV-capacity admission, running requests first.
//!
//! The engine only advances when asked ([`Engine::step`]); the offline simulator drives it
//! with a virtual clock and the live server with a real one, so both share every rule.
//!
//! The offline simulator asks for bulk decoding ([`Engine::bulk`]): where every decoding
//! request is sure to get its token each step (reserved KV, a sequence cap no larger than
//! the token budget), a decoding request is a step counter and a finishing step in a heap
//! rather than a record touched every step, so a step costs its prefills, admissions and
//! finishes, not its batch. The steps, their times and every request's first and last
//! token are the same as one token at a time.
//!
//! With `kv_policy: reserve` and prefix caching off it is exactly the seed's model: each
//! step, running requests in admission order take one decode token or their next prefill
//! chunk from the token budget (a prefill chunk that finds the budget empty ends the pass),
//! then waiting requests are admitted while the budget lasts, the sequence cap allows and
//! prompt + output fit in the KV that is not reserved; the step costs
//! [`Setup::step_time`] of its tokens and of the context held before it; a request whose
//! prefill completes emits its first token at the end of that step.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

use super::setup::{KvPolicy, Setup};
use crate::workload::hashing::{FNV_OFFSET, GOLDEN_GAMMA, fnv1a, mix64};

/// A request handed to the engine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewRequest {
    /// Prompt tokens.
    pub input_len: u32,
    /// Output tokens to generate.
    pub output_len: u32,
    /// Chained hashes of the prompt's full blocks (`block_size` tokens each), for prefix
    /// caching; empty when the prompt shares nothing or caching is off.
    pub block_hashes: Vec<u64>,
}

/// Handle of a request inside one engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestId {
    slot: u32,
    generation: u32,
}

impl RequestId {
    /// The request's slot: a small index, reused once the request has left.
    pub fn slot(self) -> usize {
        self.slot as usize
    }
}

/// Something that happened to a request at the end of a step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenEvent {
    /// The request.
    pub id: RequestId,
    /// Output tokens generated so far, this one included.
    pub generated: u32,
    /// This is the request's last token; it has left the engine.
    pub finished: bool,
}

/// One executed step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// Engine time when the step started (seconds).
    pub start: f64,
    /// Engine time when it ended; its tokens are emitted then.
    pub end: f64,
    /// Tokens processed (decode tokens plus prefill chunks).
    pub tokens: u64,
}

/// Counters and gauges in the spirit of an engine's `/metrics`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineStats {
    /// Requests running (admitted, holding KV).
    pub running: usize,
    /// Requests waiting for admission.
    pub waiting: usize,
    /// Fraction of KV capacity held by running requests.
    pub kv_usage: f64,
    /// Prompt tokens of admitted requests (cache hits included).
    pub prompt_tokens_total: u64,
    /// Output tokens generated.
    pub generation_tokens_total: u64,
    /// Requests that generated all their tokens.
    pub request_success_total: u64,
    /// Requests preempted (their KV freed, to be recomputed).
    pub preemptions_total: u64,
    /// Prompt tokens looked up in the prefix cache.
    pub prefix_cache_queries_total: u64,
    /// Prompt tokens found in the prefix cache.
    pub prefix_cache_hits_total: u64,
    /// Cached blocks evicted to make room.
    pub prefix_cache_evictions_total: u64,
    /// Steps executed.
    pub steps_total: u64,
}

#[derive(Clone, Debug, Default)]
struct Seq {
    generation: u32,
    live: bool,
    input_len: u32,
    output_len: u32,
    /// Tokens to (re)compute before decoding: the prompt, plus generated tokens after a
    /// preemption.
    prefill_target: u32,
    computed: u32,
    generated: u32,
    /// `generated` when the current prefill began (0, or the count at preemption).
    generated_base: u32,
    /// KV held: tokens (reserve) or blocks (recompute).
    kv_held: u64,
    /// Tokens scheduled in the current step.
    scheduled: u32,
    /// Bulk decoding: the step (1-based count) that emitted the first token.
    first_step: u64,
}

impl Seq {
    fn context_tokens(&self) -> u64 {
        u64::from(self.computed) + u64::from(self.generated - self.generated_base)
    }
    fn decoding(&self) -> bool {
        self.computed >= self.prefill_target
    }
}

/// Block-granular LRU of prompt prefixes whose KV stays in free GPU memory.
#[derive(Debug, Default)]
struct PrefixCache {
    last_use: HashMap<u64, u64>,
    by_age: BTreeMap<u64, u64>,
    tick: u64,
}

impl PrefixCache {
    fn len(&self) -> u64 {
        self.last_use.len() as u64
    }

    /// Leading blocks of `hashes` present in the cache (each refreshed).
    fn lookup(&mut self, hashes: &[u64]) -> u32 {
        let mut hits = 0;
        for h in hashes {
            if !self.last_use.contains_key(h) {
                break;
            }
            self.touch(*h);
            hits += 1;
        }
        hits
    }

    fn touch(&mut self, h: u64) {
        self.tick += 1;
        if let Some(old) = self.last_use.insert(h, self.tick) {
            self.by_age.remove(&old);
        }
        self.by_age.insert(self.tick, h);
    }

    /// Evicts least recently used blocks until at most `capacity` remain; returns how many.
    fn shrink_to(&mut self, capacity: u64) -> u64 {
        let mut evicted = 0;
        while self.len() > capacity {
            let Some((_, h)) = self.by_age.pop_first() else {
                break;
            };
            self.last_use.remove(&h);
            evicted += 1;
        }
        evicted
    }
}

/// One simulated engine replica.
#[derive(Debug)]
pub struct Engine {
    setup: Setup,
    now: f64,
    seqs: Vec<Seq>,
    /// Prompt block hashes per slot (kept apart from the hot per-step fields).
    hashes: Vec<Vec<u64>>,
    /// Context tokens held by running requests (the memory term of the step time).
    context: u64,
    free_slots: Vec<u32>,
    waiting: VecDeque<u32>,
    running: Vec<u32>,
    /// KV in use: tokens (reserve) or blocks (recompute).
    kv_used: u64,
    /// KV capacity in the same unit.
    kv_capacity: u64,
    /// Capacity factor applied by fault injection (1 = all of it).
    kv_capacity_factor: f64,
    cache: PrefixCache,
    stats: EngineStats,
    events: Vec<TokenEvent>,
    batch: Vec<u32>,
    /// Bulk decoding's bookkeeping, when on.
    bulk: Option<BulkDecode>,
}

/// Running requests split for bulk decoding: `running` is always decoding requests first,
/// then those still in prefill (prefills complete in admission order).
#[derive(Debug, Default)]
struct BulkDecode {
    /// Running requests past their prefill; each takes one token per step.
    decoding: u64,
    /// Running requests in prefill, in admission order.
    prefilling: VecDeque<u32>,
    /// `(step of the last token, slot, generation)` of each decoding request, soonest first.
    finishes: BinaryHeap<Reverse<(u64, u32, u32)>>,
}

impl Engine {
    /// An idle engine at time zero. The setup must be valid ([`Setup::validate`]).
    pub fn new(setup: Setup) -> Self {
        let kv_capacity = match setup.kv_policy {
            KvPolicy::Reserve => setup.kv_capacity_tokens,
            KvPolicy::Recompute => setup.kv_capacity_tokens / u64::from(setup.block_size),
        };
        Engine {
            setup,
            now: 0.0,
            seqs: Vec::new(),
            hashes: Vec::new(),
            context: 0,
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            kv_used: 0,
            kv_capacity,
            kv_capacity_factor: 1.0,
            cache: PrefixCache::default(),
            stats: EngineStats::default(),
            events: Vec::new(),
            batch: Vec::new(),
            bulk: None,
        }
    }

    /// An idle engine that decodes in bulk where the setup allows it (reserved KV, and
    /// `max_num_seqs` no larger than `max_num_batched_tokens`), else one token at a time.
    /// In bulk, [`Engine::events`] holds each request's first and last token only; every
    /// token in between came one per step, at the end of each step from its first to its
    /// last ([`Engine::decodes_in_bulk`]).
    pub fn bulk(setup: Setup) -> Self {
        let bulk = setup.kv_policy == KvPolicy::Reserve
            && setup.max_num_seqs <= setup.max_num_batched_tokens;
        let mut engine = Engine::new(setup);
        if bulk {
            engine.bulk = Some(BulkDecode::default());
        }
        engine
    }

    /// True when decoding requests advance in bulk: their events are first and last
    /// tokens only, and each emits a token at the end of every step in between.
    pub fn decodes_in_bulk(&self) -> bool {
        self.bulk.is_some()
    }

    /// The configuration.
    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// Engine time in seconds.
    pub fn now(&self) -> f64 {
        self.now
    }

    /// Moves an idle engine's clock forward to `t` (never backwards).
    pub fn advance_to(&mut self, t: f64) {
        if t > self.now {
            self.now = t;
        }
    }

    /// True when nothing is waiting or running.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// Counters and gauges now.
    pub fn stats(&self) -> EngineStats {
        let mut s = self.stats.clone();
        s.running = self.running.len();
        s.waiting = self.waiting.len();
        s.kv_usage = if self.kv_capacity == 0 {
            0.0
        } else {
            self.kv_used as f64 / self.kv_capacity as f64
        };
        s
    }

    /// Token events of the last step, in batch order.
    pub fn events(&self) -> &[TokenEvent] {
        &self.events
    }

    /// Scales usable KV capacity (fault injection: 0.5 halves it). Requests already
    /// holding more keep it until they finish or are preempted.
    pub fn set_kv_capacity_factor(&mut self, factor: f64) {
        self.kv_capacity_factor = factor.clamp(0.0, 1.0);
    }

    fn usable_kv(&self) -> u64 {
        (self.kv_capacity as f64 * self.kv_capacity_factor) as u64
    }

    /// Queues a request; it arrives now.
    pub fn submit(&mut self, req: NewRequest) -> RequestId {
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.seqs.push(Seq::default());
                self.hashes.push(Vec::new());
                (self.seqs.len() - 1) as u32
            }
        };
        self.hashes[slot as usize] = req.block_hashes;
        let seq = &mut self.seqs[slot as usize];
        let generation = seq.generation.wrapping_add(1);
        *seq = Seq {
            generation,
            live: true,
            input_len: req.input_len.max(1),
            output_len: req.output_len.max(1),
            prefill_target: req.input_len.max(1),
            ..Seq::default()
        };
        self.waiting.push_back(slot);
        RequestId { slot, generation }
    }

    fn seq(&self, id: RequestId) -> Option<&Seq> {
        self.seqs
            .get(id.slot as usize)
            .filter(|s| s.live && s.generation == id.generation)
    }

    /// Output tokens a live request has generated, or `None` once it has left.
    pub fn generated(&self, id: RequestId) -> Option<u32> {
        self.seq(id).map(|s| self.generated_now(s))
    }

    /// Output tokens of a live request; in bulk, a decoding request's count is kept as
    /// the step of its first token (`first_step` is only ever set in bulk).
    fn generated_now(&self, seq: &Seq) -> u32 {
        if seq.first_step > 0 {
            // One token per step since the first; a request leaves at its last, so this
            // is at most `output_len`.
            (1 + self.stats.steps_total - seq.first_step) as u32
        } else {
            seq.generated
        }
    }

    /// Context tokens a running request holds.
    fn context_of(&self, slot: u32) -> u64 {
        let seq = &self.seqs[slot as usize];
        u64::from(seq.computed) + u64::from(self.generated_now(seq) - seq.generated_base)
    }

    /// Requests running now (admitted and holding KV), in admission order.
    pub fn running(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.running.iter().map(|&slot| RequestId {
            slot,
            generation: self.seqs[slot as usize].generation,
        })
    }

    /// Removes a request (client gone) and frees its KV. False if it had already left.
    pub fn cancel(&mut self, id: RequestId) -> bool {
        if self.seq(id).is_none() {
            return false;
        }
        if let Some(i) = self.running.iter().position(|&s| s == id.slot) {
            self.running.remove(i);
            self.context -= self.context_of(id.slot);
            self.release_kv(id.slot);
            if let Some(bulk) = self.bulk.as_mut() {
                // A decoding request's heap entry goes stale: its slot's generation moves on.
                if self.seqs[id.slot as usize].first_step > 0 {
                    bulk.decoding -= 1;
                } else {
                    bulk.prefilling.retain(|&s| s != id.slot);
                }
            }
        } else if let Some(i) = self.waiting.iter().position(|&s| s == id.slot) {
            self.waiting.remove(i);
        }
        self.retire(id.slot);
        true
    }

    fn retire(&mut self, slot: u32) {
        let seq = &mut self.seqs[slot as usize];
        seq.live = false;
        self.hashes[slot as usize] = Vec::new();
        self.free_slots.push(slot);
    }

    fn release_kv(&mut self, slot: u32) {
        let held = std::mem::take(&mut self.seqs[slot as usize].kv_held);
        self.kv_used -= held;
    }

    fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(u64::from(self.setup.block_size))
    }

    /// Runs one step if there is work: schedules, advances the clock by the step's time
    /// and records the tokens emitted (see [`Engine::events`]).
    pub fn step(&mut self) -> Option<Step> {
        self.events.clear();
        if self.is_idle() {
            return None;
        }
        if self.bulk.is_some() {
            return Some(self.step_in_bulk());
        }
        self.batch.clear();
        let mut budget = i64::from(self.setup.max_num_batched_tokens);
        let mut tokens: u64 = 0;

        // Running requests first, in admission order.
        let mut i = 0;
        while i < self.running.len() {
            let slot = self.running[i];
            let seq = &self.seqs[slot as usize];
            let n = if seq.decoding() {
                1
            } else {
                i64::from(seq.prefill_target - seq.computed).min(budget)
            };
            if n <= 0 {
                break;
            }
            if self.setup.kv_policy == KvPolicy::Recompute && !self.grow_kv(slot, n as u64) {
                // No room even after preempting everyone admitted after it: it was
                // preempted itself.
                continue;
            }
            self.seqs[slot as usize].scheduled = n as u32;
            self.batch.push(slot);
            budget -= n;
            tokens += n as u64;
            i += 1;
        }

        // Then admit waiting requests while budget, sequence cap and KV allow.
        self.admit_waiting(&mut budget, &mut tokens);

        let start = self.now;
        self.now += self.setup.step_time(tokens, self.context);
        self.stats.steps_total += 1;

        let mut finished_any = false;
        for bi in 0..self.batch.len() {
            let slot = self.batch[bi];
            let seq = &mut self.seqs[slot as usize];
            let n = std::mem::take(&mut seq.scheduled);
            if !seq.decoding() {
                seq.computed += n;
                self.context += u64::from(n);
                if !seq.decoding() {
                    continue; // chunked prefill not done: no token yet
                }
                if self.setup.prefix_caching {
                    for &h in &self.hashes[slot as usize] {
                        self.cache.touch(h);
                    }
                }
            }
            let seq = &mut self.seqs[slot as usize];
            seq.generated += 1;
            self.context += 1;
            let finished = seq.generated >= seq.output_len;
            let id = RequestId {
                slot,
                generation: seq.generation,
            };
            self.events.push(TokenEvent {
                id,
                generated: seq.generated,
                finished,
            });
            if finished {
                finished_any = true;
                self.context -= seq.context_tokens();
                self.release_kv(slot);
                self.retire(slot);
            }
        }
        self.stats.generation_tokens_total += self.events.len() as u64;
        if finished_any {
            self.drop_finished();
        }
        self.trim_cache();
        Some(Step {
            start,
            end: self.now,
            tokens,
        })
    }

    /// [`Engine::step`] in bulk: the same schedule, with decoding requests as a count.
    fn step_in_bulk(&mut self) -> Step {
        let Some(mut bulk) = self.bulk.take() else {
            unreachable!("only called in bulk mode");
        };
        self.batch.clear();
        // Every decoding request takes one token: they are at most max_num_seqs, which is
        // no more than the budget.
        let mut budget = i64::from(self.setup.max_num_batched_tokens) - bulk.decoding as i64;
        let mut tokens = bulk.decoding;

        // Then prefill chunks in admission order, as the running loop of one-by-one steps.
        for &slot in &bulk.prefilling {
            let seq = &self.seqs[slot as usize];
            let n = i64::from(seq.prefill_target - seq.computed).min(budget);
            if n <= 0 {
                break;
            }
            self.seqs[slot as usize].scheduled = n as u32;
            self.batch.push(slot);
            budget -= n;
            tokens += n as u64;
        }

        // Then admissions, exactly as one by one; they start in prefill.
        let admitted_from = self.batch.len();
        self.admit_waiting(&mut budget, &mut tokens);
        bulk.prefilling.extend(&self.batch[admitted_from..]);

        let start = self.now;
        self.now += self.setup.step_time(tokens, self.context);
        self.stats.steps_total += 1;
        let step = self.stats.steps_total;
        // Each decoding request's token joins the context.
        self.context += bulk.decoding;
        let mut emitted = bulk.decoding;

        for bi in 0..self.batch.len() {
            let slot = self.batch[bi];
            let seq = &mut self.seqs[slot as usize];
            let n = std::mem::take(&mut seq.scheduled);
            seq.computed += n;
            self.context += u64::from(n);
            if !seq.decoding() {
                continue; // chunked prefill not done: no token yet
            }
            if self.setup.prefix_caching {
                for &h in &self.hashes[slot as usize] {
                    self.cache.touch(h);
                }
            }
            // Prefills complete in admission order: this one is the oldest in prefill.
            debug_assert_eq!(bulk.prefilling.front(), Some(&slot));
            bulk.prefilling.pop_front();
            let seq = &mut self.seqs[slot as usize];
            seq.generated = 1;
            seq.first_step = step;
            self.context += 1;
            emitted += 1;
            let finished = seq.output_len <= 1;
            self.events.push(TokenEvent {
                id: RequestId {
                    slot,
                    generation: seq.generation,
                },
                generated: 1,
                finished,
            });
            if finished {
                let held = self.context_of(slot);
                self.context -= held;
                self.release_kv(slot);
                self.retire(slot);
            } else {
                let last = step + u64::from(seq.output_len) - 1;
                bulk.finishes.push(Reverse((last, slot, seq.generation)));
                bulk.decoding += 1;
            }
        }

        // Requests whose last token came with this step leave.
        while let Some(&Reverse((last, slot, generation))) = bulk.finishes.peek() {
            if last > step {
                break;
            }
            bulk.finishes.pop();
            let seq = &self.seqs[slot as usize];
            if !(seq.live && seq.generation == generation) {
                continue; // cancelled meanwhile
            }
            let generated = seq.output_len;
            self.events.push(TokenEvent {
                id: RequestId { slot, generation },
                generated,
                finished: true,
            });
            let held = self.context_of(slot);
            self.context -= held;
            self.release_kv(slot);
            self.retire(slot);
            bulk.decoding -= 1;
        }
        self.stats.generation_tokens_total += emitted;
        if self.events.iter().any(|e| e.finished) {
            self.drop_finished();
        }
        self.bulk = Some(bulk);
        self.trim_cache();
        Step {
            start,
            end: self.now,
            tokens,
        }
    }

    /// Admits waiting requests in order while the budget, the sequence cap and KV allow,
    /// adding each to `running` and the batch with its first chunk.
    fn admit_waiting(&mut self, budget: &mut i64, tokens: &mut u64) {
        while *budget > 0 && self.running.len() < self.setup.max_num_seqs as usize {
            let Some(&slot) = self.waiting.front() else {
                break;
            };
            if !self.admit(slot, *budget) {
                break;
            }
            self.waiting.pop_front();
            let n = self.seqs[slot as usize].scheduled;
            self.running.push(slot);
            self.batch.push(slot);
            *budget -= i64::from(n);
            *tokens += u64::from(n);
        }
    }

    /// Removes the requests that finished this step from `running` and counts them.
    fn drop_finished(&mut self) {
        let seqs = &self.seqs;
        let before = self.running.len();
        self.running.retain(|&s| seqs[s as usize].live);
        self.stats.request_success_total += (before - self.running.len()) as u64;
    }

    /// Tries to admit the waiting request in `slot` with `budget` tokens left this step;
    /// sets its scheduled chunk.
    fn admit(&mut self, slot: u32, budget: i64) -> bool {
        let bs = u64::from(self.setup.block_size);
        let usable = self.usable_kv();
        let seq = &self.seqs[slot as usize];
        let (target, base_generated) = (seq.prefill_target, seq.generated);
        let need_kv = match self.setup.kv_policy {
            KvPolicy::Reserve => u64::from(seq.input_len) + u64::from(seq.output_len),
            KvPolicy::Recompute => 0, // computed below from the first chunk
        };
        if self.setup.kv_policy == KvPolicy::Reserve && self.kv_used + need_kv > usable {
            return false;
        }
        // Prefix cache: leading prompt blocks already computed skip prefill, but at least
        // one token is always computed so the step produces the next token.
        let mut cached = 0;
        if self.setup.prefix_caching && !self.hashes[slot as usize].is_empty() {
            let hits = u64::from(self.cache.lookup(&self.hashes[slot as usize]));
            cached = (hits * bs).min(u64::from(target) - 1) as u32;
        }
        let chunk = i64::from(target - cached).min(budget) as u32;
        if self.setup.kv_policy == KvPolicy::Recompute {
            // Blocks for the cached prefix and the first chunk, with a 1% watermark so
            // running requests can still grow.
            let blocks = self.blocks_for(u64::from(cached) + u64::from(chunk));
            let watermark = self.kv_capacity / 100;
            if self.kv_used + blocks + watermark > usable {
                return false;
            }
            self.kv_used += blocks;
            self.seqs[slot as usize].kv_held = blocks;
        } else {
            self.kv_used += need_kv;
            self.seqs[slot as usize].kv_held = need_kv;
        }
        let seq = &mut self.seqs[slot as usize];
        seq.computed = cached;
        seq.generated_base = base_generated;
        seq.scheduled = chunk;
        self.context += u64::from(cached);
        self.stats.prompt_tokens_total += u64::from(target);
        if self.setup.prefix_caching {
            self.stats.prefix_cache_queries_total += u64::from(target);
            self.stats.prefix_cache_hits_total += u64::from(cached);
        }
        true
    }

    /// Recompute policy: makes room for `n` more tokens of the running request in `slot`,
    /// preempting the most recently admitted other requests as needed. False if `slot`
    /// itself had to be preempted.
    fn grow_kv(&mut self, slot: u32, n: u64) -> bool {
        let seq = &self.seqs[slot as usize];
        let need = self.blocks_for(seq.context_tokens() + n);
        let extra = need.saturating_sub(seq.kv_held);
        while self.kv_used + extra > self.usable_kv() {
            // The victim is the newest running request; it may be `slot` itself.
            let Some(&victim) = self.running.last() else {
                return false;
            };
            self.preempt(victim);
            if victim == slot {
                return false;
            }
        }
        self.kv_used += extra;
        self.seqs[slot as usize].kv_held += extra;
        true
    }

    fn preempt(&mut self, slot: u32) {
        if let Some(i) = self.running.iter().rposition(|&s| s == slot) {
            self.running.remove(i);
        }
        self.batch.retain(|&s| s != slot);
        self.context -= self.seqs[slot as usize].context_tokens();
        self.release_kv(slot);
        let seq = &mut self.seqs[slot as usize];
        seq.scheduled = 0;
        seq.computed = 0;
        seq.prefill_target = seq.input_len + seq.generated;
        seq.generated_base = seq.generated;
        self.waiting.push_front(slot);
        self.stats.preemptions_total += 1;
    }

    /// Cached prefixes live in free KV: evict the oldest when running requests need it.
    fn trim_cache(&mut self) {
        if !self.setup.prefix_caching {
            return;
        }
        let free_tokens = match self.setup.kv_policy {
            KvPolicy::Reserve => self.usable_kv().saturating_sub(self.kv_used),
            KvPolicy::Recompute => {
                self.usable_kv().saturating_sub(self.kv_used) * u64::from(self.setup.block_size)
            }
        };
        let free_blocks = free_tokens / u64::from(self.setup.block_size);
        self.stats.prefix_cache_evictions_total += self.cache.shrink_to(free_blocks);
    }
}

/// Chained hashes of the full `block_size` blocks of a token sequence (block i's hash
/// covers blocks 0..=i), as prefix caches key blocks.
pub fn block_hashes(tokens: &[u32], block_size: u32) -> Vec<u64> {
    let mut out = Vec::with_capacity(tokens.len() / block_size as usize);
    let mut h = FNV_OFFSET;
    for block in tokens.chunks_exact(block_size as usize) {
        // FNV-1a over the token ids, continuing from the previous block's hash.
        for &t in block {
            h = fnv1a(h, &t.to_le_bytes());
        }
        out.push(h);
    }
    out
}

/// Chained hashes for a synthetic prompt whose first `prefix_len` tokens are shared prefix
/// number `prefix_id` and whose rest is unique to request `unique_id`.
pub fn synthetic_block_hashes(
    prefix_id: u64,
    prefix_len: u32,
    unique_id: u64,
    input_len: u32,
    block_size: u32,
) -> Vec<u64> {
    let blocks = input_len / block_size;
    let shared = prefix_len.min(input_len) / block_size;
    (0..blocks)
        .map(|i| {
            let owner = if i < shared {
                prefix_id
            } else {
                unique_id | (1 << 63)
            };
            // A hash of (owner, block index): block i of a prefix is the same content in
            // every request that shares it.
            mix64(
                owner
                    .wrapping_mul(GOLDEN_GAMMA)
                    .wrapping_add(u64::from(i).wrapping_mul(0xBF58_476D_1CE4_E5B9)),
            )
        })
        .collect()
}
