//! The bodies of the fuzz targets: one function per input parser, each taking arbitrary
//! bytes. They are shared by the cargo-fuzz crate under `fuzz/` (libFuzzer, nightly: one
//! `fuzz_target!` per function) and by the stable corpus replay test (`tests/it/fuzz.rs`,
//! which `cargo test` and so `.ci/run` run), so both exercise exactly the same code.
//!
//! Every function must return for every input without panicking, hanging or allocating
//! without bound. Beyond that, each asserts properties of the parser's answer, so that a
//! wrong answer fails as loudly as a crash: a rejection names where (file, line, column or
//! field path), a streamed parse gives the same events however the stream is cut, and what
//! a successful parse hands on can be used by the code after it.
//!
//! | target            | parser                                                         |
//! |-------------------|----------------------------------------------------------------|
//! | `sse`             | [`SseParser`] fed in fuzzer-chosen pieces, [`parse_event`]      |
//! | `requests_csv`    | [`read_requests`], then [`PointSummary::finish`]                |
//! | `prometheus_text` | [`engine_metrics::parse`], [`detect`], [`parse_targets`]        |
//! | `manifest_yaml`   | [`parse_manifest`]                                               |
//! | `benchmark_yaml`  | `goodput lint`'s path: [`yaml_documents`], [`parse_benchmark_document`] |
//! | `trace_csv`       | [`parse_trace`], then a trace schedule ([`build_schedule`])     |
//!
//! [`engine_metrics::parse`]: crate::engine_metrics::parse()

use std::path::Path;
use std::sync::OnceLock;

use crate::analysis::{CsvError, GateConfig, PointSummary, QueueTrend, read_requests};
use crate::api::{
    BenchmarkError, LoadedBenchmark, document_name, is_benchmark_document, parse_benchmark,
    parse_benchmark_document, yaml_documents,
};
use crate::engine_metrics::profile::values;
use crate::engine_metrics::scrape::metrics_url;
use crate::engine_metrics::{TargetsError, detect, parse_targets};
use crate::loadgen::sse::{
    DEFAULT_MAX_EVENT_BYTES, MAX_ERROR_MESSAGE_BYTES, SseError, SseParser, StreamEvent, parse_event,
};
use crate::workload::schedule::{
    Arrival, ScheduleError, ScheduleSpec, SharedPrefix, TraceError, build_schedule, parse_trace,
};
use crate::workload::{ManifestError, Severity, parse_manifest, seed_manifest};

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// Every target, by name: the name is its folder under `fuzz/corpus/` and its file under
/// `fuzz/fuzz_targets/`.
pub const TARGETS: [(&str, Target); 6] = [
    ("sse", sse),
    ("requests_csv", requests_csv),
    ("prometheus_text", prometheus_text),
    ("manifest_yaml", manifest_yaml),
    ("benchmark_yaml", benchmark_yaml),
    ("trace_csv", trace_csv),
];

// ---------------------------------------------------------------------------------------
// SSE

/// The SSE decoder and the payload parser.
///
/// Input layout: byte 0 is a control byte, its low nibble `k` the number of piece lengths
/// that follow and its high nibble the event limit (0: the default, `n`: `16 n` bytes);
/// then `k` bytes, the lengths of the pieces the stream is fed in (repeated until the
/// stream is used up; 0 feeds an empty piece); the rest is the stream. The stream is also
/// fed whole and byte by byte: wherever all three succeed they must give the same events.
/// Every event, and the stream itself, goes through [`parse_event`].
pub fn sse(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let k = usize::from(control & 0x0f).min(rest.len());
    let (lens, stream) = rest.split_at(k);
    let limit = match control >> 4 {
        0 => DEFAULT_MAX_EVENT_BYTES,
        n => 16 * usize::from(n),
    };

    let whole = sse_events(limit, &[stream]);
    let pieces = cut(stream, lens);
    let split = sse_events(limit, &pieces);
    let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
    let bytewise = sse_events(limit, &bytewise);
    if let (Ok(a), Ok(b)) = (&whole, &split) {
        assert_eq!(a, b, "pieces of lengths {lens:?} changed the events");
    }
    if let (Ok(a), Ok(b)) = (&whole, &bytewise) {
        assert_eq!(a, b, "feeding byte by byte changed the events");
    }
    // A piece-wise parse only ever fails where the whole one does or a carried-over line
    // (counted with its field name) passes the limit; never the other way round.
    if whole.is_err() {
        assert!(split.is_err() && bytewise.is_err(), "{whole:?} {split:?}");
    }

    for event in whole.iter().flatten() {
        check_event(event);
    }
    check_event(stream);
}

