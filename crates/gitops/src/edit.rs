//! One replica number changed in a YAML file, every other byte kept.
//!
//! A GitOps repository is read by people, so a proposal must not reformat it: comments, quotes,
//! indentation, CRLF line endings, a byte-order mark, `---`/`...` markers and the other documents
//! of a multi-document file all stay exactly as they were. Parse-then-reserialise pipelines cannot
//! promise that, so this module never re-serialises anything. It
//!
//! 1. **locates** the number with a strict YAML parser (`granit-parser`, the parser under
//!    `serde-saphyr`), whose events carry byte spans into the original text;
//! 2. **splices** the new digits over the old ones, and only over the digits (quotes stay);
//! 3. **verifies** by parsing the old and the new text again and requiring that exactly one scalar
//!    changed, at the intended document and key path. Anything else fails closed.
//!
//! What it refuses, and why:
//! - a value reached through an alias (`*x`), a merge key (`<<: *x`) or defined under an anchor
//!   that something aliases: editing the anchor would change every user of it;
//! - block scalars (`|`, `>`) and explicitly tagged values (`!!int 4`, `!!str 4`): they are not the
//!   plain integer a replica count should be, and a tag may carry meaning goodput cannot check;
//! - anything that is not a non-negative decimal integer without leading zeros (`4.0`, `0x4`,
//!   `~`, `04`, which YAML 1.1 tools such as Kubernetes read as octal);
//! - more than one match (two documents with the same kind and name, a duplicated key).

use std::collections::HashSet;
use std::fmt;
use std::ops::Range;

use granit_parser::{Event, Parser, ScalarStyle, ScanError};

/// Which replica number in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EditTarget {
    /// `spec.replicas` of the document whose top-level `kind` and `metadata.name` match
    /// (Deployment, StatefulSet, LeaderWorkerSet, ...). When `namespace` is given, a document
    /// that has a `metadata.namespace` must also match it; one without a namespace still matches.
    Workload {
        /// The document's `kind`.
        kind: String,
        /// The document's `metadata.name`.
        name: String,
        /// The namespace a document that names one must be in.
        namespace: Option<String>,
    },
    /// A dotted key path in the first document of a Helm values file, e.g. `vllm.replicaCount`.
    /// Sequence items are addressed as `items[0].count`. A key that itself contains a dot cannot
    /// be addressed.
    HelmValues {
        /// The dotted key path.
        path: String,
    },
    /// `replicas[i].count` of the Kustomize `replicas:` entry whose `name` matches.
    KustomizeReplicas {
        /// The entry's `name`.
        name: String,
    },
}

impl fmt::Display for EditTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EditTarget::Workload {
                kind,
                name,
                namespace: Some(ns),
            } => write!(f, "{kind} {ns}/{name} spec.replicas"),
            EditTarget::Workload { kind, name, .. } => write!(f, "{kind} {name} spec.replicas"),
            EditTarget::HelmValues { path } => write!(f, "Helm values {path}"),
            EditTarget::KustomizeReplicas { name } => {
                write!(f, "Kustomize replicas[name={name}].count")
            }
        }
    }
}

/// Where the number is and what it is now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The current value.
    pub replicas: u64,
    /// 0-based index of the YAML document in the file.
    pub document: usize,
    /// Key path inside that document, e.g. `spec.replicas` or `replicas[1].count`.
    pub path: String,
    /// 1-based line of the value (of its opening quote when quoted).
    pub line: usize,
    /// 1-based column, in characters, of the value (of its opening quote when quoted).
    pub column: usize,
}

/// The change made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    /// The number as it was, and where.
    pub from: Located,
    /// The number written.
    pub to: u64,
    /// The whole new file.
    pub text: String,
}

