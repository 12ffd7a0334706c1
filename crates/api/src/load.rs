//! Reading a `CapacityBenchmark` YAML file for a local run or `goodput lint`: parsing with
//! field paths and line numbers (strictly: a field the types do not know is an error here,
//! though the types themselves ignore it), resolving the workload manifest, and collecting
//! every finding (manifest validation and [`lint`](super::lint::lint)) in one list. Also
//! the CustomResourceDefinition YAML (`goodput crds`).

use std::path::{Path, PathBuf};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResourceExt;
use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_saphyr::granit_parser::{Event, Marker, Parser, Span};

use super::lint::{lint, lint_spec, manifest_path};
use super::{CapacityBenchmark, CapacityBenchmarkSpec, CapacityBenchmarkStatus};
use crate::workload::{Finding, Severity, WorkloadManifest, seed_manifest, validate};

/// The `apiVersion` of a `CapacityBenchmark`.
pub const API_VERSION: &str = "goodput.dev/v1alpha1";

/// The `kind` of a `CapacityBenchmark`.
pub const KIND: &str = "CapacityBenchmark";

/// Why a benchmark file could not be read as a `CapacityBenchmark` at all. A benchmark that
/// parses but breaks rules is not an error: its [`LoadedBenchmark::findings`] say why.
#[derive(Debug, thiserror::Error)]
pub enum BenchmarkError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The benchmark file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The YAML is malformed or does not match the schema (unknown field, wrong type).
    #[error("{}: {message}", path.display())]
    Parse {
        /// The benchmark file.
        path: PathBuf,
        /// The parser's message on one line: the field path (`spec.experiments.rateSweep.rates[1]`)
        /// and the line and column.
        message: String,
    },
    /// The document is not a `goodput.dev/v1alpha1` `CapacityBenchmark`.
    #[error("{}: {message}", path.display())]
    NotABenchmark {
        /// The benchmark file.
        path: PathBuf,
        /// What the `apiVersion` or `kind` is instead.
        message: String,
    },
}

impl BenchmarkError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            BenchmarkError::Io { path, .. }
            | BenchmarkError::Parse { path, .. }
            | BenchmarkError::NotABenchmark { path, .. } => path,
        }
    }

    /// The message without the file name (the `Display` form starts with it).
    pub fn message(&self) -> String {
        match self {
            BenchmarkError::Io { source, .. } => format!("cannot read: {source}"),
            BenchmarkError::Parse { message, .. }
            | BenchmarkError::NotABenchmark { message, .. } => message.clone(),
        }
    }
}

/// A benchmark file that parsed, with its workload manifest resolved and every finding.
#[derive(Clone, Debug)]
pub struct LoadedBenchmark {
    /// The custom resource as written.
    pub benchmark: CapacityBenchmark,
    /// The workload manifest the benchmark runs: inline, or `manifestFile` relative to the
    /// benchmark file's folder, with `spec.acceptance` in place of the manifest's own
    /// `acceptance` when given. When it cannot be resolved (a `manifestConfigMap`, an
    /// unreadable file, no or several sources) an error finding says why and the built-in
    /// seed manifest stands in, so such a benchmark must never run: check [`Self::errors`].
    pub manifest: WorkloadManifest,
    /// Every error and warning: how the manifest was resolved, the manifest's validation
    /// (paths prefixed with where it came from, see [`manifest_path`]) and the lint.
    pub findings: Vec<Finding>,
}

impl LoadedBenchmark {
    /// Findings that forbid running the benchmark.
    pub fn errors(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
    }

    /// Findings that allow a run whose result may not mean what the user expects.
    pub fn warnings(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
    }

    /// Whether any finding is an error.
    pub fn has_errors(&self) -> bool {
        self.errors().next().is_some()
    }
}

/// Paths of the findings that only a cluster resolves: a Service target and a manifest in
/// a ConfigMap. `goodput bench` cannot run them; the operator can (`goodput lint
/// --cluster` accepts them).
const CLUSTER_RESOLVED: [&str; 2] = ["spec.target.service", "spec.workload.manifestConfigMap"];

/// Whether a finding is only that the operator, not this machine, resolves a reference.
pub fn resolved_in_cluster(finding: &Finding) -> bool {
    CLUSTER_RESOLVED.contains(&finding.path.as_str())
        && finding
            .message
            .contains("is resolved by the operator in a cluster")
}

