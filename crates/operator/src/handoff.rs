//! One shard's result handed from its `goodput loadgen` pod to the operator through a
//! ConfigMap, and the merge of a point's shards into one judged point.
//!
//! A test point that one pod cannot drive runs as an Indexed Job: pod `i` sends shard `i/N`
//! of the same seeded schedule (every request whose index is `i` modulo `N`) on one shared
//! timeline (`--start-at`). Each pod writes a [`ShardResult`] into the ConfigMap the
//! operator created for it; the operator reads them back ([`ShardResult::from_config_map`])
//! and merges them ([`merge_shards`]) with the same analysis as `goodput analyze a.csv
//! b.csv`, then gates the merged point.
//!
//! ConfigMap layout (format [`FORMAT`]):
//!
//! | key | where | what |
//! |---|---|---|
//! | `shard` | `data` | `i/N`, for people (`kubectl get cm -o yaml`) and as a cross-check |
//! | `summary.json.gz` | `binaryData` | gzip of `{format, shard, shards, max_lag_ms, summary}`, `summary` being the shard's `summary.json` |
//! | `requests.csv.gz` | `binaryData` | gzip of the shard's `requests.csv` |
//! | `engine-metrics.json.gz` | `binaryData` | gzip of the shard's `engine-metrics.json`, when it scraped |
//!
//! The operator may annotate the ConfigMap with [`SHARD_ANNOTATION`] (`i/N`); a result that
//! names another shard is then refused, by the pod before it writes and by
//! [`ShardResult::from_config_map`] when read.
//!
//! Pure: nothing here does IO beyond (de)serialisation and (de)compression in memory.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use serde::{Deserialize, Serialize};

use goodput_core::analysis::{AnalyzeError, CsvError, GateConfig, PointReport, analyze_requests};
use goodput_core::record::write_requests_csv;
use goodput_engine_metrics::series::MetricsSeries;
use goodput_loadgen::point::{
    MeasuredPoint, PointFacts, PointPlan, PointSummaryFile, ScheduleFacts,
};
use goodput_loadgen::run::{ClientFacts, ErrorCount, LagFigures, LoadMode, open_loop_window_s};

/// Version of the ConfigMap layout; a reader refuses any other.
pub const FORMAT: u32 = 1;
/// `data` key holding `i/N`.
pub const SHARD_KEY: &str = "shard";
/// `binaryData` key holding the gzip of the shard's summary.
pub const SUMMARY_KEY: &str = "summary.json.gz";
/// `binaryData` key holding the gzip of the shard's `requests.csv`.
pub const REQUESTS_KEY: &str = "requests.csv.gz";
/// `binaryData` key holding the gzip of the shard's engine series, when it scraped.
pub const ENGINE_METRICS_KEY: &str = "engine-metrics.json.gz";
/// Annotation the operator may put on a result ConfigMap: the shard (`i/N`) it is for.
pub const SHARD_ANNOTATION: &str = "goodput.dev/shard";
/// Most bytes a result may hold: keys plus values, `binaryData` counted decoded, as the API
/// server counts them against a ConfigMap's 1 MiB limit (with room for the metadata).
pub const CONFIG_MAP_LIMIT_BYTES: usize = 1_000_000;
/// Most bytes one value may decompress to: a guard against a corrupt or hostile stream.
const MAX_DECOMPRESSED_BYTES: u64 = 512 << 20;

/// What one pod measured of one shard of a test point, in real-time units.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardResult {
    /// This shard's index, `0..shards`.
    pub shard: u32,
    /// Shards of the point.
    pub shards: u32,
    /// The lag bound the shard was judged by (ms, real-time units).
    pub max_lag_ms: f64,
    /// The shard's `summary.json`: client facts, validity, schedule facts, engine findings
    /// and the shard's own report (the merge recomputes the point's from the records).
    pub summary: PointSummaryFile,
    /// The shard's `requests.csv`, uncompressed.
    pub requests_csv: Vec<u8>,
    /// The shard's engine series (`engine-metrics.json`), when it scraped.
    pub engine_series: Option<MetricsSeries>,
}

/// The JSON under [`SUMMARY_KEY`].
#[derive(Serialize, Deserialize)]
struct ShardMeta {
    format: u32,
    shard: u32,
    shards: u32,
    max_lag_ms: f64,
    summary: PointSummaryFile,
}

/// `data` and `binaryData` of a result ConfigMap.
pub type ConfigMapData = (BTreeMap<String, String>, BTreeMap<String, ByteString>);