/// `stream` cut into pieces of the given lengths, cycled; one piece when `lens` is empty.
fn cut<'a>(stream: &'a [u8], lens: &[u8]) -> Vec<&'a [u8]> {
    if lens.is_empty() {
        return vec![stream];
    }
    let mut pieces = Vec::new();
    let mut at = 0;
    let mut next = lens.iter().cycle();
    // Empty pieces are fed too, but every round of `lens` advances, so this ends.
    let all_zero = lens.iter().all(|&l| l == 0);
    while at < stream.len() {
        let len = next.next().map_or(1, |&l| usize::from(l));
        let end = (at + len).min(stream.len());
        pieces.push(&stream[at..end]);
        at = end;
        if all_zero {
            pieces.push(&stream[at..]);
            break;
        }
    }
    pieces
}

/// Feeds `pieces` to a fresh parser, then finishes; every payload it hands on is within
/// the limit. A failed parser stays failed; a finished one reads the same stream the same
/// way again.
fn sse_events(limit: usize, pieces: &[&[u8]]) -> Result<Vec<Vec<u8>>, SseError> {
    let mut p = SseParser::with_limit(limit);
    let first = run_parser(&mut p, limit, pieces);
    match &first {
        Ok(events) => {
            assert!(!p.has_partial(), "a finished parser holds nothing");
            assert_eq!(
                run_parser(&mut p, limit, pieces).as_ref(),
                Ok(events),
                "a finished parser reads the stream again the same way"
            );
        }
        Err(e) => {
            assert_eq!(*e, SseError::EventTooLarge { limit });
            assert_eq!(p.feed(b"data: x\n\n", &mut |_| {}), Err(e.clone()));
            assert_eq!(p.finish(&mut |_| {}), Err(e.clone()));
        }
    }
    first
}

fn run_parser(p: &mut SseParser, limit: usize, pieces: &[&[u8]]) -> Result<Vec<Vec<u8>>, SseError> {
    let mut out = Vec::new();
    {
        let mut push = |d: &[u8]| {
            assert!(
                d.len() <= limit,
                "an event of {} bytes passed the limit",
                d.len()
            );
            out.push(d.to_vec());
        };
        for piece in pieces {
            p.feed(piece, &mut push)?;
        }
        p.finish(&mut push)?;
    }
    Ok(out)
}

/// One payload through [`parse_event`].
fn check_event(payload: &[u8]) {
    match parse_event(payload) {
        Ok(None) => assert!(payload.trim_ascii().is_empty()),
        Ok(Some(StreamEvent::Done)) => assert_eq!(payload.trim_ascii(), b"[DONE]"),
        Ok(Some(StreamEvent::Error(message))) => {
            assert!(message.len() <= MAX_ERROR_MESSAGE_BYTES);
        }
        Ok(Some(StreamEvent::Chunk(chunk))) => {
            // Decoded text is never longer than its JSON spelling.
            assert!(chunk.content_len <= payload.len());
            if let Some(reason) = &chunk.finish_reason {
                assert!(reason.len() <= payload.len());
            }
        }
        Err(e) => assert!(!e.reason.is_empty()),
    }
}

// ---------------------------------------------------------------------------------------
// requests.csv

const REQUESTS_PATH: &str = "fuzz/requests.csv";

/// The seed manifest's gate (classes `interactive`, `long_context`, `generation_heavy`).
fn seed_gate() -> GateConfig {
    static GATE: OnceLock<GateConfig> = OnceLock::new();
    GATE.get_or_init(|| seed_manifest().gate_config()).clone()
}