/// One document of a multi-document YAML file.
#[derive(Clone, Debug, PartialEq)]
pub struct YamlDocument {
    /// The document's own lines.
    pub text: String,
    /// Lines of the file before the document's first line: added to the line numbers in
    /// messages about the document, so that they are the file's.
    pub line_offset: usize,
}

/// The documents of a multi-document YAML file (split at `---` lines), each with the number
/// of lines before it (so messages name the file's lines without copying the file's earlier
/// lines into every document: a file of many documents costs its own size, not its size
/// times their count). Documents that hold only comments or blanks are left out.
pub fn yaml_documents(text: &str) -> Vec<YamlDocument> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    for (i, line) in text.lines().enumerate() {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            docs.push(YamlDocument {
                text: std::mem::take(&mut current),
                line_offset: start,
            });
            start = i + 1;
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    docs.push(YamlDocument {
        text: current,
        line_offset: start,
    });
    docs.retain(|d| {
        d.text
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    });
    docs
}

/// Whether a YAML document is a CapacityBenchmark (by its `kind`).
pub fn is_benchmark_document(doc: &str) -> bool {
    is_kind(doc, KIND)
}

/// Whether a YAML document parses and its `kind` is `kind`.
fn is_kind(doc: &str, kind: &str) -> bool {
    serde_saphyr::from_str::<serde_json::Value>(doc).is_ok_and(|v| v["kind"] == kind)
}

/// A YAML document's `metadata.name`, if it has one.
pub fn document_name(doc: &str) -> Option<String> {
    let v = serde_saphyr::from_str::<serde_json::Value>(doc).ok()?;
    v["metadata"]["name"].as_str().map(str::to_owned)
}

/// The document of kind `kind` in a (multi-document) YAML file, parsed. `strict`: a field
/// the types do not know is an error (a file a person wrote); otherwise ignored (what
/// `kubectl get -o yaml` prints). Errors name the field path, line and column.
pub fn parse_kind<T: DeserializeOwned>(text: &str, kind: &str, strict: bool) -> Result<T, String> {
    let docs: Vec<YamlDocument> = yaml_documents(text)
        .into_iter()
        .filter(|d| is_kind(&d.text, kind))
        .collect();
    match docs.as_slice() {
        [doc] if strict => {
            // A custom resource's type holds `apiVersion` and `kind` in its derive, not as
            // fields: those two are known at the root.
            let (value, unknown) = parse_yaml(&doc.text, doc.line_offset)?;
            let type_meta = |p: &FieldPath| matches!(p.0.as_slice(), [Segment::Key(k)] if k == "apiVersion" || k == "kind");
            match unknown.iter().find(|p| !type_meta(p)) {
                Some(path) => Err(unknown_field_message(&doc.text, doc.line_offset, path)),
                None => Ok(value),
            }
        }
        [doc] => from_yaml(&doc.text, doc.line_offset),
        [] => Err(format!("no document of kind {kind}")),
        _ => Err(format!(
            "{} documents of kind {kind}; give a file with one",
            docs.len()
        )),
    }
}

