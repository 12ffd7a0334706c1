//! Reading `requests.csv` (one row per attempted request) into a [`PointSummary`].
//!
//! Required columns, in any order: `request_id,class,ttft_ms,tpot_ms,e2e_ms,output_tokens,status`.
//! Optional: `itl_ms`, the gaps between consecutive token arrivals of the request in
//! milliseconds, separated by `;`. Other columns are ignored. Rows whose `status` is not
//! `ok` count as failed and their latency columns are not read.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::gate::{GateConfig, QueueTrend};
use super::report::PointReport;
use super::summary::{AnalysisError, PointSummary, Success};

/// Columns every `requests.csv` must have.
pub const REQUIRED_COLUMNS: [&str; 7] = [
    "request_id",
    "class",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "output_tokens",
    "status",
];

/// Why a `requests.csv` could not be read. Row errors name the file, line and column.
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file has no header line.
    #[error("{path}: the file is empty (expected a header: {})", REQUIRED_COLUMNS.join(","))]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The header lacks required columns.
    #[error("{path}: the header lacks required column(s): {}", .missing.join(", "))]
    MissingColumns {
        /// The file.
        path: PathBuf,
        /// The missing column names.
        missing: Vec<String>,
    },
    /// A row could not be used.
    #[error("{path}:{line}: column {column} ({name}): {message}")]
    Row {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// 1-based column number.
        column: usize,
        /// The column's header name.
        name: String,
        /// What is wrong with the value.
        message: String,
    },
    /// The CSV itself is malformed (e.g. invalid UTF-8 or quoting).
    #[error("{path}:{line}: malformed CSV: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// The parser's message.
        message: String,
    },
}

/// Positions of the columns we read.
struct Columns {
    class: usize,
    ttft: usize,
    tpot: usize,
    e2e: usize,
    tokens: usize,
    status: usize,
    itl: Option<usize>,
    names: Vec<String>,
}

impl Columns {
    fn from_header(header: &csv::ByteRecord, path: &Path) -> Result<Self, CsvError> {
        let names: Vec<String> = header
            .iter()
            .enumerate()
            .map(|(i, raw)| {
                let name = String::from_utf8_lossy(raw);
                // Spreadsheet exports often start with a UTF-8 byte-order mark.
                let name = if i == 0 {
                    name.trim_start_matches('\u{feff}')
                } else {
                    &name
                };
                name.trim().to_owned()
            })
            .collect();
        let find = |col: &str| names.iter().position(|n| n == col);
        let missing: Vec<String> = REQUIRED_COLUMNS
            .iter()
            .filter(|c| find(c).is_none())
            .map(|c| (*c).to_owned())
            .collect();
        if !missing.is_empty() {
            return Err(CsvError::MissingColumns {
                path: path.to_path_buf(),
                missing,
            });
        }
        // Every required column was found just above.
        let at = |col: &str| find(col).expect("required column present");
        Ok(Columns {
            class: at("class"),
            ttft: at("ttft_ms"),
            tpot: at("tpot_ms"),
            e2e: at("e2e_ms"),
            tokens: at("output_tokens"),
            status: at("status"),
            itl: find("itl_ms"),
            names,
        })
    }
}

