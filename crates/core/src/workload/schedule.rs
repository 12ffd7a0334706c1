//! Request schedules: exact per-class counts, shuffled with the recorded seed, then
//! inter-arrival gaps from the arrival process. The same spec gives the same schedule, byte
//! for byte, on any machine.
//!
//! Random numbers: PCG64 (`rand_pcg::Pcg64`, 128-bit LCG with XSL-RR output) seeded with
//! `SeedableRng::seed_from_u64`; exponential and gamma gaps from `rand_distr` 0.6. Versions
//! are pinned by `Cargo.lock`, and `schedule_hash` of a reference schedule is pinned by a
//! test, so an upgrade that changed a draw would fail CI instead of silently changing runs.
//!
//! A schedule is built in blocks of `requests`: block 0 is the initial schedule; when a
//! class ends with too few successes the run continues with block 1, 2, ... (each with its
//! own exact class counts and a seed derived from the recorded one), on the same timeline.

use std::path::Path;

use rand::{Rng, RngExt, SeedableRng};
use rand_distr::{Distribution, Exp, Gamma};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

use super::hashing::{FNV_OFFSET, GOLDEN_GAMMA, fnv1a, mix64};
use super::stratified_counts;

/// Inter-arrival process of an open-loop schedule.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrival {
    /// Exponential gaps (a Poisson process).
    Poisson,
    /// Gamma gaps of the given shape with the same mean (1 = Poisson, below 1 burstier).
    Gamma {
        /// Gamma shape.
        shape: f64,
    },
    /// Equal gaps.
    Constant,
    /// Recorded arrivals; the rate is ignored.
    Trace(Vec<TraceEntry>),
}

/// One arrival of a recorded trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceEntry {
    /// Seconds from the start of the trace.
    pub at_s: f64,
    /// Class name; `None` draws the class from the schedule's shuffled counts.
    pub class: Option<String>,
    /// Prompt tokens, overriding the class's.
    pub input_tokens: Option<u32>,
    /// Output tokens, overriding the class's.
    pub output_tokens: Option<u32>,
}

/// One class as the schedule sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleClass {
    /// Class name.
    pub name: String,
    /// Share of requests.
    pub mix: f64,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens (the mean when lengths vary).
    pub output_tokens: u32,
}

/// Prompts that start with one of a pool of shared prefixes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SharedPrefix {
    /// Distinct prefixes.
    pub pool: u32,
    /// Tokens of each prefix (capped below the prompt length).
    pub tokens: u32,
    /// Zipf exponent of the prefix popularity (0 = uniform).
    pub zipf: f64,
}

/// Everything that determines a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleSpec {
    /// Classes with their mix.
    pub classes: Vec<ScheduleClass>,
    /// Requests per block (the initial schedule).
    pub requests: u64,
    /// Recorded seed.
    pub seed: u64,
    /// Arrival process.
    pub arrival: Arrival,
    /// Output lengths vary uniformly within ±this fraction of the class's (0 = fixed).
    pub output_jitter: f64,
    /// Shared prompt prefixes, if any.
    pub shared_prefix: Option<SharedPrefix>,
}

/// One scheduled request.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScheduledRequest {
    /// Position in the whole schedule (0-based, across blocks).
    pub index: u64,
    /// Send time, seconds from the start of the run.
    pub at_s: f64,
    /// Class index.
    pub class: usize,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
    /// Shared prefix id, if the prompt has one.
    pub prefix: Option<u32>,
}

/// The most requests one schedule block may hold (`client.initial_scheduled_requests`, or
/// the load generator's `--requests`). A block is built in memory before its point starts
/// (about 40 bytes a request, more in the records it produces), so no block may be
/// unbounded: a million is over 16 minutes at 1,000 requests per second, and a point that
/// needs more time continues the schedule in further blocks.
pub const MAX_SCHEDULED_REQUESTS: u64 = 1_000_000;