/// Why a replica number could not be located or changed.
///
/// Each message names the target and the line so that it can go into a status condition as is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// The file is not valid YAML.
    #[error("the YAML does not parse at line {line}:{column}: {message}")]
    Parse {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// Nothing in the file matches the target.
    #[error("{target} not found: {hint}")]
    NotFound {
        /// The target, as it reads ([`EditTarget`]'s display).
        target: String,
        /// What the file has instead, to help correct the target.
        hint: String,
    },
    /// More than one place matches the target.
    #[error("{target} is ambiguous: {count} matches, at lines {lines}", lines = join_lines(.lines))]
    Ambiguous {
        /// The target, as it reads.
        target: String,
        /// How many places match.
        count: usize,
        /// Their 1-based lines.
        lines: Vec<usize>,
    },
    /// The value is shared through an anchor: it is an alias `*x`, comes in through a merge key
    /// `<<:`, or sits under an anchor `&x` that something aliases.
    #[error(
        "{target} at line {line} is shared through a YAML anchor (an alias `*name`, a merge key \
         `<<:`, or an anchor `&name` used elsewhere); editing the anchor would change every place \
         that uses it, so goodput will not. Write the number directly under the target instead"
    )]
    Alias {
        /// The target, as it reads.
        target: String,
        /// 1-based line of the value.
        line: usize,
    },
    /// The value is a block scalar (`|` or `>`).
    #[error(
        "{target} at line {line} is a block scalar (`|` or `>`); goodput edits only a plain or \
         quoted integer"
    )]
    BlockScalar {
        /// The target, as it reads.
        target: String,
        /// 1-based line of the value.
        line: usize,
    },
    /// The value has an explicit tag such as `!!int` or `!!str`.
    #[error(
        "{target} at line {line} has the explicit tag `{tag}`; goodput edits only an untagged \
         integer"
    )]
    Tagged {
        /// The target, as it reads.
        target: String,
        /// The tag as written.
        tag: String,
        /// 1-based line of the value.
        line: usize,
    },
    /// The value is not a non-negative decimal integer.
    #[error(
        "{target} at line {line} is `{value}`, not a non-negative decimal integer (digits only, \
         no leading zero)"
    )]
    NotInteger {
        /// The target, as it reads.
        target: String,
        /// The value as written.
        value: String,
        /// 1-based line of the value.
        line: usize,
    },
    /// Parsing the edited text again did not show exactly the one intended change.
    #[error("the edit did not verify, nothing was changed: {message}")]
    Verify {
        /// What the second parse found.
        message: String,
    },
}

impl EditError {
    /// A CamelCase reason for a Kubernetes status condition.
    pub fn reason(&self) -> &'static str {
        match self {
            EditError::Parse { .. } => "YamlInvalid",
            EditError::NotFound { .. } => "ReplicasNotFound",
            EditError::Ambiguous { .. } => "ReplicasAmbiguous",
            EditError::Alias { .. } => "ReplicasBehindAlias",
            EditError::BlockScalar { .. } => "ReplicasBlockScalar",
            EditError::Tagged { .. } => "ReplicasTagged",
            EditError::NotInteger { .. } => "ReplicasNotInteger",
            EditError::Verify { .. } => "EditVerifyFailed",
        }
    }
}

fn join_lines(lines: &[usize]) -> String {
    let parts: Vec<String> = lines.iter().map(usize::to_string).collect();
    parts.join(", ")
}

/// Find the replica number `target` names, without changing anything.
pub fn locate(src: &str, target: &EditTarget) -> Result<Located, EditError> {
    let flat = flatten(src)?;
    Ok(find_spot(src, &flat, target)?.located)
}

/// Set the replica number `target` names to `replicas`, changing only its digits.
///
/// Returns `Ok(edit)` with `edit.text == src` when the number already equals `replicas`.
pub fn set_replicas(src: &str, target: &EditTarget, replicas: u64) -> Result<Edit, EditError> {
    let flat = flatten(src)?;
    let spot = find_spot(src, &flat, target)?;
    if spot.located.replicas == replicas {
        return Ok(Edit {
            from: spot.located,
            to: replicas,
            text: src.to_string(),
        });
    }
    let new_digits = replicas.to_string();
    let mut text = String::with_capacity(src.len() + new_digits.len());
    text.push_str(&src[..spot.digits.start]);
    text.push_str(&new_digits);
    text.push_str(&src[spot.digits.end..]);
    verify(&flat, &text, spot.doc, &spot.path, &new_digits)?;
    Ok(Edit {
        from: spot.located,
        to: replicas,
        text,
    })
}

// ---------------------------------------------------------------------------------------------
// Flattening: every node of every document with its key path and byte span.

/// One step of a key path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
    /// A mapping or sequence used as a key: never addressable, kept for verification.
    ComplexKey,
    /// An alias used as a key: never addressable, kept for verification.
    AliasKey,
}

fn path_string(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
            Seg::Key(k) => push_dotted(&mut out, k),
            Seg::ComplexKey => push_dotted(&mut out, "<complex key>"),
            Seg::AliasKey => push_dotted(&mut out, "<alias key>"),
        }
    }
    out
}

