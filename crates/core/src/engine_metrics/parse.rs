//! Prometheus text exposition (format 0.0.4, and the sample lines of OpenMetrics) parsed
//! into flat samples: one [`Sample`] per line, histograms as their `_bucket{le=..}`, `_sum`
//! and `_count` lines, counters under their exposed `_total` names.
//!
//! The `prometheus-parse` crate is not used on this path: its name pattern (`\w+`) drops
//! every metric whose name holds a colon (all of `vllm:*` and `sglang:*`), its label
//! parser splits on commas inside quoted values and does not unescape, and it reports no
//! bad lines. This parser is a small single-pass tokenizer that follows the format's
//! grammar, skips lines it cannot read and counts them. (The tests check that it agrees
//! with `prometheus-parse` on colon-free text.)

use std::collections::BTreeMap;

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The exposed name, e.g. `vllm:prompt_tokens_total` or
    /// `vllm:time_to_first_token_seconds_bucket`.
    pub name: String,
    /// Label pairs in the order of the line, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value (`+Inf`, `-Inf` and `NaN` included).
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A metric family's type from its `# TYPE` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    /// `counter`.
    Counter,
    /// `gauge`.
    Gauge,
    /// `histogram`.
    Histogram,
    /// `summary`.
    Summary,
    /// `untyped`, or any other word.
    Untyped,
}

impl MetricType {
    fn from_word(s: &str) -> Self {
        match s {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" | "gaugehistogram" => MetricType::Histogram,
            "summary" => MetricType::Summary,
            _ => MetricType::Untyped,
        }
    }
}

/// Why a line was skipped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub reason: &'static str,
}

/// A parsed page.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exposition {
    /// Every readable sample line, in page order.
    pub samples: Vec<Sample>,
    /// Family types from `# TYPE` lines, by family name (a histogram under its base name).
    pub types: BTreeMap<String, MetricType>,
    /// Lines that were neither blank, comments nor readable samples.
    pub skipped_lines: usize,
    /// The first skipped line and why, for diagnostics.
    pub first_error: Option<LineError>,
}

/// Parses a whole page. Blank lines, `# HELP`, other comments and `# EOF` are ignored;
/// unreadable lines are skipped and counted; never fails.
pub fn parse(text: &str) -> Exposition {
    let mut out = Exposition::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.split_whitespace();
            if words.next() == Some("TYPE")
                && let (Some(name), Some(kind)) = (words.next(), words.next())
            {
                out.types
                    .insert(name.to_string(), MetricType::from_word(kind));
            }
            continue;
        }
        match parse_sample(line) {
            Ok(s) => out.samples.push(s),
            Err(reason) => {
                out.skipped_lines += 1;
                if out.first_error.is_none() {
                    out.first_error = Some(LineError {
                        line: i + 1,
                        reason,
                    });
                }
            }
        }
    }
    out
}

fn is_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b':'
}

fn is_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}

fn is_label_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_label_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// A cursor over one line's bytes. Every position it stops at is at an ASCII byte or the
/// end, so slicing the `&str` there is always on a character boundary.
struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }

    fn skip_blanks(&mut self) -> bool {
        let start = self.pos;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
        self.pos > start
    }

    fn take_while(&mut self, first: fn(u8) -> bool, rest: fn(u8) -> bool) -> Option<&'a str> {
        let start = self.pos;
        match self.peek() {
            Some(b) if first(b) => self.pos += 1,
            _ => return None,
        }
        while self.peek().is_some_and(rest) {
            self.pos += 1;
        }
        Some(&self.s[start..self.pos])
    }

    /// A quoted label value (the opening quote already consumed), unescaped.
    fn label_value(&mut self) -> Result<String, &'static str> {
        let bytes = self.s.as_bytes();
        let mut out = String::new();
        let mut run = self.pos;
        while let Some(&b) = bytes.get(self.pos) {
            match b {
                b'"' => {
                    out.push_str(&self.s[run..self.pos]);
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    out.push_str(&self.s[run..self.pos]);
                    let escaped = match bytes.get(self.pos + 1) {
                        Some(b'\\') => '\\',
                        Some(b'"') => '"',
                        Some(b'n') => '\n',
                        // An unknown escape is kept as written.
                        Some(_) => {
                            out.push('\\');
                            self.pos += 1;
                            run = self.pos;
                            continue;
                        }
                        None => return Err("unterminated label value"),
                    };
                    out.push(escaped);
                    self.pos += 2;
                    run = self.pos;
                }
                _ => self.pos += 1,
            }
        }
        Err("unterminated label value")
    }

    fn labels(&mut self) -> Result<Vec<(String, String)>, &'static str> {
        // The opening brace is already consumed.
        let mut labels = Vec::new();
        loop {
            self.skip_blanks();
            if self.peek() == Some(b'}') {
                self.pos += 1;
                return Ok(labels);
            }
            let name = self
                .take_while(is_label_start, is_label_char)
                .ok_or("bad label name")?
                .to_string();
            self.skip_blanks();
            if self.peek() != Some(b'=') {
                return Err("expected `=` after a label name");
            }
            self.pos += 1;
            self.skip_blanks();
            if self.peek() != Some(b'"') {
                return Err("expected a quoted label value");
            }
            self.pos += 1;
            let value = self.label_value()?;
            labels.push((name, value));
            self.skip_blanks();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(labels);
                }
                _ => return Err("expected `,` or `}` after a label"),
            }
        }
    }

    /// The next blank-separated token, if any.
    fn token(&mut self) -> Option<&'a str> {
        self.skip_blanks();
        let start = self.pos;
        while self.peek().is_some_and(|b| b != b' ' && b != b'\t') {
            self.pos += 1;
        }
        (self.pos > start).then(|| &self.s[start..self.pos])
    }
}