/// Why a schedule could not be built.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum ScheduleError {
    /// The rate is not a positive number.
    #[error("the arrival rate must be positive, got {0}")]
    Rate(f64),
    /// The gamma shape is not a positive number.
    #[error("the gamma burstiness shape must be positive, got {0}")]
    Shape(f64),
    /// A trace names a class the workload does not have.
    #[error("trace row {row}: unknown class `{class}`")]
    TraceClass {
        /// 0-based trace row.
        row: usize,
        /// The class name.
        class: String,
    },
    /// The trace is empty.
    #[error("the trace has no arrivals")]
    EmptyTrace,
    /// A block of more requests than [`MAX_SCHEDULED_REQUESTS`].
    #[error("{0} requests per schedule block is over the limit of {MAX_SCHEDULED_REQUESTS}")]
    TooManyRequests(u64),
}

/// The seed of block `block` of a schedule recorded with `seed` (block 0 uses the seed).
fn block_seed(seed: u64, block: u64) -> u64 {
    if block == 0 {
        seed
    } else {
        // Distinct, well-mixed streams per block.
        mix64(seed ^ block.wrapping_mul(GOLDEN_GAMMA))
    }
}

/// Builds blocks `0..blocks` of the schedule at `rate` requests per second.
pub fn build_schedule(
    spec: &ScheduleSpec,
    rate: f64,
    blocks: u64,
) -> Result<Vec<ScheduledRequest>, ScheduleError> {
    let mut out = Vec::new();
    for block in 0..blocks {
        let start = out.last().map_or(0.0, |r: &ScheduledRequest| r.at_s);
        out.extend(build_block(spec, rate, block, start, out.len() as u64)?);
    }
    Ok(out)
}

/// Block `block` of the schedule, starting after time `start` with index `first_index`.
pub fn build_block(
    spec: &ScheduleSpec,
    rate: f64,
    block: u64,
    start: f64,
    first_index: u64,
) -> Result<Vec<ScheduledRequest>, ScheduleError> {
    let mut rng = Pcg64::seed_from_u64(block_seed(spec.seed, block));
    if let Arrival::Trace(entries) = &spec.arrival {
        return trace_block(spec, entries, &mut rng, start, first_index);
    }
    if !(rate.is_finite() && rate > 0.0) {
        return Err(ScheduleError::Rate(rate));
    }
    if spec.requests > MAX_SCHEDULED_REQUESTS {
        return Err(ScheduleError::TooManyRequests(spec.requests));
    }
    let classes = shuffled_classes(spec, spec.requests, &mut rng);
    // Both distributions get a positive, finite rate (checked above) and shape (below).
    let exp = Exp::new(rate).map_err(|_| ScheduleError::Rate(rate))?;
    let gamma = match spec.arrival {
        Arrival::Gamma { shape } => {
            if !(shape.is_finite() && shape > 0.0) {
                return Err(ScheduleError::Shape(shape));
            }
            Some(Gamma::new(shape, 1.0 / (shape * rate)).map_err(|_| ScheduleError::Shape(shape))?)
        }
        _ => None,
    };
    let mut t = start;
    let mut out = Vec::with_capacity(classes.len());
    for (k, class) in classes.into_iter().enumerate() {
        t += match (&spec.arrival, &gamma) {
            (Arrival::Gamma { .. }, Some(g)) => g.sample(&mut rng),
            (Arrival::Constant, _) => 1.0 / rate,
            _ => exp.sample(&mut rng),
        };
        out.push(request(
            spec,
            &mut rng,
            first_index + k as u64,
            t,
            class,
            None,
            None,
        ));
    }
    Ok(out)
}

fn shuffled_classes(spec: &ScheduleSpec, requests: u64, rng: &mut Pcg64) -> Vec<usize> {
    let mixes: Vec<f64> = spec.classes.iter().map(|c| c.mix).collect();
    let counts = stratified_counts(&mixes, requests);
    let mut classes: Vec<usize> = counts
        .iter()
        .enumerate()
        .flat_map(|(i, &n)| std::iter::repeat_n(i, n as usize))
        .collect();
    for i in (1..classes.len()).rev() {
        classes.swap(i, rng.random_range(0..=i));
    }
    classes
}

fn request(
    spec: &ScheduleSpec,
    rng: &mut Pcg64,
    index: u64,
    at_s: f64,
    class: usize,
    input: Option<u32>,
    output: Option<u32>,
) -> ScheduledRequest {
    let c = &spec.classes[class];
    let output_tokens =
        output.unwrap_or_else(|| jittered(rng, c.output_tokens, spec.output_jitter));
    let prefix = spec.shared_prefix.map(|p| prefix_draw(rng, p));
    ScheduledRequest {
        index,
        at_s,
        class,
        input_tokens: input.unwrap_or(c.input_tokens),
        output_tokens,
        prefix,
    }
}