/// Why a shard result could not be written, read or merged.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// The records could not be written as CSV.
    #[error("writing requests.csv of shard {shard}: {source}")]
    WriteCsv {
        /// The shard.
        shard: String,
        /// The CSV writer's error.
        source: csv::Error,
    },
    /// A value could not be compressed.
    #[error("compressing {key}: {source}")]
    Compress {
        /// The key.
        key: &'static str,
        /// The encoder's error.
        source: std::io::Error,
    },
    /// A value could not be serialised as JSON.
    #[error("serialising {key}: {source}")]
    Serialize {
        /// The key.
        key: &'static str,
        /// The serialiser's error.
        source: serde_json::Error,
    },
    /// The result would not fit in a ConfigMap.
    #[error(
        "the shard result is {bytes} bytes, more than a ConfigMap holds ({limit} bytes; \
         requests.csv.gz alone is {requests_gz_bytes} bytes for {requests} requests): \
         run the point in more shards, or without --record-itl"
    )]
    TooLarge {
        /// Bytes the ConfigMap would hold (keys and values, binary data decoded).
        bytes: usize,
        /// The limit, [`CONFIG_MAP_LIMIT_BYTES`].
        limit: usize,
        /// Compressed bytes of the records.
        requests_gz_bytes: usize,
        /// Records in the shard.
        requests: u64,
    },
    /// A key the result needs is not in the ConfigMap (not written yet, or removed).
    #[error("ConfigMap {config_map}: no key `{key}` (the shard result is not written yet?)")]
    MissingKey {
        /// The ConfigMap.
        config_map: String,
        /// The key.
        key: &'static str,
    },
    /// A value is not valid gzip (or decompresses to more than is sane).
    #[error("ConfigMap {config_map}: `{key}` is not a valid gzip stream: {source}")]
    Gzip {
        /// The ConfigMap.
        config_map: String,
        /// The key.
        key: &'static str,
        /// The decoder's error.
        source: std::io::Error,
    },
    /// A value is not the JSON expected.
    #[error("ConfigMap {config_map}: `{key}` is not valid: {source}")]
    Json {
        /// The ConfigMap.
        config_map: String,
        /// The key.
        key: &'static str,
        /// The parser's error, with the line and column.
        source: serde_json::Error,
    },
    /// The result was written in a layout this version does not read.
    #[error("ConfigMap {config_map}: shard result format {found}, this goodput reads {FORMAT}")]
    Format {
        /// The ConfigMap.
        config_map: String,
        /// The format found.
        found: u32,
    },
    /// The result names an impossible shard (`shard >= shards` or no shards).
    #[error("ConfigMap {config_map}: shard {shard}/{shards} is not a shard (need 0 <= i < N)")]
    BadShard {
        /// The ConfigMap.
        config_map: String,
        /// The index found.
        shard: u32,
        /// The count found.
        shards: u32,
    },
    /// The result is for another shard than the ConfigMap says.
    #[error(
        "ConfigMap {config_map}: the result is for shard {result}, but its {place} says {expected}"
    )]
    ShardMismatch {
        /// The ConfigMap.
        config_map: String,
        /// `i/N` of the result.
        result: String,
        /// Where the expected shard is written (`data key shard`, the annotation).
        place: &'static str,
        /// `i/N` written there.
        expected: String,
    },
    /// A `requests.csv` could not be read: the file (ConfigMap key or shard), line and
    /// column are in the source.
    #[error(transparent)]
    Csv(#[from] CsvError),
    /// The analysis core refused the merged rows (e.g. an unknown class, with its line and
    /// column).
    #[error(transparent)]
    Analyze(#[from] AnalyzeError),
    /// No shard result was given.
    #[error("no shard results to merge")]
    NoShards,
    /// Shard results disagree on the number of shards.
    #[error("shard {shard} says the point has {found} shards, shard {first} says {expected}")]
    ShardCount {
        /// The first shard given.
        first: u32,
        /// Its count.
        expected: u32,
        /// The disagreeing shard.
        shard: u32,
        /// Its count.
        found: u32,
    },
    /// The same shard was given twice.
    #[error("shard {shard}/{shards} was given twice")]
    DuplicateShard {
        /// The index.
        shard: u32,
        /// Shards of the point.
        shards: u32,
    },
    /// Shards are missing: a merge needs exactly `0..N`.
    #[error("shard(s) {} of {shards} missing: the point needs every shard's result", list(.missing))]
    MissingShard {
        /// The missing indices.
        missing: Vec<u32>,
        /// Shards of the point.
        shards: u32,
    },
    /// Shard results are not of the same point.
    #[error(
        "shard {shard} is not of the same point as shard {first}: its {what} is {found}, not {expected}"
    )]
    PointMismatch {
        /// The reference shard.
        first: u32,
        /// The disagreeing shard.
        shard: u32,
        /// What differs.
        what: &'static str,
        /// The reference value.
        expected: String,
        /// The shard's value.
        found: String,
    },
    /// A shard's records hold a request of another shard (it would be counted twice).
    #[error("shard {shard}/{shards}, line {line}: request {request_id} belongs to shard {owner}")]
    ForeignRequest {
        /// The shard.
        shard: u32,
        /// Shards of the point.
        shards: u32,
        /// 1-based line in its `requests.csv`.
        line: u64,
        /// The request.
        request_id: String,
        /// The shard it belongs to.
        owner: u64,
    },
    /// A shard's records hold a request twice.
    #[error("shard {shard}, line {line}: request {request_id} appears twice")]
    DuplicateRequest {
        /// The shard.
        shard: u32,
        /// 1-based line of the second row.
        line: u64,
        /// The request.
        request_id: String,
    },
    /// A shard's records and its summary disagree on how many requests were measured.
    #[error("shard {shard}: requests.csv has {rows} rows, its summary says {measured} measured")]
    RecordCount {
        /// The shard.
        shard: u32,
        /// Rows in `requests.csv`.
        rows: usize,
        /// `client.measured` of its summary.
        measured: u64,
    },
    /// Shards wrote `requests.csv` with different columns.
    #[error("shard {shard}: requests.csv has other columns than shard {first}'s")]
    HeaderMismatch {
        /// The reference shard.
        first: u32,
        /// The disagreeing shard.
        shard: u32,
    },
}