/// Parses one trimmed, non-comment line.
fn parse_sample(line: &str) -> Result<Sample, &'static str> {
    let mut c = Cursor { s: line, pos: 0 };
    let name = c
        .take_while(is_name_start, is_name_char)
        .ok_or("bad metric name")?
        .to_string();
    let blank_before = c.skip_blanks();
    let labels = if c.peek() == Some(b'{') {
        c.pos += 1;
        c.labels()?
    } else {
        if !blank_before && c.peek().is_some() {
            return Err("bad character in metric name");
        }
        Vec::new()
    };
    let value = c.token().ok_or("missing value")?;
    let value = parse_value(value).ok_or("bad value")?;
    match c.token() {
        None => {}
        // An OpenMetrics exemplar follows the value directly.
        Some(t) if t.starts_with('#') => {}
        Some(ts) => {
            if ts.parse::<f64>().is_err() {
                return Err("bad timestamp");
            }
            match c.token() {
                None => {}
                Some(t) if t.starts_with('#') => {}
                Some(_) => return Err("trailing text after the timestamp"),
            }
        }
    }
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// Go-style float: decimal, `+Inf`/`-Inf`/`Inf`, `NaN` (any case).
fn parse_value(s: &str) -> Option<f64> {
    // Rust's parser accepts `inf`, `infinity` and `nan` in any case, with a sign.
    s.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page as vLLM v1 with two DP engines renders it (and the simulated engine, cut down).
    const VLLM: &str = include_str!("testdata/vllm.prom");
    /// SGLang's names and labels, cut down.
    const SGLANG: &str = include_str!("testdata/sglang.prom");
    /// DCGM exporter: no colons in names, so prometheus-parse reads it too.
    const DCGM: &str = include_str!("testdata/dcgm.prom");

    fn value(e: &Exposition, name: &str, label: Option<(&str, &str)>) -> Vec<f64> {
        e.samples
            .iter()
            .filter(|s| s.name == name && label.is_none_or(|(k, v)| s.label(k) == Some(v)))
            .map(|s| s.value)
            .collect()
    }

    #[test]
    fn reads_colon_names_labels_and_histogram_lines() {
        let e = parse(VLLM);
        assert_eq!(e.skipped_lines, 0, "{:?}", e.first_error);
        assert_eq!(value(&e, "vllm:num_requests_waiting", None), vec![3.0, 4.0]);
        assert_eq!(
            value(
                &e,
                "vllm:request_success_total",
                Some(("finished_reason", "length"))
            ),
            vec![3.0]
        );
        let bucket = value(
            &e,
            "vllm:time_to_first_token_seconds_bucket",
            Some(("le", "+Inf")),
        );
        assert_eq!(bucket, vec![4.0]);
        assert_eq!(
            value(&e, "vllm:time_to_first_token_seconds_sum", None),
            vec![0.5]
        );
        let first = &e.samples[0];
        assert_eq!(first.name, "vllm:num_requests_running");
        assert_eq!(
            first.labels,
            vec![
                ("engine".to_string(), "0".to_string()),
                (
                    "model_name".to_string(),
                    "Qwen/Qwen2.5-7B-Instruct".to_string()
                )
            ]
        );
        assert_eq!(
            e.types.get("vllm:time_to_first_token_seconds"),
            Some(&MetricType::Histogram)
        );
        assert_eq!(
            e.types.get("vllm:prompt_tokens_total"),
            Some(&MetricType::Counter)
        );
        assert_eq!(value(&e, "http_requests_total", None), vec![4.0]);

        let s = parse(SGLANG);
        assert_eq!(s.skipped_lines, 0);
        let q = &value(&s, "sglang:num_queue_reqs", None);
        assert_eq!(q, &vec![9.0]);
        let tagged = s
            .samples
            .iter()
            .find(|x| x.name == "sglang:token_usage")
            .map(|x| x.label("tp_rank"));
        assert_eq!(tagged, Some(Some("0")));
    }

    #[test]
    fn escapes_commas_timestamps_special_values_and_exemplars() {
        let text = "a{path=\"x,y\",q=\"say \\\"hi\\\"\\nback\\\\slash\",} 1 1700000000000\n\
                    b +Inf\nc -Inf\nd NaN\n  e{}   2.5e3  \n\
                    f_bucket{le=\"0.5\"} 3 # {trace_id=\"abc\"} 0.4 1.7e9\n\
                    g{ x = \"ü\" } 7\n# EOF\n";
        let e = parse(text);
        assert_eq!(e.skipped_lines, 0, "{:?}", e.first_error);
        let a = &e.samples[0];
        assert_eq!(a.label("path"), Some("x,y"));
        assert_eq!(a.label("q"), Some("say \"hi\"\nback\\slash"));
        assert_eq!(a.value, 1.0);
        assert_eq!(e.samples[1].value, f64::INFINITY);
        assert_eq!(e.samples[2].value, f64::NEG_INFINITY);
        assert!(e.samples[3].value.is_nan());
        assert_eq!(e.samples[4].name, "e");
        assert!(e.samples[4].labels.is_empty());
        assert_eq!(e.samples[4].value, 2500.0);
        assert_eq!(e.samples[5].value, 3.0);
        assert_eq!(e.samples[6].label("x"), Some("ü"));
    }

    #[test]
    fn bad_lines_are_skipped_and_counted() {
        let text = "good 1\n\
                    9bad 1\n\
                    bad-name 1\n\
                    novalue\n\
                    x{a=\"1\" 2\n\
                    y{a=1} 2\n\
                    z{a=\"unterminated} 2\n\
                    w notanumber\n\
                    v 1 notatimestamp\n\
                    u 1 2 3\n\
                    vllm:also_good{engine=\"0\"} 2\n";
        let e = parse(text);
        let names: Vec<&str> = e.samples.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec!["good", "vllm:also_good"]);
        assert_eq!(e.skipped_lines, 9);
        assert_eq!(
            e.first_error,
            Some(LineError {
                line: 2,
                reason: "bad metric name"
            })
        );
    }

    /// prometheus-parse drops colon names (why it is not used on this path), and agrees
    /// with this parser where it works.
    #[test]
    fn agrees_with_prometheus_parse_where_it_works() {
        let lines = || VLLM.lines().map(|l| Ok(l.to_string()));
        let theirs = prometheus_parse::Scrape::parse(lines()).unwrap_or_else(|e| panic!("{e}"));
        assert!(theirs.samples.iter().all(|s| !s.metric.starts_with("vllm")));
        assert!(
            theirs
                .samples
                .iter()
                .any(|s| s.metric == "http_requests_total")
        );

        let theirs = prometheus_parse::Scrape::parse(DCGM.lines().map(|l| Ok(l.to_string())))
            .unwrap_or_else(|e| panic!("{e}"));
        let ours = parse(DCGM);
        assert_eq!(ours.samples.len(), theirs.samples.len());
        for t in &theirs.samples {
            let v = match t.value {
                prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Untyped(v) => v,
                ref other => panic!("unexpected {other:?}"),
            };
            let found = ours.samples.iter().any(|o| {
                o.name == t.metric
                    && o.value == v
                    && o.labels.len() == t.labels.len()
                    && o.labels.iter().all(|(k, val)| t.labels.get(k) == Some(val))
            });
            assert!(found, "{t:?} not parsed the same");
        }
    }
}