fn jittered(rng: &mut impl Rng, mean: u32, jitter: f64) -> u32 {
    if jitter <= 0.0 {
        return mean;
    }
    let lo = (f64::from(mean) * (1.0 - jitter)).round().max(1.0);
    let hi = (f64::from(mean) * (1.0 + jitter)).round().max(lo);
    rng.random_range(lo as u32..=hi as u32)
}

/// A prefix id in `0..pool`, uniform or Zipf-distributed (id 0 the most popular).
fn prefix_draw(rng: &mut impl Rng, p: SharedPrefix) -> u32 {
    let pool = p.pool.max(1);
    if p.zipf <= 0.0 {
        return rng.random_range(0..pool);
    }
    // Inverse CDF over the (small) pool: weights 1 / (k + 1)^s.
    let total: f64 = (0..pool).map(|k| 1.0 / f64::from(k + 1).powf(p.zipf)).sum();
    let mut u = rng.random::<f64>() * total;
    for k in 0..pool {
        u -= 1.0 / f64::from(k + 1).powf(p.zipf);
        if u <= 0.0 {
            return k;
        }
    }
    pool - 1
}

fn trace_block(
    spec: &ScheduleSpec,
    entries: &[TraceEntry],
    rng: &mut Pcg64,
    start: f64,
    first_index: u64,
) -> Result<Vec<ScheduledRequest>, ScheduleError> {
    if entries.is_empty() {
        return Err(ScheduleError::EmptyTrace);
    }
    let unnamed = entries.iter().filter(|e| e.class.is_none()).count() as u64;
    let mut drawn = shuffled_classes(spec, unnamed, rng).into_iter();
    let t0 = entries[0].at_s;
    // A continued trace replays after the previous block, one mean gap later.
    let offset = if first_index == 0 {
        0.0
    } else {
        start + trace_mean_gap(entries)
    };
    let mut out = Vec::with_capacity(entries.len());
    for (row, e) in entries.iter().enumerate() {
        let class = match &e.class {
            Some(name) => spec
                .classes
                .iter()
                .position(|c| &c.name == name)
                .ok_or_else(|| ScheduleError::TraceClass {
                    row,
                    class: name.clone(),
                })?,
            // As many draws as unnamed rows were made above.
            None => drawn.next().unwrap_or(0),
        };
        out.push(request(
            spec,
            rng,
            first_index + row as u64,
            offset + (e.at_s - t0),
            class,
            e.input_tokens,
            e.output_tokens,
        ));
    }
    Ok(out)
}

fn trace_mean_gap(entries: &[TraceEntry]) -> f64 {
    match (entries.first(), entries.last()) {
        (Some(a), Some(b)) if entries.len() > 1 => (b.at_s - a.at_s) / (entries.len() - 1) as f64,
        _ => 0.0,
    }
}

/// The requests of shard `shard` of `shards`: every request whose index is `shard` modulo
/// `shards`, on the global timeline. The shards are disjoint and their union is the whole.
pub fn shard(schedule: &[ScheduledRequest], shard: u32, shards: u32) -> Vec<ScheduledRequest> {
    schedule
        .iter()
        .filter(|r| r.index % u64::from(shards.max(1)) == u64::from(shard))
        .cloned()
        .collect()
}

/// FNV-1a over the canonical bytes of a schedule (index, time bits, class, lengths,
/// prefix): equal hashes mean byte-identical schedules.
pub fn schedule_hash(schedule: &[ScheduledRequest]) -> u64 {
    let mut h = FNV_OFFSET;
    let mut eat = |bytes: &[u8]| h = fnv1a(h, bytes);
    for r in schedule {
        eat(&r.index.to_le_bytes());
        eat(&r.at_s.to_bits().to_le_bytes());
        eat(&(r.class as u64).to_le_bytes());
        eat(&r.input_tokens.to_le_bytes());
        eat(&r.output_tokens.to_le_bytes());
        eat(&r.prefix.map_or(u64::MAX, u64::from).to_le_bytes());
    }
    h
}