fn list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

impl ShardResult {
    /// The result of a measured shard (in real-time units) and its summary, as the pod
    /// hands it over: `requests.csv` written as [`MeasuredPoint::write`] writes it.
    pub fn new(
        measured: &MeasuredPoint,
        summary: PointSummaryFile,
        plan: &PointPlan,
    ) -> Result<Self, HandoffError> {
        let (shard, shards) = plan.shard;
        let names: Vec<String> = plan
            .schedule
            .classes
            .iter()
            .map(|c| c.name.clone())
            .collect();
        let mut requests_csv = Vec::new();
        write_requests_csv(
            &mut requests_csv,
            &measured.run.records,
            &names,
            plan.record_itl,
        )
        .map_err(|source| HandoffError::WriteCsv {
            shard: format!("{shard}/{shards}"),
            source,
        })?;
        Ok(ShardResult {
            shard,
            shards,
            max_lag_ms: plan.max_lag_ms,
            summary,
            requests_csv,
            engine_series: measured.series.clone(),
        })
    }

    /// `i/N`.
    pub fn shard_label(&self) -> String {
        format!("{}/{}", self.shard, self.shards)
    }

    /// The ConfigMap's `data` and `binaryData` holding this result (see the module's
    /// table), or [`HandoffError::TooLarge`] when they would exceed
    /// [`CONFIG_MAP_LIMIT_BYTES`]: never a truncated result.
    pub fn to_config_map_data(&self) -> Result<ConfigMapData, HandoffError> {
        let meta = ShardMeta {
            format: FORMAT,
            shard: self.shard,
            shards: self.shards,
            max_lag_ms: self.max_lag_ms,
            summary: self.summary.clone(),
        };
        let json = serde_json::to_vec(&meta).map_err(|source| HandoffError::Serialize {
            key: SUMMARY_KEY,
            source,
        })?;
        let mut binary = BTreeMap::new();
        binary.insert(
            SUMMARY_KEY.to_owned(),
            ByteString(gzip(SUMMARY_KEY, &json)?),
        );
        let requests = gzip(REQUESTS_KEY, &self.requests_csv)?;
        let requests_gz_bytes = requests.len();
        binary.insert(REQUESTS_KEY.to_owned(), ByteString(requests));
        if let Some(series) = &self.engine_series {
            let json = serde_json::to_vec(series).map_err(|source| HandoffError::Serialize {
                key: ENGINE_METRICS_KEY,
                source,
            })?;
            binary.insert(
                ENGINE_METRICS_KEY.to_owned(),
                ByteString(gzip(ENGINE_METRICS_KEY, &json)?),
            );
        }
        let mut data = BTreeMap::new();
        data.insert(SHARD_KEY.to_owned(), self.shard_label());
        let bytes = data.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
            + binary
                .iter()
                .map(|(k, v)| k.len() + v.0.len())
                .sum::<usize>();
        if bytes > CONFIG_MAP_LIMIT_BYTES {
            return Err(HandoffError::TooLarge {
                bytes,
                limit: CONFIG_MAP_LIMIT_BYTES,
                requests_gz_bytes,
                requests: self.summary.client.measured,
            });
        }
        Ok((data, binary))
    }