/// Reads and parses a benchmark file, resolving its manifest (see [`parse_benchmark`]).
pub fn load_benchmark(path: &Path) -> Result<LoadedBenchmark, BenchmarkError> {
    let yaml = std::fs::read_to_string(path).map_err(|source| BenchmarkError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_benchmark(&yaml, path)
}

/// The manifest a benchmark runs (its `acceptance` replaced by `spec.acceptance` when
/// given) and every finding about the pair: the manifest validator's, with paths as the
/// spec names them, and the benchmark lint's. The one check both shells run: `goodput
/// bench`/`lint` after reading the files, the operator after reading the ConfigMap.
pub fn check_benchmark(
    spec: &CapacityBenchmarkSpec,
    mut manifest: WorkloadManifest,
) -> (WorkloadManifest, Vec<Finding>) {
    if let Some(acceptance) = &spec.acceptance {
        manifest.acceptance = acceptance.clone();
    }
    let prefix = manifest_path(&spec.workload);
    let mut findings = Vec::new();
    for f in validate(&manifest) {
        let path = match f.path.strip_prefix("acceptance") {
            Some(rest) if spec.acceptance.is_some() => format!("spec.acceptance{rest}"),
            _ => format!("{prefix}.{}", f.path),
        };
        findings.push(Finding { path, ..f });
    }
    findings.extend(lint(spec, &manifest));
    (manifest, findings)
}

/// Parses benchmark YAML. `path` names the file in messages and is the base of a relative
/// `spec.workload.manifestFile`.
///
/// Malformed YAML, a field the schema does not know, a wrong type or a wrong
/// `apiVersion`/`kind` is an `Err`; a benchmark that parses but breaks rules is `Ok`, with
/// the errors among its findings.
pub fn parse_benchmark(yaml: &str, path: &Path) -> Result<LoadedBenchmark, BenchmarkError> {
    parse_benchmark_at(yaml, 0, path)
}

/// [`parse_benchmark`] of one document of a file ([`yaml_documents`]): its messages name
/// the file's lines.
pub fn parse_benchmark_document(
    doc: &YamlDocument,
    path: &Path,
) -> Result<LoadedBenchmark, BenchmarkError> {
    parse_benchmark_at(&doc.text, doc.line_offset, path)
}

/// [`parse_benchmark`] of YAML that starts after `line_offset` lines of its file.
fn parse_benchmark_at(
    yaml: &str,
    line_offset: usize,
    path: &Path,
) -> Result<LoadedBenchmark, BenchmarkError> {
    let parse_error = |message| BenchmarkError::Parse {
        path: path.to_path_buf(),
        message,
    };
    let header: Header = from_yaml(yaml, line_offset).map_err(parse_error)?;
    header
        .check()
        .map_err(|message| BenchmarkError::NotABenchmark {
            path: path.to_path_buf(),
            message,
        })?;
    let doc: Document = from_yaml_strict(yaml, line_offset).map_err(parse_error)?;
    let benchmark = CapacityBenchmark {
        metadata: doc.metadata,
        spec: doc.spec,
        status: doc.status,
    };

    let mut findings = Vec::new();
    if benchmark.metadata.name.as_deref().is_none_or(str::is_empty) {
        findings.push(Finding {
            severity: Severity::Warning,
            path: "metadata.name".into(),
            message: "missing: the API server requires a name, and reports are easier to \
                      tell apart with one"
                .into(),
        });
    }
    let spec = &benchmark.spec;
    if let Some(svc) = &spec.target.service {
        findings.push(Finding {
            severity: Severity::Error,
            path: "spec.target.service".into(),
            message: format!(
                "Service `{}` is resolved by the operator in a cluster; locally give url \
                 instead (for example `http://localhost:{port}` with `kubectl port-forward \
                 svc/{} {port}:{port}`)",
                svc.name,
                svc.name,
                port = svc.port
            ),
        });
    }
    let resolved = resolve_manifest(spec, path, &mut findings);
    let manifest = match resolved {
        Some(manifest) => {
            let (manifest, found) = check_benchmark(spec, manifest);
            findings.extend(found);
            manifest
        }
        None => {
            findings.extend(lint_spec(spec));
            let mut manifest = seed_manifest();
            if let Some(acceptance) = &spec.acceptance {
                manifest.acceptance = acceptance.clone();
            }
            manifest
        }
    };
    // The manifest validator and the lint may both report one thing (no warmup): once. A
    // warning at a field that also has an error adds nothing: the field must change anyway.
    let mut unique: Vec<Finding> = Vec::with_capacity(findings.len());
    for f in &findings {
        let superseded = f.severity == Severity::Warning
            && findings
                .iter()
                .any(|e| e.severity == Severity::Error && e.path == f.path);
        if !superseded && !unique.contains(f) {
            unique.push(f.clone());
        }
    }
    Ok(LoadedBenchmark {
        benchmark,
        manifest,
        findings: unique,
    })
}

/// The manifest the spec names, when it can be resolved here; otherwise `None` and, except
/// for a missing or doubled source (the lint reports those), an error finding.
fn resolve_manifest(
    spec: &CapacityBenchmarkSpec,
    benchmark_path: &Path,
    findings: &mut Vec<Finding>,
) -> Option<WorkloadManifest> {
    let w = &spec.workload;
    let sources = usize::from(w.manifest.is_some())
        + usize::from(w.manifest_file.is_some())
        + usize::from(w.manifest_config_map.is_some());
    if sources != 1 {
        return None;
    }
    let mut error = |path: &str, message: String| {
        findings.push(Finding {
            severity: Severity::Error,
            path: path.into(),
            message,
        });
        None
    };
    if let Some(inline) = &w.manifest {
        return Some((**inline).clone());
    }
    if let Some(cm) = &w.manifest_config_map {
        return error(
            "spec.workload.manifestConfigMap",
            format!(
                "ConfigMap `{}` (key `{}`) is resolved by the operator in a cluster; locally \
                 use manifest or manifestFile",
                cm.name, cm.key
            ),
        );
    }
    let file = w.manifest_file.as_deref()?;
    if file.trim().is_empty() {
        return error(
            "spec.workload.manifestFile",
            "is empty: name the manifest file".into(),
        );
    }
    let base = benchmark_path.parent().unwrap_or(Path::new(""));
    let full = base.join(file);
    let yaml = match read_manifest_file(&full) {
        Ok(yaml) => yaml,
        Err(e) => {
            return error(
                "spec.workload.manifestFile",
                format!(
                    "cannot read {} (relative to the benchmark file's folder): {e}",
                    full.display()
                ),
            );
        }
    };
    match from_yaml::<WorkloadManifest>(&yaml, 0) {
        Ok(manifest) => Some(manifest),
        Err(message) => error(
            "spec.workload.manifestFile",
            format!("{}: {message}", full.display()),
        ),
    }
}

/// Largest `manifestFile` read: a manifest is a few kilobytes.
const MAX_MANIFEST_FILE_BYTES: u64 = 4 << 20;

/// The text of a `manifestFile`: a regular file (a device such as `/dev/zero` or a FIFO
/// would be read without end, or block) of at most [`MAX_MANIFEST_FILE_BYTES`].
fn read_manifest_file(path: &Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    // Checked before opening: opening a FIFO for reading blocks until a writer comes.
    if !std::fs::metadata(path)?.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_MANIFEST_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_MANIFEST_FILE_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("larger than {} MiB", MAX_MANIFEST_FILE_BYTES >> 20),
        ));
    }
    Ok(text)
}