/// Why a trace file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("cannot read trace {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A bad row.
    #[error("{path}:{line}: column {column}: {message}")]
    Row {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// Column name.
        column: String,
        /// What is wrong.
        message: String,
    },
}

/// Reads a trace CSV: a header with `timestamp_s` (required) and optional `class`,
/// `input_tokens`, `output_tokens`; timestamps must not decrease.
pub fn read_trace(path: &Path) -> Result<Vec<TraceEntry>, TraceError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: shown.clone(),
        source,
    })?;
    parse_trace(&text, &shown)
}

/// Parses trace CSV text; `path` names it in errors.
pub fn parse_trace(text: &str, path: &str) -> Result<Vec<TraceEntry>, TraceError> {
    let err = |line: usize, column: &str, message: String| TraceError::Row {
        path: path.to_owned(),
        line,
        column: column.to_owned(),
        message,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Err(err(1, "timestamp_s", "the trace is empty".into()));
    };
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |n: &str| names.iter().position(|c| *c == n);
    let ts = col("timestamp_s").ok_or_else(|| err(1, "timestamp_s", "missing column".into()))?;
    let (class, input, output) = (col("class"), col("input_tokens"), col("output_tokens"));
    let mut out: Vec<TraceEntry> = Vec::new();
    for (i, line) in lines {
        let n = i + 1;
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |c: usize, name: &str| {
            fields
                .get(c)
                .copied()
                .ok_or_else(|| err(n, name, "missing value".into()))
        };
        let at_s: f64 = get(ts, "timestamp_s")?
            .parse()
            .map_err(|_| err(n, "timestamp_s", "not a number".into()))?;
        if !at_s.is_finite() || out.last().is_some_and(|p| at_s < p.at_s) {
            return Err(err(
                n,
                "timestamp_s",
                format!("{at_s} is not finite or goes back in time"),
            ));
        }
        let count = |c: Option<usize>, name: &str| -> Result<Option<u32>, TraceError> {
            match c {
                None => Ok(None),
                Some(c) => match get(c, name)? {
                    "" => Ok(None),
                    v => v
                        .parse::<u32>()
                        .map(Some)
                        .map_err(|_| err(n, name, format!("`{v}` is not a token count"))),
                },
            }
        };
        out.push(TraceEntry {
            at_s,
            class: match class {
                Some(c) => Some(get(c, "class")?.to_owned()).filter(|s| !s.is_empty()),
                None => None,
            },
            input_tokens: count(input, "input_tokens")?,
            output_tokens: count(output, "output_tokens")?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed_spec() -> ScheduleSpec {
        let class = |name: &str, mix, input, output| ScheduleClass {
            name: name.into(),
            mix,
            input_tokens: input,
            output_tokens: output,
        };
        ScheduleSpec {
            classes: vec![
                class("interactive", 0.7, 1024, 128),
                class("long_context", 0.2, 8192, 256),
                class("generation_heavy", 0.1, 512, 1024),
            ],
            requests: 22_000,
            seed: 20_260_829,
            arrival: Arrival::Poisson,
            output_jitter: 0.0,
            shared_prefix: None,
        }
    }

    /// Every caller (a manifest, the load generator's `--requests`, the operator's Job) is
    /// held to the same block size, refused before anything is allocated.
    #[test]
    fn a_block_over_the_limit_is_refused() {
        let mut spec = seed_spec();
        spec.requests = u64::MAX;
        assert_eq!(
            build_schedule(&spec, 24.0, 1),
            Err(ScheduleError::TooManyRequests(u64::MAX))
        );
        spec.requests = MAX_SCHEDULED_REQUESTS + 1;
        assert!(build_block(&spec, 24.0, 0, 0.0, 0).is_err());
    }

    #[test]
    fn exact_class_counts_and_a_pinned_hash() {
        let s = build_schedule(&seed_spec(), 24.0, 1).unwrap();
        let count = |c| s.iter().filter(|r| r.class == c).count();
        assert_eq!((count(0), count(1), count(2)), (15_400, 4_400, 2_200));
        assert!(s.windows(2).all(|w| w[0].at_s <= w[1].at_s));
        let mean_gap = s.last().unwrap().at_s / s.len() as f64;
        assert!((mean_gap - 1.0 / 24.0).abs() < 0.001, "{mean_gap}");
        // Pinned: a change of RNG, distribution or algorithm must be deliberate.
        assert_eq!(
            schedule_hash(&s),
            1_404_001_268_411_812_647,
            "schedule hash changed"
        );
    }

    #[test]
    fn same_seed_same_schedule_other_seed_other_schedule() {
        let a = build_schedule(&seed_spec(), 24.0, 1).unwrap();
        assert_eq!(
            schedule_hash(&a),
            schedule_hash(&build_schedule(&seed_spec(), 24.0, 1).unwrap())
        );
        let mut other = seed_spec();
        other.seed += 1;
        assert_ne!(
            schedule_hash(&a),
            schedule_hash(&build_schedule(&other, 24.0, 1).unwrap())
        );
    }

    #[test]
    fn continuing_keeps_the_initial_schedule_and_its_timeline() {
        let mut spec = seed_spec();
        spec.requests = 1000;
        let one = build_schedule(&spec, 10.0, 1).unwrap();
        let two = build_schedule(&spec, 10.0, 2).unwrap();
        assert_eq!(&two[..1000], &one[..]);
        assert_eq!(two.len(), 2000);
        assert!(two[1000].at_s > one[999].at_s);
        assert_eq!(two[1500].index, 1500);
        assert_eq!(two[1000..].iter().filter(|r| r.class == 2).count(), 100);
    }

    #[test]
    fn shards_are_disjoint_and_cover_the_schedule() {
        let s = build_schedule(&seed_spec(), 24.0, 1).unwrap();
        let parts: Vec<_> = (0..3).map(|i| shard(&s, i, 3)).collect();
        assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), s.len());
        let mut merged: Vec<_> = parts.concat();
        merged.sort_by_key(|r| r.index);
        assert_eq!(merged, s);
        assert_eq!(parts[1][0].at_s, s[1].at_s);
    }

    #[test]
    fn gamma_and_constant_keep_the_mean_rate() {
        let mut spec = seed_spec();
        spec.requests = 20_000;
        spec.arrival = Arrival::Gamma { shape: 0.25 };
        let s = build_schedule(&spec, 10.0, 1).unwrap();
        let mean_gap = s.last().unwrap().at_s / s.len() as f64;
        assert!((mean_gap - 0.1).abs() < 0.01, "{mean_gap}");
        spec.arrival = Arrival::Constant;
        let s = build_schedule(&spec, 10.0, 1).unwrap();
        assert!((s[1].at_s - s[0].at_s - 0.1).abs() < 1e-12);
        assert_eq!(
            build_schedule(&spec, 0.0, 1).unwrap_err(),
            ScheduleError::Rate(0.0)
        );
    }

    #[test]
    fn traces_replay_times_classes_and_lengths() {
        let trace = parse_trace(
            "timestamp_s,class,input_tokens,output_tokens\n10.0,long_context,,\n10.5,,100,7\n12,,,\n",
            "t.csv",
        )
        .unwrap();
        let mut spec = seed_spec();
        spec.requests = 3;
        spec.arrival = Arrival::Trace(trace);
        let s = build_schedule(&spec, 1.0, 1).unwrap();
        assert_eq!(
            s.iter().map(|r| r.at_s).collect::<Vec<_>>(),
            [0.0, 0.5, 2.0]
        );
        assert_eq!(s[0].class, 1);
        assert_eq!((s[1].input_tokens, s[1].output_tokens), (100, 7));
        let err = parse_trace("timestamp_s\n1\n0.5\n", "t.csv")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "t.csv:3: column timestamp_s: 0.5 is not finite or goes back in time"
        );
        let err = parse_trace("at\n1\n", "t.csv").unwrap_err().to_string();
        assert!(err.contains("missing column"), "{err}");
    }

    #[test]
    fn zipf_prefixes_favour_the_first() {
        let mut spec = seed_spec();
        spec.requests = 5000;
        spec.shared_prefix = Some(SharedPrefix {
            pool: 8,
            tokens: 256,
            zipf: 1.2,
        });
        let s = build_schedule(&spec, 10.0, 1).unwrap();
        let count = |p| s.iter().filter(|r| r.prefix == Some(p)).count();
        assert!(count(0) > 2 * count(3), "{} vs {}", count(0), count(3));
        assert!(s.iter().all(|r| r.prefix.is_some_and(|p| p < 8)));
    }
}