    /// Whether `config_map` holds a written result (its summary key), without reading it:
    /// the operator's "not yet" before [`Self::from_config_map`].
    pub fn is_written(config_map: &ConfigMap) -> bool {
        config_map
            .binary_data
            .as_ref()
            .is_some_and(|b| b.contains_key(SUMMARY_KEY))
    }

    /// The result held by `config_map`, checked: every key present, valid gzip and JSON, the
    /// format, the shard against the `shard` key and the [`SHARD_ANNOTATION`] (when set),
    /// and `requests.csv` readable (errors name the line and column) with exactly the rows
    /// its summary counts.
    pub fn from_config_map(config_map: &ConfigMap) -> Result<Self, HandoffError> {
        let name = config_map
            .metadata
            .name
            .clone()
            .unwrap_or_else(|| "(unnamed)".into());
        let empty = BTreeMap::new();
        let binary = config_map.binary_data.as_ref().unwrap_or(&empty);
        let value = |key: &'static str| -> Result<Vec<u8>, HandoffError> {
            let bytes = binary.get(key).ok_or_else(|| HandoffError::MissingKey {
                config_map: name.clone(),
                key,
            })?;
            gunzip(&bytes.0).map_err(|source| HandoffError::Gzip {
                config_map: name.clone(),
                key,
                source,
            })
        };
        let json_error = |key: &'static str| {
            let name = name.clone();
            move |source| HandoffError::Json {
                config_map: name,
                key,
                source,
            }
        };
        let meta: ShardMeta =
            serde_json::from_slice(&value(SUMMARY_KEY)?).map_err(json_error(SUMMARY_KEY))?;
        if meta.format != FORMAT {
            return Err(HandoffError::Format {
                config_map: name,
                found: meta.format,
            });
        }
        if meta.shards == 0 || meta.shard >= meta.shards {
            return Err(HandoffError::BadShard {
                config_map: name,
                shard: meta.shard,
                shards: meta.shards,
            });
        }
        let label = format!("{}/{}", meta.shard, meta.shards);
        let data_shard = config_map.data.as_ref().and_then(|d| d.get(SHARD_KEY));
        let annotated = config_map
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SHARD_ANNOTATION));
        for (place, expected) in [
            ("data key `shard`", data_shard),
            ("annotation goodput.dev/shard", annotated),
        ] {
            if let Some(expected) = expected
                && expected.trim() != label
            {
                return Err(HandoffError::ShardMismatch {
                    config_map: name,
                    result: label,
                    place,
                    expected: expected.clone(),
                });
            }
        }
        let requests_csv = value(REQUESTS_KEY)?;
        let rows = read_rows(
            &requests_csv,
            &PathBuf::from(format!("ConfigMap {name} {REQUESTS_KEY}")),
        )?;
        if rows.rows.len() as u64 != meta.summary.client.measured {
            return Err(HandoffError::RecordCount {
                shard: meta.shard,
                rows: rows.rows.len(),
                measured: meta.summary.client.measured,
            });
        }
        let engine_series = if binary.contains_key(ENGINE_METRICS_KEY) {
            Some(
                serde_json::from_slice(&value(ENGINE_METRICS_KEY)?)
                    .map_err(json_error(ENGINE_METRICS_KEY))?,
            )
        } else {
            None
        };
        Ok(ShardResult {
            shard: meta.shard,
            shards: meta.shards,
            max_lag_ms: meta.max_lag_ms,
            summary: meta.summary,
            requests_csv,
            engine_series,
        })
    }
}

fn gzip(key: &'static str, bytes: &[u8]) -> Result<Vec<u8>, HandoffError> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
    encoder
        .write_all(bytes)
        .and_then(|()| encoder.finish())
        .map_err(|source| HandoffError::Compress { key, source })
}

fn gunzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    GzDecoder::new(bytes)
        .take(MAX_DECOMPRESSED_BYTES + 1)
        .read_to_end(&mut out)?;
    if out.len() as u64 > MAX_DECOMPRESSED_BYTES {
        return Err(std::io::Error::other(format!(
            "it decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes"
        )));
    }
    Ok(out)
}

/// What the merge reads of one `requests.csv` row besides the analysis core's columns.
#[derive(Clone, Copy, Debug)]
struct Row {
    /// Schedule index (from `request_id` `r-<index>`).
    index: u64,
    /// 1-based line.
    line: u64,
    /// `status` is `ok`.
    ok: bool,
    /// `e2e_ms` (successes).
    e2e_ms: f64,
    /// `scheduled_s`.
    scheduled_s: f64,
    /// `schedule_lag_ms`.
    lag_ms: f64,
}

/// A `requests.csv` read for the merge: its header and rows.
struct Rows {
    header: csv::ByteRecord,
    rows: Vec<Row>,
}