/// The type-identifying fields, checked before the whole document so that another kind of
/// file (a workload manifest) gets a clear message instead of an unknown-field error.
#[derive(Deserialize)]
struct Header {
    #[serde(rename = "apiVersion", default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    model: Option<IgnoredAny>,
    #[serde(default)]
    workload: Option<IgnoredAny>,
}

impl Header {
    fn check(&self) -> Result<(), String> {
        let hint = if self.model.is_some() && self.workload.is_some() {
            " (this looks like a workload manifest: reference it from a CapacityBenchmark's \
             spec.workload.manifestFile)"
        } else {
            ""
        };
        match (&self.api_version, &self.kind) {
            (Some(v), Some(k)) if v == API_VERSION && k == KIND => Ok(()),
            (Some(v), _) if v != API_VERSION => Err(format!(
                "`apiVersion` is `{v}`, expected `{API_VERSION}`{hint}"
            )),
            (None, _) => Err(format!(
                "`apiVersion` is missing: a benchmark starts with `apiVersion: {API_VERSION}` \
                 and `kind: {KIND}`{hint}"
            )),
            (_, Some(k)) => Err(format!("`kind` is `{k}`, expected `{KIND}`{hint}")),
            (_, None) => Err(format!("`kind` is missing, expected `{KIND}`{hint}")),
        }
    }
}

/// The whole document as the file holds it; unlike the derived resource it refuses unknown
/// top-level fields (a misspelt `spec` is an error, not an ignored key).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Document {
    // Checked by `Header`; read as strings so that the strict parse sees no ignored value.
    #[serde(rename = "apiVersion")]
    _api_version: String,
    #[serde(rename = "kind")]
    _kind: String,
    #[serde(default)]
    metadata: ObjectMeta,
    spec: CapacityBenchmarkSpec,
    #[serde(default)]
    status: Option<CapacityBenchmarkStatus>,
}

/// Deserializes YAML; the error names the field path (`spec.experiments.rateSweep.rates[1]`)
/// and carries the parser's line and column (plus `line_offset`, the lines before this YAML
/// in its file), all on one line. Fields the types do not know are ignored, as the types do.
fn from_yaml<T: DeserializeOwned>(yaml: &str, line_offset: usize) -> Result<T, String> {
    parse_yaml(yaml, line_offset).map(|(value, _)| value)
}