/// Why `requests.csv` rows could not be analysed into a point report.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    /// A file could not be read or a row could not be used.
    #[error(transparent)]
    Csv(#[from] CsvError),
    /// The analysis core refused the window.
    #[error(transparent)]
    Analysis(#[from] AnalysisError),
}

/// The report of one test point from the `requests.csv` rows of `inputs` (one per shard of
/// the point, each request in exactly one; each named by a path for errors), judged by
/// `config` over a window of `duration_s` seconds with the given queue trend.
///
/// The one definition of "rows → report": `goodput analyze a.csv b.csv` calls it (through
/// [`analyze_requests_csv`]), and so does the merge of a point's shard results, so the CSV
/// analyzer and the cluster pipeline give identical reports on the same rows.
pub fn analyze_requests<'a, R: Read>(
    config: GateConfig,
    inputs: impl IntoIterator<Item = (&'a Path, R)>,
    duration_s: f64,
    queue_trend: QueueTrend,
) -> Result<PointReport, AnalyzeError> {
    let mut summary = PointSummary::new(config);
    for (path, input) in inputs {
        read_requests(input, path, &mut summary)?;
    }
    Ok(summary.finish(duration_s, queue_trend)?)
}

/// [`analyze_requests`] over files.
pub fn analyze_requests_csv(
    config: GateConfig,
    paths: &[PathBuf],
    duration_s: f64,
    queue_trend: QueueTrend,
) -> Result<PointReport, AnalyzeError> {
    let files = paths
        .iter()
        .map(|path| {
            std::fs::File::open(path)
                .map(|f| (path.as_path(), f))
                .map_err(|source| CsvError::Io {
                    path: path.clone(),
                    source,
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    analyze_requests(config, files, duration_s, queue_trend)
}

/// Opens `path` and adds its rows to `summary`.
pub fn read_requests_csv(path: &Path, summary: &mut PointSummary) -> Result<(), CsvError> {
    let file = std::fs::File::open(path).map_err(|source| CsvError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    read_requests(file, path, summary)
}

/// Adds the rows of a `requests.csv` read from `input` to `summary`; `path` names the
/// source in errors. On an error, `summary` holds the rows before the bad one.
pub fn read_requests(
    input: impl Read,
    path: &Path,
    summary: &mut PointSummary,
) -> Result<(), CsvError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .buffer_capacity(1 << 16)
        .from_reader(input);
    let malformed = |e: csv::Error| {
        let line = e.position().map_or(0, csv::Position::line);
        match e.into_kind() {
            csv::ErrorKind::Io(source) => CsvError::Io {
                path: path.to_path_buf(),
                source,
            },
            other => CsvError::Malformed {
                path: path.to_path_buf(),
                line,
                message: format!("{other:?}"),
            },
        }
    };

    let mut record = csv::ByteRecord::new();
    if !reader.read_byte_record(&mut record).map_err(malformed)? {
        return Err(CsvError::Empty {
            path: path.to_path_buf(),
        });
    }
    let cols = Columns::from_header(&record, path)?;
    let width = cols.names.len();
    let mut itl = Vec::new();

    while reader.read_byte_record(&mut record).map_err(malformed)? {
        let line = record.position().map_or(0, |p| p.line());
        let row = Row {
            record: &record,
            cols: &cols,
            path,
            line,
        };
        if record.len() == 1 && record[0].iter().all(u8::is_ascii_whitespace) {
            continue; // a blank line, e.g. at the end of a hand-edited file
        }
        if record.len() < width {
            return Err(row.error(
                record.len(),
                format!(
                    "the row has {} fields but the header has {width}; missing value",
                    record.len()
                ),
            ));
        }
        let class_name = row.field(cols.class);
        let Some(class) = summary.class_index(class_name) else {
            let known: Vec<&str> = summary
                .config()
                .classes
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            return Err(row.error(
                cols.class,
                format!(
                    "unknown workload class `{}` (the manifest has: {})",
                    String::from_utf8_lossy(class_name),
                    known.join(", ")
                ),
            ));
        };
        let status = row.text(cols.status)?;
        if status != "ok" {
            summary.record_failure(class, status);
            continue;
        }
        itl.clear();
        if let Some(at) = cols.itl {
            row.gaps(at, &mut itl)?;
        }
        summary.record_success(
            class,
            &Success {
                ttft_ms: row.latency(cols.ttft)?,
                tpot_ms: row.latency(cols.tpot)?,
                e2e_ms: row.latency(cols.e2e)?,
                output_tokens: row.count(cols.tokens)?,
                itl_ms: &itl,
            },
        );
    }
    Ok(())
}

/// One data row, for field access with errors that point at it.
struct Row<'a> {
    record: &'a csv::ByteRecord,
    cols: &'a Columns,
    path: &'a Path,
    line: u64,
}

impl Row<'_> {
    fn error(&self, index: usize, message: String) -> CsvError {
        CsvError::Row {
            path: self.path.to_path_buf(),
            line: self.line,
            column: index + 1,
            name: self
                .cols
                .names
                .get(index)
                .cloned()
                .unwrap_or_else(|| "?".into()),
            message,
        }
    }

    fn field(&self, index: usize) -> &[u8] {
        self.record[index].trim_ascii()
    }

    fn text(&self, index: usize) -> Result<&str, CsvError> {
        std::str::from_utf8(self.field(index))
            .map_err(|_| self.error(index, "not valid UTF-8".into()))
    }

    /// A finite, non-negative number of milliseconds.
    fn latency(&self, index: usize) -> Result<f64, CsvError> {
        let text = self.text(index)?;
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
            Ok(v) if v.is_finite() => Err(self.error(index, format!("negative latency {text}"))),
            Ok(_) => Err(self.error(index, format!("`{text}` is not a finite number"))),
            Err(_) => Err(self.error(index, format!("`{text}` is not a number"))),
        }
    }

    /// A token count: a whole number from 0 to [`u32::MAX`], as engines count tokens (a
    /// larger one would overflow the class's token total instead of meaning anything).
    fn count(&self, index: usize) -> Result<u64, CsvError> {
        let text = self.text(index)?;
        text.parse::<u32>().map(u64::from).map_err(|_| {
            self.error(
                index,
                format!(
                    "`{text}` is not a token count (a whole number from 0 to {})",
                    u32::MAX
                ),
            )
        })
    }

    /// `;`-separated gaps in milliseconds; an empty field means none.
    fn gaps(&self, index: usize, out: &mut Vec<f64>) -> Result<(), CsvError> {
        let text = self.text(index)?;
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            match part.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => out.push(v),
                _ => {
                    return Err(self.error(
                        index,
                        format!("`{part}` is not a non-negative inter-token gap in ms"),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::ClassSlo;

    fn summary() -> PointSummary {
        PointSummary::new(GateConfig {
            classes: vec![ClassSlo {
                name: "chat".into(),
                ttft_cutoff_ms: 1000.0,
                tpot_cutoff_ms: 40.0,
            }],
            ..GateConfig::default()
        })
    }

    /// Found with the `requests_csv` fuzz target: two rows of 2^64 - 1 output tokens
    /// overflowed the class's token total (a panic in a debug build, a wrong total in
    /// release).
    #[test]
    fn token_counts_past_u32_are_a_row_error() {
        let csv = "request_id,class,ttft_ms,tpot_ms,e2e_ms,output_tokens,status\n\
                   a,chat,1,2,3,4294967295,ok\n\
                   b,chat,1,2,3,18446744073709551615,ok\n";
        let mut s = summary();
        let err = read_requests(csv.as_bytes(), Path::new("r.csv"), &mut s)
            .expect_err("the second row is refused");
        assert_eq!(
            err.to_string(),
            "r.csv:3: column 6 (output_tokens): `18446744073709551615` is not a token count \
             (a whole number from 0 to 4294967295)"
        );
        // Many rows at the largest count add up without overflow.
        let mut csv =
            String::from("request_id,class,ttft_ms,tpot_ms,e2e_ms,output_tokens,status\n");
        for i in 0..3 {
            csv.push_str(&format!("r{i},chat,1,2,3,4294967295,ok\n"));
        }
        let mut s = summary();
        read_requests(csv.as_bytes(), Path::new("r.csv"), &mut s).expect("rows read");
        assert!(s.finish(60.0, QueueTrend::Flat).is_ok());
    }
}