/// Columns the merge needs besides the analysis core's.
const MERGE_COLUMNS: [&str; 5] = [
    "request_id",
    "status",
    "e2e_ms",
    "scheduled_s",
    "schedule_lag_ms",
];

/// Reads the columns of [`MERGE_COLUMNS`] of every row; `path` names the source in errors,
/// which carry the line and column.
fn read_rows(csv_bytes: &[u8], path: &Path) -> Result<Rows, CsvError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(csv_bytes);
    let malformed = |e: csv::Error| {
        let line = e.position().map_or(0, csv::Position::line);
        CsvError::Malformed {
            path: path.to_path_buf(),
            line,
            message: format!("{:?}", e.into_kind()),
        }
    };
    let mut header = csv::ByteRecord::new();
    if !reader.read_byte_record(&mut header).map_err(malformed)? {
        return Err(CsvError::Empty {
            path: path.to_path_buf(),
        });
    }
    let names: Vec<String> = header
        .iter()
        .map(|n| String::from_utf8_lossy(n).trim().to_owned())
        .collect();
    let find = |col: &str| names.iter().position(|n| n == col);
    let missing: Vec<String> = MERGE_COLUMNS
        .iter()
        .filter(|c| find(c).is_none())
        .map(|c| (*c).to_owned())
        .collect();
    let (Some(id), Some(status), Some(e2e), Some(scheduled), Some(lag)) = (
        find("request_id"),
        find("status"),
        find("e2e_ms"),
        find("scheduled_s"),
        find("schedule_lag_ms"),
    ) else {
        return Err(CsvError::MissingColumns {
            path: path.to_path_buf(),
            missing,
        });
    };
    let mut rows = Vec::new();
    let mut record = csv::ByteRecord::new();
    while reader.read_byte_record(&mut record).map_err(malformed)? {
        let line = record.position().map_or(0, csv::Position::line);
        if record.len() == 1 && record[0].iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let error = |column: usize, message: String| CsvError::Row {
            path: path.to_path_buf(),
            line,
            column: column + 1,
            name: names.get(column).cloned().unwrap_or_else(|| "?".into()),
            message,
        };
        if record.len() < names.len() {
            return Err(error(
                record.len(),
                format!(
                    "the row has {} fields but the header has {}; missing value",
                    record.len(),
                    names.len()
                ),
            ));
        }
        let text = |column: usize| {
            std::str::from_utf8(record[column].trim_ascii())
                .map_err(|_| error(column, "not valid UTF-8".into()))
        };
        let number = |column: usize| -> Result<f64, CsvError> {
            let t = text(column)?;
            match t.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(v),
                _ => Err(error(column, format!("`{t}` is not a finite number"))),
            }
        };
        let request_id = text(id)?;
        let index = request_id
            .strip_prefix("r-")
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| {
                error(
                    id,
                    format!("`{request_id}` is not a request id `r-<schedule index>`"),
                )
            })?;
        let ok = text(status)? == "ok";
        rows.push(Row {
            index,
            line,
            ok,
            e2e_ms: if ok { number(e2e)? } else { 0.0 },
            scheduled_s: number(scheduled)?,
            lag_ms: number(lag)?,
        });
    }
    Ok(Rows { header, rows })
}

/// A test point merged from all its shards, judged by the gate.
#[derive(Clone, Debug, PartialEq)]
pub struct MergedPoint {
    /// The point's `summary.json`: the analysis core's report over every shard's records,
    /// merged client facts, validity, queue trend and its source, engine findings.
    pub summary: PointSummaryFile,
    /// The engine series the point is judged with (the lowest shard that scraped, on the
    /// point's timeline), for `engine-metrics.json`.
    pub engine_series: Option<MetricsSeries>,
}

impl MergedPoint {
    /// The merged point's report (`slo-report.json`).
    pub fn report(&self) -> &PointReport {
        &self.summary.report
    }
}