/// [`from_yaml`], and a field the types do not know is an error too, named like a parse
/// error (path, line, column). The custom-resource types ignore unknown fields so that an
/// operator older than its CRD still reads newer objects; a benchmark file read here is
/// checked strictly, so that a misspelt field is not silently dropped.
fn from_yaml_strict<T: DeserializeOwned>(yaml: &str, line_offset: usize) -> Result<T, String> {
    let (value, unknown) = parse_yaml(yaml, line_offset)?;
    match unknown.first() {
        Some(path) => Err(unknown_field_message(yaml, line_offset, path)),
        None => Ok(value),
    }
}

/// The value and the paths of the fields it ignored, in document order.
fn parse_yaml<T: DeserializeOwned>(
    yaml: &str,
    line_offset: usize,
) -> Result<(T, Vec<FieldPath>), String> {
    let mut field = String::new();
    let mut unknown = Vec::new();
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false; // one line per error: `lint` prints one line per finding
    let parsed = serde_saphyr::with_deserializer_from_str_with_options(yaml, options, |de| {
        let mut ignored = |path: serde_ignored::Path| unknown.push(FieldPath::from(&path));
        let de = serde_ignored::Deserializer::new(de, &mut ignored);
        serde_path_to_error::deserialize(de).map_err(|e| {
            field = e.path().to_string();
            e.into_inner()
        })
    });
    let value = parsed.map_err(|e| {
        let mut render = serde_saphyr::RenderOptions::default();
        render.line_offset = line_offset as u64;
        let text = e.render_with_options(render);
        let message = one_line(text.strip_prefix("error: ").unwrap_or(&text));
        if field.is_empty() || field == "." {
            message
        } else {
            format!("field `{field}`: {message}")
        }
    })?;
    Ok((value, unknown))
}

/// One step of a field path.
#[derive(Clone, Debug, PartialEq)]
enum Segment {
    /// A mapping key.
    Key(String),
    /// A sequence index.
    Index(usize),
}

/// Where a field is: `spec.experiments.rateSweeps`, `spec.workload.manifest.workload[1].mix`.
#[derive(Clone, Debug, Default, PartialEq)]
struct FieldPath(Vec<Segment>);

impl From<&serde_ignored::Path<'_>> for FieldPath {
    fn from(path: &serde_ignored::Path<'_>) -> Self {
        fn push(path: &serde_ignored::Path<'_>, out: &mut Vec<Segment>) {
            match path {
                serde_ignored::Path::Root => {}
                serde_ignored::Path::Seq { parent, index } => {
                    push(parent, out);
                    out.push(Segment::Index(*index));
                }
                serde_ignored::Path::Map { parent, key } => {
                    push(parent, out);
                    out.push(Segment::Key(key.clone()));
                }
                serde_ignored::Path::Some { parent }
                | serde_ignored::Path::NewtypeStruct { parent }
                | serde_ignored::Path::NewtypeVariant { parent } => push(parent, out),
            }
        }
        let mut out = Vec::new();
        push(path, &mut out);
        FieldPath(out)
    }
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(key) if i == 0 => write!(f, "{key}")?,
                Segment::Key(key) => write!(f, ".{key}")?,
                Segment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// `field `spec.x.y`: unknown field `y`, expected one of a, b at line L, column C`, worded
/// as the parser words an unknown field of a strict type. The expected fields come from the
/// CRD's schema; the line and column from the YAML events (both left out when not found).
fn unknown_field_message(yaml: &str, line_offset: usize, path: &FieldPath) -> String {
    let name = match path.0.last() {
        Some(Segment::Key(key)) => key.clone(),
        Some(Segment::Index(index)) => index.to_string(),
        None => String::new(),
    };
    let mut message = format!("field `{path}`: unknown field `{name}`");
    let expected = expected_fields(&path.0[..path.0.len().saturating_sub(1)]);
    if !expected.is_empty() {
        message.push_str(&format!(", expected one of {}", expected.join(", ")));
    }
    if let Some((line, column)) = key_location(yaml, &path.0) {
        let line = line + line_offset;
        message.push_str(&format!(" at line {line}, column {column}"));
    }
    message
}