/// [`read_requests`] over the bytes, judged by the seed manifest's gate; rows that read
/// are finished into a report. A rejection names the file, and a bad row its line and
/// column.
pub fn requests_csv(data: &[u8]) {
    let path = Path::new(REQUESTS_PATH);
    let mut summary = PointSummary::new(seed_gate());
    match read_requests(data, path, &mut summary) {
        Ok(()) => {
            let report = summary.finish(60.0, QueueTrend::Flat);
            assert!(report.is_ok(), "{report:?}");
        }
        Err(e) => {
            let message = e.to_string();
            assert!(message.starts_with(REQUESTS_PATH), "{message}");
            match e {
                CsvError::Row { line, column, .. } => {
                    assert!(line >= 1 && column >= 1, "{message}");
                }
                CsvError::Malformed { line, .. } => assert!(line >= 1, "{message}"),
                CsvError::Io { .. } => panic!("reading a slice cannot fail: {message}"),
                CsvError::Empty { .. } | CsvError::MissingColumns { .. } => {}
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Prometheus text

/// A `/metrics` page as the scraper reads it (the body decoded lossily): parsed, its engine
/// detected and its concept values read; and the same text as a target list.
pub fn prometheus_text(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines = text.lines().count();
    let page = crate::engine_metrics::parse(&text);
    assert_eq!(page.skipped_lines > 0, page.first_error.is_some());
    if let Some(e) = &page.first_error {
        assert!((1..=lines).contains(&e.line), "{e} of {lines} lines");
    }
    assert!(page.samples.len() + page.skipped_lines <= lines);
    for sample in &page.samples {
        assert!(!sample.name.is_empty());
    }
    if let Some(detected) = detect(&page.samples) {
        let _ = values(&page.samples, detected.profile());
    }

    match parse_targets(&text) {
        Ok(urls) => {
            for url in urls {
                assert!(url.starts_with("http://") || url.starts_with("https://"));
                assert!(metrics_url(&url).ends_with("/metrics"));
            }
        }
        Err(e @ TargetsError::BadUrl { line, .. }) => {
            assert!((1..=lines).contains(&line), "{e}");
            assert!(e.to_string().starts_with(&format!("line {line}: ")));
        }
        Err(e @ TargetsError::Read { .. }) => panic!("parsing text cannot fail to read: {e}"),
    }
}

// ---------------------------------------------------------------------------------------
// Manifest and CapacityBenchmark YAML

const MANIFEST_PATH: &str = "fuzz/manifest.yaml";

/// Whether a YAML loader's message says where: a line, or a field path.
fn names_a_place(message: &str) -> bool {
    message.contains("line ") || message.contains("field `")
}

/// [`parse_manifest`] over the bytes (a file that is not UTF-8 fails to read before it is
/// parsed). A rejection names the file and the line or field; what loads can be used.
pub fn manifest_yaml(data: &[u8]) {
    let Ok(yaml) = std::str::from_utf8(data) else {
        return;
    };
    match parse_manifest(yaml, Path::new(MANIFEST_PATH)) {
        Ok(loaded) => {
            assert!(
                loaded
                    .warnings
                    .iter()
                    .all(|f| f.severity == Severity::Warning)
            );
            let m = loaded.manifest;
            let gate = m.gate_config();
            assert_eq!(gate.classes.len(), m.workload.len());
            let _ = (m.arrival(), m.schedule_classes());
            let _ = (m.weighted_input_tokens(), m.weighted_output_tokens());
        }
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.starts_with(&format!("manifest {MANIFEST_PATH}")),
                "{message}"
            );
            match e {
                ManifestError::Parse { message, .. } => {
                    assert!(names_a_place(&message), "{message}");
                }
                ManifestError::Invalid { findings, .. } => {
                    assert!(findings.iter().any(|f| f.severity == Severity::Error));
                    assert!(findings.iter().all(|f| !f.path.is_empty()), "{findings:?}");
                }
                ManifestError::Io { .. } => panic!("parsing text cannot fail to read: {message}"),
            }
        }
    }
}

/// A benchmark file's path in a folder that does not exist: a relative `manifestFile`
/// resolves to nothing, so the target reads no file of the machine it runs on.
const BENCHMARK_PATH: &str = "/nonexistent-goodput-fuzz/benchmark.yaml";

/// `goodput lint`'s reading of a file: split into documents, the benchmarks among them
/// picked, each parsed with its manifest resolved ([`parse_benchmark`]). A rejection
/// names the file and says where; a benchmark that loads has its findings at field paths.
pub fn benchmark_yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new(BENCHMARK_PATH);
    let documents = yaml_documents(text);
    let several = documents.len() > 1;
    for doc in &documents {
        if several && !is_benchmark_document(&doc.text) {
            continue;
        }
        let _ = document_name(&doc.text);
        check_benchmark(parse_benchmark_document(doc, path), path);
    }
    // A single document is also read whole, as `goodput bench` reads its file.
    if !several {
        check_benchmark(parse_benchmark(text, path), path);
    }
}

fn check_benchmark(parsed: Result<LoadedBenchmark, BenchmarkError>, path: &Path) {
    match parsed {
        Ok(loaded) => {
            assert!(loaded.findings.iter().all(|f| !f.path.is_empty()));
            let _ = loaded.manifest.gate_config();
        }
        Err(e) => {
            assert_eq!(e.path(), path);
            assert!(e.to_string().starts_with(BENCHMARK_PATH), "{e}");
            match &e {
                BenchmarkError::Parse { message, .. } => {
                    assert!(names_a_place(message), "{message}");
                }
                BenchmarkError::NotABenchmark { message, .. } => {
                    assert!(message.contains("apiVersion") || message.contains("kind"));
                }
                BenchmarkError::Io { .. } => panic!("parsing text cannot fail to read: {e}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Trace CSV

const TRACE_PATH: &str = "fuzz/trace.csv";

/// [`parse_trace`] over the bytes (a file that is not UTF-8 fails to read first); a trace
/// that parses is scheduled over the seed manifest's classes, two blocks. A rejection
/// names the file, the line and the column.
pub fn trace_csv(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = text.lines().count().max(1);
    let entries = match parse_trace(text, TRACE_PATH) {
        Ok(entries) => entries,
        Err(e) => {
            let message = e.to_string();
            assert!(message.starts_with(TRACE_PATH), "{message}");
            match e {
                TraceError::Row { line, column, .. } => {
                    assert!((1..=lines).contains(&line), "{message}");
                    assert!(!column.is_empty());
                }
                TraceError::Io { .. } => panic!("parsing text cannot fail to read: {message}"),
            }
            return;
        }
    };
    assert!(
        entries
            .windows(2)
            .all(|w| w[0].at_s.is_finite() && w[0].at_s <= w[1].at_s)
    );
    let spec = ScheduleSpec {
        classes: seed_manifest_classes(),
        requests: entries.len() as u64,
        seed: 7,
        arrival: Arrival::Trace(entries.clone()),
        output_jitter: 0.1,
        shared_prefix: Some(SharedPrefix {
            pool: 4,
            tokens: 16,
            zipf: 1.0,
        }),
    };
    match build_schedule(&spec, 1.0, 2) {
        Ok(schedule) => assert_eq!(schedule.len(), 2 * entries.len()),
        Err(ScheduleError::EmptyTrace) => assert!(entries.is_empty()),
        Err(ScheduleError::TraceClass { row, class }) => {
            assert_eq!(entries[row].class.as_deref(), Some(class.as_str()));
        }
        Err(e) => panic!("a trace schedule failed: {e}"),
    }
}

fn seed_manifest_classes() -> Vec<crate::workload::schedule::ScheduleClass> {
    static CLASSES: OnceLock<Vec<crate::workload::schedule::ScheduleClass>> = OnceLock::new();
    CLASSES
        .get_or_init(|| seed_manifest().schedule_classes())
        .clone()
}