/// The point that `shards` (exactly shards `0..N` of one point, in any order) measured
/// together, judged by `gate`.
///
/// - The report is [`analyze_requests`] over every shard's `requests.csv`, as `goodput
///   analyze a.csv b.csv` computes it, over the point's window (first to last scheduled
///   send of all measured requests, on the shared timeline, plus one mean gap) and queue
///   trend. Every request is counted once: a shard holding a request of another shard, or
///   one request twice, is an error.
/// - The queue trend comes from the engine's waiting queue (the series of the lowest shard
///   that scraped: every shard scrapes the same engine, so one series sees the whole
///   point), else from the client in-flight count summed over shards.
/// - The point is invalid if any shard is (its reasons are kept, prefixed with the shard)
///   or if the merged figures break a rule of [`MeasuredPoint::summarize`]. A missing shard
///   is an error ([`HandoffError::MissingShard`]), not an invalid point.
/// - Client facts: counts summed; lag percentiles over every request; peak in flight the
///   largest of the shards' peaks and the summed in-flight series; start lateness the
///   largest.
pub fn merge_shards(
    shards: &[ShardResult],
    gate: &GateConfig,
) -> Result<MergedPoint, HandoffError> {
    let ordered = ordered_shards(shards)?;
    let first = ordered[0];
    same_point(&ordered)?;
    let n = first.shards;

    let mut rows = Vec::with_capacity(ordered.len());
    for s in &ordered {
        let path = shard_path(s);
        let read = read_rows(&s.requests_csv, &path)?;
        if read.rows.len() as u64 != s.summary.client.measured {
            return Err(HandoffError::RecordCount {
                shard: s.shard,
                rows: read.rows.len(),
                measured: s.summary.client.measured,
            });
        }
        let mut seen = BTreeSet::new();
        for r in &read.rows {
            let owner = r.index % u64::from(n);
            let request_id = || format!("r-{:07}", r.index);
            if owner != u64::from(s.shard) {
                return Err(HandoffError::ForeignRequest {
                    shard: s.shard,
                    shards: n,
                    line: r.line,
                    request_id: request_id(),
                    owner,
                });
            }
            if !seen.insert(r.index) {
                return Err(HandoffError::DuplicateRequest {
                    shard: s.shard,
                    line: r.line,
                    request_id: request_id(),
                });
            }
        }
        rows.push(read.rows);
    }

    // The shared timeline: a shard that started late runs that much behind it.
    let offsets: Vec<f64> = ordered
        .iter()
        .map(|s| s.summary.client.start_lateness_ms / 1e3)
        .collect();
    let span = rows
        .iter()
        .zip(&offsets)
        .flat_map(|(rs, off)| rs.iter().map(move |r| r.scheduled_s + off))
        .fold(None, |acc, t| {
            Some(acc.map_or((t, t), |(lo, hi): (f64, f64)| (lo.min(t), hi.max(t))))
        });
    let window_s = match (first.summary.mode, span) {
        (LoadMode::Rate { rate }, Some((lo, hi))) => open_loop_window_s(rate, lo, hi),
        (LoadMode::Rate { .. }, None) => 0.0,
        (LoadMode::Concurrency { .. }, _) => ordered
            .iter()
            .map(|s| s.summary.client.window_s)
            .fold(0.0, f64::max),
    };
    let mut lags: Vec<f64> = rows.iter().flatten().map(|r| r.lag_ms).collect();
    let (ok, e2e_sum_ms) = rows
        .iter()
        .flatten()
        .filter(|r| r.ok)
        .fold((0, 0.0), |(n, sum), r| (n + 1, sum + r.e2e_ms));
    let in_flight = summed_in_flight(&ordered, &offsets);
    let client = ClientFacts {
        sent: ordered.iter().map(|s| s.summary.client.sent).sum(),
        measured: ordered.iter().map(|s| s.summary.client.measured).sum(),
        warmup_excluded: ordered
            .iter()
            .map(|s| s.summary.client.warmup_excluded)
            .sum(),
        peak_in_flight: ordered
            .iter()
            .map(|s| s.summary.client.peak_in_flight)
            .chain(in_flight.iter().map(|p| p.1 as usize))
            .max()
            .unwrap_or(0),
        schedule_lag_ms: LagFigures::of(&mut lags),
        window_s,
        busy_s: ordered
            .iter()
            .zip(&offsets)
            .map(|(s, off)| s.summary.client.busy_s + off)
            .fold(0.0, f64::max),
        tokens_mismatches: ordered
            .iter()
            .map(|s| s.summary.client.tokens_mismatches)
            .sum(),
        short_outputs: ordered.iter().map(|s| s.summary.client.short_outputs).sum(),
        incomplete: ordered.iter().any(|s| s.summary.client.incomplete),
        early_stop: ordered
            .iter()
            .filter_map(|s| s.summary.client.early_stop.clone())
            .min_by(|a, b| a.at_s.total_cmp(&b.at_s)),
        cancelled_at_stop: ordered
            .iter()
            .map(|s| s.summary.client.cancelled_at_stop)
            .sum(),
        in_flight_series: in_flight,
        start_at_unix_s: first.summary.client.start_at_unix_s,
        start_lateness_ms: ordered
            .iter()
            .map(|s| s.summary.client.start_lateness_ms)
            .fold(0.0, f64::max),
        // A shard kept only its most frequent failures: the merged counts are a lower
        // bound for those it cut.
        totals: ordered
            .iter()
            .skip(1)
            .fold(first.summary.client.totals.clone(), |mut t, s| {
                t.add(&s.summary.client.totals);
                t
            }),
        cpu_throttling: ordered
            .iter()
            .filter_map(|s| s.summary.client.cpu_throttling)
            .reduce(|a, b| a.add(&b)),
        errors: ErrorCount::merge(
            ordered
                .iter()
                .flat_map(|s| s.summary.client.errors.iter().cloned()),
        ),
    };

    // One engine series: every shard scrapes the same engine.
    let engine = ordered
        .iter()
        .zip(&offsets)
        .find_map(|(s, off)| s.engine_series.as_ref().map(|series| (s, *off, series)));
    let mut reasons = Vec::new();
    let engine_series = engine.map(|(_, off, series)| {
        let mut series = series.clone();
        for sample in &mut series.samples {
            sample.t_s += off;
        }
        series
    });
    if let Some((chosen, _, series)) = engine {
        for s in &ordered {
            if let Some(other) = &s.engine_series
                && other.targets != series.targets
            {
                reasons.push(format!(
                    "shards scraped different engine targets; the point's engine figures are \
                     shard {}'s only",
                    chosen.shard_label()
                ));
                break;
            }
        }
    }
    for s in &ordered {
        for r in &s.summary.validity.reasons {
            reasons.push(format!("shard {}: {r}", s.shard_label()));
        }
    }
    let schedule = ScheduleFacts {
        requests: ordered.iter().map(|s| s.summary.schedule.requests).sum(),
        shard: if n == 1 {
            "0/1".to_owned()
        } else {
            format!("0-{}/{n}", n - 1)
        },
        continuations: ordered
            .iter()
            .map(|s| s.summary.schedule.continuations)
            .sum(),
        ..first.summary.schedule.clone()
    };
    let facts = PointFacts {
        mode: first.summary.mode,
        cache: first.summary.cache,
        prompt_method: first.summary.prompt_method,
        vocabulary: first.summary.vocabulary.clone(),
        chat_sizing: first.summary.chat_sizing.clone(),
        cache_reset: first.summary.cache_reset.clone(),
        // Every shard waits for the same engines: the longest wait says it.
        drain: ordered
            .iter()
            .filter_map(|s| s.summary.drain.clone())
            .max_by(|a, b| a.waited_s.total_cmp(&b.waited_s)),
        prewarmed: ordered
            .iter()
            .map(|s| s.summary.prewarmed_prefixes)
            .max()
            .unwrap_or(0),
        schedule,
        client,
        series: engine_series.as_ref(),
        metrics_targets: engine.map_or_else(
            || first.summary.engine_metrics.targets.clone(),
            |(s, _, _)| s.summary.engine_metrics.targets.clone(),
        ),
        max_lag_ms: first.max_lag_ms,
        span,
        ok: (ok, e2e_sum_ms),
        reasons,
        client_behind: ordered.iter().any(|s| s.summary.validity.client_behind),
    };
    let (trend, source) = facts.queue_trend();
    let paths: Vec<PathBuf> = ordered.iter().map(|s| shard_path(s)).collect();
    let mut report = analyze_requests(
        gate.clone(),
        ordered
            .iter()
            .zip(&paths)
            .map(|(s, p)| (p.as_path(), s.requests_csv.as_slice())),
        facts.window_s(),
        trend,
    )?;
    // A shard that early stopping settled as failing settles the point.
    if let Some(stop) = &facts.client.early_stop {
        stop.settle(&mut report);
    }
    let summary = facts.assemble(report, source);
    Ok(MergedPoint {
        summary,
        engine_series,
    })
}