/// The fields the CRD's schema allows at `parent` (a path into the document), in the
/// schema's (alphabetical) order; empty where the schema lists none.
fn expected_fields(parent: &[Segment]) -> Vec<String> {
    let Ok(crd) = serde_json::to_value(CapacityBenchmark::crd()) else {
        return Vec::new();
    };
    let mut schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    for segment in parent {
        schema = match segment {
            Segment::Key(key) => &schema["properties"][key.as_str()],
            Segment::Index(_) => &schema["items"],
        };
    }
    schema["properties"]
        .as_object()
        .map(|props| props.keys().cloned().collect())
        .unwrap_or_default()
}

/// Line and column (both from 1) of the key at `path` in the first YAML document, or of the
/// item when the path ends in an index. `None` when the path runs through an alias or a
/// merge key, or the YAML does not parse.
fn key_location(yaml: &str, path: &[Segment]) -> Option<(usize, usize)> {
    let mut events = Parser::new_from_str(yaml)
        .map_while(Result::ok)
        .filter(|(event, _)| {
            matches!(
                event,
                Event::Scalar(..)
                    | Event::Alias(..)
                    | Event::MappingStart(..)
                    | Event::MappingEnd
                    | Event::SequenceStart(..)
                    | Event::SequenceEnd
            )
        });
    let (root, _) = events.next()?;
    let at = locate(root, &mut events, path)?;
    Some((at.line(), at.col() + 1))
}

/// Walks the node whose first event is `node` down `path`: the start of the key (or the
/// item) the path ends at.
fn locate<'a>(
    node: Event<'a>,
    events: &mut impl Iterator<Item = (Event<'a>, Span)>,
    path: &[Segment],
) -> Option<Marker> {
    let (step, rest) = path.split_first()?;
    let (child, at) = match (node, step) {
        (Event::MappingStart(..), Segment::Key(want)) => loop {
            match events.next()? {
                (Event::MappingEnd, _) => return None,
                (Event::Scalar(key, ..), span) if key == want.as_str() => {
                    break (events.next()?.0, span.start);
                }
                (key, _) => {
                    skip(&key, events);
                    let (value, _) = events.next()?;
                    skip(&value, events);
                }
            }
        },
        (Event::SequenceStart(..), Segment::Index(want)) => {
            for _ in 0..*want {
                let (item, _) = events.next()?;
                if matches!(item, Event::SequenceEnd) {
                    return None;
                }
                skip(&item, events);
            }
            match events.next()? {
                (Event::SequenceEnd, _) => return None,
                (item, span) => (item, span.start),
            }
        }
        _ => return None,
    };
    if rest.is_empty() {
        Some(at)
    } else {
        locate(child, events, rest)
    }
}

/// Consumes the rest of a node whose first event is `first`.
fn skip<'a>(first: &Event<'a>, events: &mut impl Iterator<Item = (Event<'a>, Span)>) {
    let mut depth = usize::from(matches!(
        first,
        Event::MappingStart(..) | Event::SequenceStart(..)
    ));
    while depth > 0 {
        match events.next() {
            Some((Event::MappingStart(..) | Event::SequenceStart(..), _)) => depth += 1,
            Some((Event::MappingEnd | Event::SequenceEnd, _)) => depth -= 1,
            Some(_) => {}
            None => return,
        }
    }
}

/// Joins a multi-line message into one line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The first line of the generated CRD file.
const CRD_HEADER: &str = "# Generated by `goodput crds`; do not edit.\n";

/// The CustomResourceDefinition of `CapacityBenchmark` as YAML, exactly as
/// `crds/capacitybenchmark.yaml` holds it.
pub fn crds_yaml() -> String {
    crd_yaml(CapacityBenchmark::crd())
}

/// Every CustomResourceDefinition of goodput: the file name under `crds/` and its YAML.
/// `goodput crds` prints them as one stream; `goodput crds --check crds` compares them
/// with the committed files.
pub fn crd_files() -> Vec<(&'static str, String)> {
    vec![
        ("capacitybenchmark.yaml", crds_yaml()),
        ("servingplan.yaml", crd_yaml(super::ServingPlan::crd())),
    ]
}

fn crd_yaml(
    crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> String {
    // A CRD is plain data (strings, maps, lists): serializing it cannot fail.
    let yaml = serde_saphyr::to_string(&crd).expect("a CRD serializes to YAML");
    format!("{CRD_HEADER}{yaml}")
}

#[cfg(test)]
mod tests;