fn push_dotted(out: &mut String, key: &str) {
    if !out.is_empty() {
        out.push('.');
    }
    out.push_str(key);
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum NodeKind {
    Scalar {
        value: String,
        style: ScalarStyle,
        tag: Option<String>,
    },
    Alias {
        anchor: usize,
    },
    Mapping,
    Sequence,
}

/// A node in value position (a scalar key is not a node: it names its value's path).
#[derive(Clone, Debug)]
struct Node {
    doc: usize,
    path: Vec<Seg>,
    kind: NodeKind,
    bytes: Range<usize>,
    line: usize,
    column: usize,
    /// Line of the key this node is the value of (its own line in a sequence or at the root).
    /// A block scalar's own span starts at its first content line, below its key.
    key_line: usize,
    /// The anchor defined on this node itself, 0 for none.
    anchor: usize,
    /// Anchors defined on this node or on any collection around it.
    anchors: Vec<usize>,
}

impl Node {
    fn scalar(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }
}

/// The whole file as nodes in source order.
#[derive(Debug, Default)]
struct Flat {
    nodes: Vec<Node>,
    documents: usize,
    /// `(document, anchor id)` of every anchor some alias refers to.
    aliased: HashSet<(usize, usize)>,
}

impl Flat {
    fn at<'a>(&'a self, doc: usize, path: &[Seg]) -> impl Iterator<Item = &'a Node> {
        self.nodes
            .iter()
            .filter(move |n| n.doc == doc && n.path == path)
    }

    fn scalar_at(&self, doc: usize, path: &[Seg]) -> Option<&Node> {
        self.at(doc, path).find(|n| n.scalar().is_some())
    }

    /// The path of the collection or scalar that defines `anchor` in `doc`.
    fn anchor_path(&self, doc: usize, anchor: usize) -> Option<&[Seg]> {
        self.nodes
            .iter()
            .find(|n| anchor != 0 && n.doc == doc && n.anchor == anchor)
            .map(|n| n.path.as_slice())
    }
}

/// Where the next node goes inside a collection.
enum Slot {
    Map { key: Option<Seg>, want_key: bool },
    Seq { next: usize },
}

struct Frame {
    path: Vec<Seg>,
    anchors: Vec<usize>,
    /// The collection is itself a mapping key.
    is_key: bool,
    slot: Slot,
}

/// Where an incoming node sits.
enum Role {
    Key,
    Value(Vec<Seg>),
}

fn role(stack: &[Frame]) -> Role {
    let Some(top) = stack.last() else {
        return Role::Value(Vec::new());
    };
    let seg = match &top.slot {
        Slot::Map { want_key: true, .. } => return Role::Key,
        Slot::Map { key, .. } => key.clone().unwrap_or(Seg::ComplexKey),
        Slot::Seq { next } => Seg::Index(*next),
    };
    let mut path = top.path.clone();
    path.push(seg);
    Role::Value(path)
}

/// A node finished in the innermost collection: a key now waits for its value, a value for the
/// next key, a sequence item for the next item.
fn advance(stack: &mut [Frame], key: Option<Seg>) {
    if let Some(top) = stack.last_mut() {
        match &mut top.slot {
            Slot::Map {
                key: slot_key,
                want_key,
            } => {
                if *want_key {
                    *slot_key = key;
                } else {
                    *slot_key = None;
                }
                *want_key = !*want_key;
            }
            Slot::Seq { next } => *next += 1,
        }
    }
}

fn parse_error(e: &ScanError) -> EditError {
    EditError::Parse {
        line: e.marker().line(),
        column: e.marker().col() + 1,
        message: e.info(),
    }
}

/// Parse `src` strictly and list every node in value position with its path and byte span.
fn flatten(src: &str) -> Result<Flat, EditError> {
    let options = granit_parser::options! { emit_comments: false };
    let mut walker = Walker::default();
    for next in Parser::new_from_str_with_options(src, options) {
        let (event, span) = next.map_err(|e| parse_error(&e))?;
        let at = At {
            line: span.start.line(),
            column: span.start.col() + 1,
            // Always present for a parser built from a &str; checked rather than assumed.
            bytes: span.byte_range().ok_or_else(|| EditError::Parse {
                line: span.start.line(),
                column: span.start.col() + 1,
                message: "the parser reported no byte offsets".to_string(),
            })?,
        };
        walker.event(event, at);
    }
    Ok(walker.flat)
}

/// Where an event is in the source.
struct At {
    line: usize,
    column: usize,
    bytes: Range<usize>,
}

/// The state of one pass over the parser events.
#[derive(Default)]
struct Walker {
    flat: Flat,
    stack: Vec<Frame>,
    doc: Option<usize>,
    /// Line of the last mapping key read; its value is the next node.
    last_key_line: usize,
}