/// The point's `requests.csv`: every shard's rows, ordered by schedule index, under their
/// common header (the capacity pack's file for a sharded point).
pub fn merged_requests_csv(shards: &[ShardResult]) -> Result<Vec<u8>, HandoffError> {
    let ordered = ordered_shards(shards)?;
    let mut header: Option<(u32, csv::ByteRecord)> = None;
    let mut all: Vec<(u64, csv::ByteRecord)> = Vec::new();
    for s in &ordered {
        let path = shard_path(s);
        let read = read_rows(&s.requests_csv, &path)?;
        match &header {
            None => header = Some((s.shard, read.header.clone())),
            Some((first, h)) if *h != read.header => {
                return Err(HandoffError::HeaderMismatch {
                    first: *first,
                    shard: s.shard,
                });
            }
            Some(_) => {}
        }
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(true)
            .from_reader(s.requests_csv.as_slice());
        let mut indices = read.rows.iter().map(|r| r.index);
        for record in reader.byte_records() {
            let record = record.map_err(|e| CsvError::Malformed {
                path: path.clone(),
                line: e.position().map_or(0, csv::Position::line),
                message: format!("{:?}", e.into_kind()),
            })?;
            if record.len() == 1 && record[0].iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            // `read_rows` read the same rows, blank lines skipped alike.
            let index = indices.next().unwrap_or(u64::MAX);
            all.push((index, record));
        }
    }
    all.sort_by_key(|(i, _)| *i);
    let mut w = csv::Writer::from_writer(Vec::new());
    let write_error = |source| HandoffError::WriteCsv {
        shard: "merged".into(),
        source,
    };
    if let Some((_, h)) = &header {
        w.write_byte_record(h).map_err(write_error)?;
    }
    for (_, r) in &all {
        w.write_byte_record(r).map_err(write_error)?;
    }
    w.into_inner().map_err(|e| HandoffError::WriteCsv {
        shard: "merged".into(),
        source: csv::Error::from(e.into_error()),
    })
}

/// The shards by index, checked to be exactly `0..N` of one count.
fn ordered_shards(shards: &[ShardResult]) -> Result<Vec<&ShardResult>, HandoffError> {
    let first = shards.first().ok_or(HandoffError::NoShards)?;
    let n = first.shards;
    let mut by_index: BTreeMap<u32, &ShardResult> = BTreeMap::new();
    for s in shards {
        if s.shard >= s.shards {
            return Err(HandoffError::BadShard {
                config_map: "(given to the merge)".into(),
                shard: s.shard,
                shards: s.shards,
            });
        }
        if s.shards != n {
            return Err(HandoffError::ShardCount {
                first: first.shard,
                expected: n,
                shard: s.shard,
                found: s.shards,
            });
        }
        if by_index.insert(s.shard, s).is_some() {
            return Err(HandoffError::DuplicateShard {
                shard: s.shard,
                shards: n,
            });
        }
    }
    let missing: Vec<u32> = (0..n).filter(|i| !by_index.contains_key(i)).collect();
    if !missing.is_empty() {
        return Err(HandoffError::MissingShard { missing, shards: n });
    }
    Ok(by_index.into_values().collect())
}

/// Every shard ran the same point: schedule, mode, rate, cache state.
fn same_point(ordered: &[&ShardResult]) -> Result<(), HandoffError> {
    let first = ordered[0];
    let facts = |s: &ShardResult| -> [(&'static str, String); 7] {
        let x = &s.summary;
        [
            ("schedule hash", x.schedule.hash.clone()),
            ("schedule seed", x.schedule.seed.to_string()),
            ("schedule blocks", x.schedule.blocks.to_string()),
            (
                "requests per block",
                x.schedule.requests_per_block.to_string(),
            ),
            ("load mode", format!("{:?}", x.mode)),
            ("experiment", x.experiment.clone()),
            ("cache state", format!("{:?}", x.cache)),
        ]
    };
    let expected = facts(first);
    for s in &ordered[1..] {
        for ((what, e), (_, found)) in expected.iter().zip(facts(s)) {
            if *e != found {
                return Err(HandoffError::PointMismatch {
                    first: first.shard,
                    shard: s.shard,
                    what,
                    expected: e.clone(),
                    found,
                });
            }
        }
    }
    Ok(())
}

/// How a shard's `requests.csv` is named in errors.
fn shard_path(s: &ShardResult) -> PathBuf {
    PathBuf::from(format!("shard {} requests.csv", s.shard_label()))
}

/// The client in-flight count of the whole point: at each sampling time of the lowest
/// shard, the sum of every shard's latest sample (0 before a shard's first), on the shared
/// timeline.
fn summed_in_flight(ordered: &[&ShardResult], offsets: &[f64]) -> Vec<(f64, f64)> {
    let series: Vec<Vec<(f64, f64)>> = ordered
        .iter()
        .zip(offsets)
        .map(|(s, off)| {
            let mut v: Vec<(f64, f64)> = s
                .summary
                .client
                .in_flight_series
                .iter()
                .map(|p| (p.0 + off, p.1))
                .collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            v
        })
        .collect();
    let Some(grid) = series.first() else {
        return Vec::new();
    };
    let mut at = vec![0usize; series.len()];
    grid.iter()
        .map(|&(t, _)| {
            let total = series
                .iter()
                .zip(&mut at)
                .map(|(s, i)| {
                    while *i < s.len() && s[*i].0 <= t {
                        *i += 1;
                    }
                    if *i == 0 { 0.0 } else { s[*i - 1].1 }
                })
                .sum();
            (t, total)
        })
        .collect()
}

#[cfg(test)]
mod tests;