impl Walker {
    fn event(&mut self, event: Event<'_>, at: At) {
        match event {
            Event::DocumentStart(..) => {
                let next = self.doc.map_or(0, |d| d + 1);
                self.doc = Some(next);
                self.flat.documents = next + 1;
                self.stack.clear();
            }
            Event::Scalar(value, style, anchor, tag) => match role(&self.stack) {
                Role::Key => self.key_read(Seg::Key(value.into_owned()), at.line),
                Role::Value(path) => {
                    let tag = tag.map(|t| format!("{}{}", t.original_handle(), t.suffix()));
                    let value = value.into_owned();
                    self.node(path, NodeKind::Scalar { value, style, tag }, anchor, at);
                    advance(&mut self.stack, None);
                }
            },
            Event::Alias(anchor) => {
                let doc = self.doc.unwrap_or(0);
                self.flat.aliased.insert((doc, anchor));
                match role(&self.stack) {
                    Role::Key => self.key_read(Seg::AliasKey, at.line),
                    Role::Value(path) => {
                        self.node(path, NodeKind::Alias { anchor }, 0, at);
                        advance(&mut self.stack, None);
                    }
                }
            }
            Event::MappingStart(_, anchor, _) => self.open(NodeKind::Mapping, anchor, at),
            Event::SequenceStart(_, anchor, _) => self.open(NodeKind::Sequence, anchor, at),
            Event::MappingEnd | Event::SequenceEnd => {
                let was_key = self.stack.pop().is_some_and(|f| f.is_key);
                advance(&mut self.stack, was_key.then_some(Seg::ComplexKey));
            }
            _ => {}
        }
    }

    fn key_read(&mut self, key: Seg, line: usize) {
        self.last_key_line = line;
        advance(&mut self.stack, Some(key));
    }

    /// Record a node in value position (or inside a complex key), with the anchors around it.
    fn node(&mut self, path: Vec<Seg>, kind: NodeKind, anchor: usize, at: At) {
        let in_map = matches!(self.stack.last(), Some(f) if matches!(f.slot, Slot::Map { .. }));
        let mut anchors = self
            .stack
            .last()
            .map(|f| f.anchors.clone())
            .unwrap_or_default();
        if anchor != 0 {
            anchors.push(anchor);
        }
        self.flat.nodes.push(Node {
            doc: self.doc.unwrap_or(0),
            path,
            kind,
            bytes: at.bytes,
            line: at.line,
            column: at.column,
            key_line: if in_map { self.last_key_line } else { at.line },
            anchor,
            anchors,
        });
    }

    fn open(&mut self, kind: NodeKind, anchor: usize, at: At) {
        let (path, is_key) = match role(&self.stack) {
            Role::Key => {
                let mut p = self
                    .stack
                    .last()
                    .map(|f| f.path.clone())
                    .unwrap_or_default();
                p.push(Seg::ComplexKey);
                (p, true)
            }
            Role::Value(p) => (p, false),
        };
        let slot = match kind {
            NodeKind::Mapping => Slot::Map {
                key: None,
                want_key: true,
            },
            _ => Slot::Seq { next: 0 },
        };
        self.node(path.clone(), kind, anchor, at);
        // The node just pushed holds the full anchor list for its children to inherit.
        let anchors = self
            .flat
            .nodes
            .last()
            .map(|n| n.anchors.clone())
            .unwrap_or_default();
        self.stack.push(Frame {
            path,
            anchors,
            is_key,
            slot,
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Locating the target.

/// The located number plus what the splice and the verification need.
struct Spot {
    located: Located,
    doc: usize,
    path: Vec<Seg>,
    /// Byte range of the digits alone (inside the quotes when quoted).
    digits: Range<usize>,
}

/// A document (or Kustomize entry) the target selects, before its value is looked up.
struct Candidate {
    doc: usize,
    path: Vec<Seg>,
    /// Line of what selected it (its `kind:` value, its `name:` value).
    line: usize,
}

fn key(k: &str) -> Seg {
    Seg::Key(k.to_string())
}

fn find_spot(src: &str, flat: &Flat, target: &EditTarget) -> Result<Spot, EditError> {
    let label = target.to_string();
    let candidates = match target {
        EditTarget::Workload {
            kind,
            name,
            namespace,
        } => workload_candidates(flat, kind, name, namespace.as_deref(), &label)?,
        EditTarget::HelmValues { path } => helm_candidates(flat, path, &label)?,
        EditTarget::KustomizeReplicas { name } => kustomize_candidates(flat, name, &label)?,
    };
    let chosen = match candidates.as_slice() {
        [one] => one,
        many => {
            let lines = many
                .iter()
                .map(|c| flat.at(c.doc, &c.path).next().map_or(c.line, |n| n.line))
                .collect();
            return Err(EditError::Ambiguous {
                target: label,
                count: many.len(),
                lines,
            });
        }
    };
    let node = resolve(flat, chosen.doc, &chosen.path, &label, target)?;
    let (digits, replicas) = integer_digits(src, node, &label)?;
    Ok(Spot {
        located: Located {
            replicas,
            document: node.doc,
            path: path_string(&node.path),
            line: node.line,
            column: node.column,
        },
        doc: node.doc,
        path: node.path.clone(),
        digits,
    })
}

/// Documents whose top-level `kind` and `metadata.name` (and namespace, when both sides have
/// one) match. Never empty: no match is a `NotFound` listing what the file holds.
fn workload_candidates(
    flat: &Flat,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    label: &str,
) -> Result<Vec<Candidate>, EditError> {
    let mut found = Vec::new();
    let mut seen = Vec::new();
    for doc in 0..flat.documents {
        let Some(k) = flat.scalar_at(doc, &[key("kind")]) else {
            continue;
        };
        let n = flat.scalar_at(doc, &[key("metadata"), key("name")]);
        let ns = flat.scalar_at(doc, &[key("metadata"), key("namespace")]);
        let (kv, nv, nsv) = (
            k.scalar(),
            n.and_then(Node::scalar),
            ns.and_then(Node::scalar),
        );
        let ns_ok = match (namespace, nsv) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        };
        if kv == Some(kind) && nv == Some(name) && ns_ok {
            found.push(Candidate {
                doc,
                path: vec![key("spec"), key("replicas")],
                line: k.line,
            });
        }
        let in_ns = nsv.map(|s| format!(" in {s}")).unwrap_or_default();
        seen.push(format!(
            "#{doc} {} {}{in_ns} (line {})",
            kv.unwrap_or("?"),
            nv.unwrap_or("<no metadata.name>"),
            k.line
        ));
    }
    if found.is_empty() {
        let ns = namespace
            .map(|s| format!(" in namespace {s}"))
            .unwrap_or_default();
        let hint = if seen.is_empty() {
            format!(
                "no document has kind {kind} and metadata.name {name}{ns}; the file has {} \
                 document(s), none with a top-level `kind`",
                flat.documents
            )
        } else {
            format!(
                "no document has kind {kind} and metadata.name {name}{ns}; documents seen: {}",
                list_some(&seen, 8)
            )
        };
        return Err(EditError::NotFound {
            target: label.to_string(),
            hint,
        });
    }
    Ok(found)
}

/// The one path in document 0 that a Helm dotted path names.
fn helm_candidates(flat: &Flat, path: &str, label: &str) -> Result<Vec<Candidate>, EditError> {
    let Some(segs) = parse_dotted(path) else {
        return Err(EditError::NotFound {
            target: label.to_string(),
            hint: format!(
                "`{path}` is not a dotted key path such as `vllm.replicaCount` or `pools[0].replicas`"
            ),
        });
    };
    if flat.documents == 0 {
        return Err(EditError::NotFound {
            target: label.to_string(),
            hint: "the file holds no YAML document".to_string(),
        });
    }
    Ok(vec![Candidate {
        doc: 0,
        path: segs,
        line: 1,
    }])
}

/// `a.b[0].c` into key and index steps; `None` for an empty key or a malformed index.
fn parse_dotted(path: &str) -> Option<Vec<Seg>> {
    let mut segs = Vec::new();
    for part in path.split('.') {
        let (name, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if name.is_empty() {
            return None;
        }
        segs.push(key(name));
        while !rest.is_empty() {
            let close = rest.find(']')?;
            let index = rest.get(1..close)?.parse().ok()?;
            segs.push(Seg::Index(index));
            rest = &rest[close + 1..];
            if !rest.is_empty() && !rest.starts_with('[') {
                return None;
            }
        }
    }
    Some(segs)
}

/// Every top-level `replicas[i]` entry whose `name` matches, pointing at its `count`.
fn kustomize_candidates(flat: &Flat, name: &str, label: &str) -> Result<Vec<Candidate>, EditError> {
    let mut found = Vec::new();
    let mut names = Vec::new();
    let mut lists = 0;
    for n in &flat.nodes {
        match n.path.as_slice() {
            [Seg::Key(k)] if k == "replicas" && n.kind == NodeKind::Sequence => lists += 1,
            [Seg::Key(r), Seg::Index(i), Seg::Key(f)] if r == "replicas" && f == "name" => {
                let Some(v) = n.scalar() else { continue };
                if v == name {
                    found.push(Candidate {
                        doc: n.doc,
                        path: vec![key("replicas"), Seg::Index(*i), key("count")],
                        line: n.line,
                    });
                }
                names.push(format!("{v} (line {})", n.line));
            }
            _ => {}
        }
    }
    if found.is_empty() {
        let hint = if lists == 0 {
            "no document has a top-level `replicas:` list".to_string()
        } else {
            format!(
                "no entry of `replicas:` has name {name}; names seen: {}",
                list_some(&names, 8)
            )
        };
        return Err(EditError::NotFound {
            target: label.to_string(),
            hint,
        });
    }
    Ok(found)
}

fn list_some(items: &[String], max: usize) -> String {
    if items.is_empty() {
        return "none".to_string();
    }
    let mut out = items[..items.len().min(max)].join(", ");
    if items.len() > max {
        out.push_str(&format!(", and {} more", items.len() - max));
    }
    out
}

/// The one scalar at `path` in `doc`, or why there is not exactly one editable one.
fn resolve<'a>(
    flat: &'a Flat,
    doc: usize,
    path: &[Seg],
    label: &str,
    target: &EditTarget,
) -> Result<&'a Node, EditError> {
    let exact: Vec<&Node> = flat.at(doc, path).collect();
    let node = match exact.as_slice() {
        [one] => *one,
        [] => {
            if let Some(line) = shared_source(flat, doc, path) {
                return Err(EditError::Alias {
                    target: label.to_string(),
                    line,
                });
            }
            let mut hint = nearest_hint(flat, doc, path);
            if matches!(target, EditTarget::Workload { .. }) {
                hint.push_str(
                    "; a workload without `spec.replicas` runs 1 replica, so add the field to \
                     the manifest first",
                );
            }
            return Err(EditError::NotFound {
                target: label.to_string(),
                hint,
            });
        }
        many => {
            return Err(EditError::Ambiguous {
                target: label.to_string(),
                count: many.len(),
                lines: many.iter().map(|n| n.line).collect(),
            });
        }
    };
    if let NodeKind::Alias { .. } = node.kind {
        return Err(EditError::Alias {
            target: label.to_string(),
            line: node.line,
        });
    }
    // An anchor on the value or around it that some alias uses: the edit would reach every user.
    if node
        .anchors
        .iter()
        .any(|a| flat.aliased.contains(&(doc, *a)))
    {
        return Err(EditError::Alias {
            target: label.to_string(),
            line: node.line,
        });
    }
    Ok(node)
}

/// When `path` is absent but could be supplied through an alias or a merge key, the line of
/// that alias or merge. Unresolvable cases count as "could": refusing is the safe side.
fn shared_source(flat: &Flat, doc: usize, path: &[Seg]) -> Option<usize> {
    shared_source_within(flat, doc, path, MERGE_DEPTH)
}

/// How many merges deep [`shared_source`] follows before it assumes the worst. Bounds the
/// search: an anchored map may merge itself (`a: &a {<<: *a}`).
const MERGE_DEPTH: usize = 8;

fn shared_source_within(flat: &Flat, doc: usize, path: &[Seg], budget: usize) -> Option<usize> {
    for depth in 0..path.len() {
        let prefix = &path[..depth];
        // `spec: *s` with target `spec.replicas`: everything below an alias is the anchor's.
        if let Some(n) = flat
            .at(doc, prefix)
            .find(|n| matches!(n.kind, NodeKind::Alias { .. }))
        {
            return Some(n.line);
        }
        let mut merge_path = prefix.to_vec();
        merge_path.push(key("<<"));
        for merge in flat.at(doc, &merge_path) {
            if budget == 0 || merge_supplies(flat, doc, merge, &path[depth..], budget - 1) {
                return Some(merge.line);
            }
        }
    }
    None
}

/// Whether the `<<` value `merge` could supply `rest` (the path below the merging map).
fn merge_supplies(flat: &Flat, doc: usize, merge: &Node, rest: &[Seg], budget: usize) -> bool {
    let sources: Vec<Vec<Seg>> = match &merge.kind {
        NodeKind::Alias { anchor } => match flat.anchor_path(doc, *anchor) {
            Some(p) => vec![p.to_vec()],
            None => return true,
        },
        NodeKind::Mapping => vec![merge.path.clone()],
        NodeKind::Sequence => {
            let items = flat.nodes.iter().filter(|n| {
                n.doc == doc
                    && n.path.len() == merge.path.len() + 1
                    && n.path.starts_with(&merge.path)
            });
            let mut sources = Vec::new();
            for item in items {
                match &item.kind {
                    NodeKind::Alias { anchor } => match flat.anchor_path(doc, *anchor) {
                        Some(p) => sources.push(p.to_vec()),
                        None => return true,
                    },
                    _ => sources.push(item.path.clone()),
                }
            }
            sources
        }
        NodeKind::Scalar { .. } => return false,
    };
    sources.iter().any(|base| {
        let mut full = base.clone();
        full.extend_from_slice(rest);
        flat.at(doc, &full).next().is_some()
            || shared_source_within(flat, doc, &full, budget).is_some()
    })
}

/// What does exist on the way to `path`, for a "not found" message.
fn nearest_hint(flat: &Flat, doc: usize, path: &[Seg]) -> String {
    let Some(depth) = (0..path.len())
        .rev()
        .find(|&d| flat.at(doc, &path[..d]).next().is_some())
    else {
        return format!("document {doc} is empty");
    };
    let prefix = &path[..depth];
    let missing = path_string(&path[depth..depth + 1]);
    let mut keys = Vec::new();
    for n in &flat.nodes {
        if n.doc == doc && n.path.len() == depth + 1 && n.path.starts_with(prefix) {
            let step = path_string(&n.path[depth..]);
            if !keys.contains(&step) {
                keys.push(step);
            }
        }
    }
    let there = if keys.is_empty() {
        "it has no keys".to_string()
    } else {
        format!("keys there: {}", list_some(&keys, 12))
    };
    if prefix.is_empty() {
        format!("document {doc} has no top-level `{missing}`; {there}")
    } else {
        let line = flat.at(doc, prefix).next().map_or(0, |n| n.line);
        format!(
            "document {doc} has `{}` (line {line}) but no `{missing}` under it; {there}",
            path_string(prefix)
        )
    }
}

/// The byte range of the digits of an editable integer scalar, and its value.
fn integer_digits(src: &str, node: &Node, label: &str) -> Result<(Range<usize>, u64), EditError> {
    let not_integer = |value: &str| EditError::NotInteger {
        target: label.to_string(),
        value: value.to_string(),
        line: node.line,
    };
    let (value, style, tag) = match &node.kind {
        NodeKind::Scalar { value, style, tag } => (value, *style, tag),
        NodeKind::Mapping => return Err(not_integer("a mapping")),
        NodeKind::Sequence => return Err(not_integer("a sequence")),
        // resolve() has refused aliases already; kept total rather than panicking.
        NodeKind::Alias { .. } => {
            return Err(EditError::Alias {
                target: label.to_string(),
                line: node.line,
            });
        }
    };
    if let Some(tag) = tag {
        return Err(EditError::Tagged {
            target: label.to_string(),
            tag: tag.clone(),
            line: node.line,
        });
    }
    let raw = src.get(node.bytes.clone()).unwrap_or_default();
    let digits = match style {
        ScalarStyle::Plain => node.bytes.clone(),
        ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted if raw.len() >= 2 => {
            node.bytes.start + 1..node.bytes.end - 1
        }
        ScalarStyle::Literal | ScalarStyle::Folded => {
            return Err(EditError::BlockScalar {
                target: label.to_string(),
                line: node.key_line,
            });
        }
        _ => return Err(not_integer(raw)),
    };
    let text = src.get(digits.clone()).unwrap_or_default();
    if raw.is_empty() {
        return Err(not_integer("null (empty)"));
    }
    // The source spelling must be the value itself: no escapes, no line folding.
    if text != value || !is_decimal(text) {
        return Err(not_integer(raw));
    }
    let replicas = text.parse().map_err(|_| not_integer(raw))?;
    Ok((digits, replicas))
}

/// Digits only, and no leading zero: `04` is octal to YAML 1.1 readers such as Kubernetes.
fn is_decimal(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

// ---------------------------------------------------------------------------------------------
// Verification.

/// Parse the edited text and require that exactly one node differs from `before`: the scalar at
/// `(doc, path)`, now `new_value`.
fn verify(
    before: &Flat,
    after_text: &str,
    doc: usize,
    path: &[Seg],
    new_value: &str,
) -> Result<(), EditError> {
    let fail = |message: String| Err(EditError::Verify { message });
    let after = match flatten(after_text) {
        Ok(flat) => flat,
        Err(e) => return fail(format!("the edited text no longer parses: {e}")),
    };
    if before.nodes.len() != after.nodes.len() || before.documents != after.documents {
        return fail(format!(
            "the edited text has {} document(s) and {} node(s), the original {} and {}",
            after.documents,
            after.nodes.len(),
            before.documents,
            before.nodes.len()
        ));
    }
    let changed: Vec<(&Node, &Node)> = before
        .nodes
        .iter()
        .zip(&after.nodes)
        .filter(|(b, a)| {
            (b.doc, &b.path, &b.kind, &b.anchors) != (a.doc, &a.path, &a.kind, &a.anchors)
        })
        .collect();
    let [(b, a)] = changed.as_slice() else {
        let places: Vec<String> = changed
            .iter()
            .map(|(b, _)| {
                format!(
                    "document {} {} (line {})",
                    b.doc,
                    path_string(&b.path),
                    b.line
                )
            })
            .collect();
        return fail(format!(
            "expected one changed value, found {}: {}",
            changed.len(),
            list_some(&places, 8)
        ));
    };
    let at_target = b.doc == doc && a.doc == doc && b.path == path && a.path == path;
    let new_ok = matches!(&a.kind, NodeKind::Scalar { value, .. } if value == new_value);
    let same_shape = match (&b.kind, &a.kind) {
        (
            NodeKind::Scalar {
                style: s1, tag: t1, ..
            },
            NodeKind::Scalar {
                style: s2, tag: t2, ..
            },
        ) => s1 == s2 && t1 == t2,
        _ => false,
    };
    if !(at_target && new_ok && same_shape) {
        return fail(format!(
            "the changed value is document {} {} = {:?}, expected document {doc} {} = {new_value}",
            a.doc,
            path_string(&a.path),
            a.kind,
            path_string(path)
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Unified diff.

/// A unified diff of `before` → `after`: `--- a/PATH`, `+++ b/PATH` and one hunk with up to three
/// lines of context, as `git diff` prints it for a change of lines. Empty when the texts are equal.
///
/// Meant for people (a PR body, a dry-run log): a `\r` before the line break is not shown, so a
/// CRLF file reads like an LF one. A last line without a line break is followed by
/// `\ No newline at end of file`, as git does.
pub fn unified_diff(path: &str, before: &str, after: &str) -> String {
    if before == after {
        return String::new();
    }
    let a: Vec<&str> = before.split_inclusive('\n').collect();
    let b: Vec<&str> = after.split_inclusive('\n').collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (a_mid, b_mid) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let before_ctx = prefix.min(3);
    let after_ctx = suffix.min(3);

    let mut body = Vec::new();
    for line in &a[prefix - before_ctx..prefix] {
        body.push((' ', *line));
    }
    body.extend(middle_ops(a_mid, b_mid));
    for line in &a[a.len() - suffix..a.len() - suffix + after_ctx] {
        body.push((' ', *line));
    }

    let old_len = body.iter().filter(|(op, _)| *op != '+').count();
    let new_len = body.iter().filter(|(op, _)| *op != '-').count();
    let start = prefix - before_ctx + 1;
    let mut out = format!(
        "--- a/{path}\n+++ b/{path}\n@@ -{} +{} @@\n",
        hunk_range(start, old_len),
        hunk_range(start, new_len)
    );
    for (op, line) in body {
        let text = line.strip_suffix('\n');
        let shown = text.unwrap_or(line);
        let shown = shown.strip_suffix('\r').unwrap_or(shown);
        out.push(op);
        out.push_str(shown);
        out.push('\n');
        if text.is_none() {
            out.push_str("\\ No newline at end of file\n");
        }
    }
    out
}

/// `start,len` as in a hunk header: `,1` is left out, and an empty range starts at the line
/// before it.
fn hunk_range(start: usize, len: usize) -> String {
    match len {
        0 => format!("{},0", start - 1),
        1 => start.to_string(),
        _ => format!("{start},{len}"),
    }
}

/// Lines of the changed middle as ` `, `-`, `+` operations: a longest common subsequence when the
/// middle is small, else everything removed then everything added (still a correct diff).
fn middle_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(char, &'a str)> {
    let (n, m) = (a.len(), b.len());
    if n.saturating_mul(m) > 1_000_000 {
        let mut ops: Vec<(char, &str)> = a.iter().map(|l| ('-', *l)).collect();
        ops.extend(b.iter().map(|l| ('+', *l)));
        return ops;
    }
    // lcs[i][j]: common subsequence length of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut ops) = (0, 0, Vec::with_capacity(n + m));
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if j == m || (i < n && lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    ops
}

#[cfg(test)]
mod tests;
