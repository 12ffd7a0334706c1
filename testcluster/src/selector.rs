//! Label and field selectors with the apimachinery grammar and semantics.
//!
//! Label selectors follow `k8s.io/apimachinery/pkg/labels`: equality (`a=b`, `a==b`, `a!=b`),
//! set-based (`a in (x,y)`, `a notin (x,y)`), existence (`a`, `!a`) and the numeric `a>1`,
//! `a<1`, joined by commas (AND). Field selectors follow `k8s.io/apimachinery/pkg/fields`:
//! `f=v`, `f==v`, `f!=v`, comma-joined, with `\` escapes in values.

use std::fmt;

use serde_json::{Map, Value};

/// An error parsing or validating a selector. Display is a one-line message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The label selector string or object is malformed.
    #[error("unable to parse requirement: {0}")]
    InvalidLabelSelector(String),
    /// The field selector string is malformed.
    #[error("invalid field selector: {0}")]
    InvalidFieldSelector(String),
    /// A field selector names a field the kind does not support.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

/// The operator of one label requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelOp {
    /// `key=value`
    Equals,
    /// `key==value`
    DoubleEquals,
    /// `key!=value` (also true when the label is absent)
    NotEquals,
    /// `key in (v1,v2)`
    In,
    /// `key notin (v1,v2)` (also true when the label is absent)
    NotIn,
    /// `key`
    Exists,
    /// `!key`
    DoesNotExist,
    /// `key>N` (integer comparison)
    GreaterThan,
    /// `key<N` (integer comparison)
    LessThan,
}

/// One requirement of a label selector: a key, an operator and its (sorted, unique) values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The operator.
    pub op: LabelOp,
    /// Values, sorted and deduplicated; empty for `Exists`/`DoesNotExist`.
    pub values: Vec<String>,
}

impl Requirement {
    fn new(key: &str, op: LabelOp, mut values: Vec<String>) -> Result<Self, SelectorError> {
        validate_label_key(key)?;
        match op {
            LabelOp::In | LabelOp::NotIn => {
                if values.is_empty() {
                    return Err(SelectorError::InvalidLabelSelector(format!(
                        "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty (key {key:?})"
                    )));
                }
            }
            LabelOp::Equals | LabelOp::DoubleEquals | LabelOp::NotEquals => {
                if values.len() != 1 {
                    return Err(SelectorError::InvalidLabelSelector(format!(
                        "values: Invalid value: {values:?}: exact-match compatibility requires one single value (key {key:?})"
                    )));
                }
            }
            LabelOp::Exists | LabelOp::DoesNotExist => {
                if !values.is_empty() {
                    return Err(SelectorError::InvalidLabelSelector(format!(
                        "values: Invalid value: {values:?}: values set must be empty for exists and does not exist (key {key:?})"
                    )));
                }
            }
            LabelOp::GreaterThan | LabelOp::LessThan => {
                if values.len() != 1 || values[0].parse::<i64>().is_err() {
                    return Err(SelectorError::InvalidLabelSelector(format!(
                        "values: Invalid value: {values:?}: for 'Gt', 'Lt' operators, exactly one integer value is required (key {key:?})"
                    )));
                }
            }
        }
        if !matches!(op, LabelOp::GreaterThan | LabelOp::LessThan) {
            for v in &values {
                validate_label_value(key, v)?;
            }
        }
        values.sort();
        values.dedup();
        Ok(Requirement {
            key: key.to_string(),
            op,
            values,
        })
    }

    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let value = labels.and_then(|l| l.get(&self.key)).map(label_text);
        let in_set = |v: &str| self.values.iter().any(|x| x == v);
        match self.op {
            LabelOp::Equals | LabelOp::DoubleEquals | LabelOp::In => {
                value.is_some_and(|v| in_set(&v))
            }
            LabelOp::NotEquals | LabelOp::NotIn => value.is_none_or(|v| !in_set(&v)),
            LabelOp::Exists => value.is_some(),
            LabelOp::DoesNotExist => value.is_none(),
            LabelOp::GreaterThan | LabelOp::LessThan => {
                let Some(have) = value.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let Some(want) = self.values.first().and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                if self.op == LabelOp::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.values.first().map(String::as_str).unwrap_or("");
        match self.op {
            LabelOp::Equals => write!(f, "{}={first}", self.key),
            LabelOp::DoubleEquals => write!(f, "{}=={first}", self.key),
            LabelOp::NotEquals => write!(f, "{}!={first}", self.key),
            LabelOp::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            LabelOp::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
            LabelOp::Exists => write!(f, "{}", self.key),
            LabelOp::DoesNotExist => write!(f, "!{}", self.key),
            LabelOp::GreaterThan => write!(f, "{}>{first}", self.key),
            LabelOp::LessThan => write!(f, "{}<{first}", self.key),
        }
    }
}

/// Label values are strings; anything else is compared by its JSON text.
fn label_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A parsed label selector: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`, `a`, `!a`,
/// comma-joined (AND). Input arrives already form-decoded (the caller maps `+` to space).
/// Whitespace tolerant, like apimachinery.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    /// Requirements sorted by key (stable), as `labels.Selector.Add` keeps them.
    requirements: Vec<Requirement>,
    /// `labels.Nothing()`: what a null selector object means.
    nothing: bool,
}

impl LabelSelector {
    /// A selector matching every label set.
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// A selector matching nothing (`labels.Nothing()`, from a null selector object).
    pub fn nothing() -> Self {
        LabelSelector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Parses the string form used by `?labelSelector=`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let tokens = lex(s)?;
        let mut p = Parser { tokens, pos: 0 };
        let mut reqs = Vec::new();
        if p.peek() == &Tok::End {
            return Ok(LabelSelector::everything());
        }
        loop {
            reqs.push(p.requirement()?);
            match p.next() {
                Tok::End => break,
                // A trailing `a,` then fails in `requirement`, as in apimachinery.
                Tok::Comma => {}
                other => {
                    return Err(SelectorError::InvalidLabelSelector(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        other.text()
                    )));
                }
            }
        }
        Ok(Self::from_requirements(reqs))
    }

    fn from_requirements(mut reqs: Vec<Requirement>) -> Self {
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector {
            requirements: reqs,
            nothing: false,
        }
    }

    /// From a LabelSelector object (`matchLabels`, `matchExpressions` with
    /// In/NotIn/Exists/DoesNotExist). `{}` matches everything, `null` matches nothing (as
    /// `metav1.LabelSelectorAsSelector`); used by Deployments, PDBs, aggregation rules.
    pub fn from_object(v: &Value) -> Result<Self, SelectorError> {
        let obj = match v {
            Value::Null => return Ok(LabelSelector::nothing()),
            Value::Object(o) => o,
            other => {
                return Err(SelectorError::InvalidLabelSelector(format!(
                    "label selector must be an object, got {other}"
                )));
            }
        };
        let mut reqs = Vec::new();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    let Value::String(v) = v else {
                        return Err(SelectorError::InvalidLabelSelector(format!(
                            "matchLabels[{k}] must be a string, got {v}"
                        )));
                    };
                    reqs.push(Requirement::new(k, LabelOp::Equals, vec![v.clone()])?);
                }
            }
            Some(other) => {
                return Err(SelectorError::InvalidLabelSelector(format!(
                    "matchLabels must be an object, got {other}"
                )));
            }
        }
        match obj.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for e in exprs {
                    reqs.push(expression_requirement(e)?);
                }
            }
            Some(other) => {
                return Err(SelectorError::InvalidLabelSelector(format!(
                    "matchExpressions must be a list, got {other}"
                )));
            }
        }
        Ok(Self::from_requirements(reqs))
    }

    /// From a plain `key: value` map (a Service's or ReplicaSet's `selector`); no validation.
    pub fn from_map(m: &Map<String, Value>) -> Self {
        let reqs = m
            .iter()
            .map(|(k, v)| Requirement {
                key: k.clone(),
                op: LabelOp::Equals,
                values: vec![label_text(v)],
            })
            .collect();
        Self::from_requirements(reqs)
    }

    /// Whether the labels (an object's `metadata.labels`; `None` for no labels) satisfy every
    /// requirement.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// True when the selector has no requirements (matches everything). A `nothing()`
    /// selector is not empty, as in apimachinery.
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

fn expression_requirement(e: &Value) -> Result<Requirement, SelectorError> {
    let key = e.get("key").and_then(Value::as_str).unwrap_or("");
    let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
    let values: Vec<String> = match e.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.iter().map(label_text).collect(),
        Some(other) => {
            return Err(SelectorError::InvalidLabelSelector(format!(
                "matchExpressions values must be a list, got {other}"
            )));
        }
    };
    let op = match op {
        "In" => LabelOp::In,
        "NotIn" => LabelOp::NotIn,
        "Exists" => LabelOp::Exists,
        "DoesNotExist" => LabelOp::DoesNotExist,
        other => {
            return Err(SelectorError::InvalidLabelSelector(format!(
                "{other:?} is not a valid label selector operator"
            )));
        }
    };
    Requirement::new(key, op, values)
}

impl fmt::Display for LabelSelector {
    /// The canonical form `metav1.LabelSelectorAsSelector(..).String()` gives: requirements
    /// sorted by key, joined by `,`; set values sorted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(s)
    }
}

// ---------- label selector lexer/parser (after apimachinery's labels/selector.go) ----------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    In,
    NotIn,
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
    End,
}

impl Tok {
    fn text(&self) -> String {
        match self {
            Tok::Ident(s) => s.clone(),
            Tok::In => "in".into(),
            Tok::NotIn => "notin".into(),
            Tok::Eq => "=".into(),
            Tok::DoubleEq => "==".into(),
            Tok::NotEq => "!=".into(),
            Tok::Bang => "!".into(),
            Tok::Gt => ">".into(),
            Tok::Lt => "<".into(),
            Tok::Open => "(".into(),
            Tok::Close => ")".into(),
            Tok::Comma => ",".into(),
            Tok::End => String::new(),
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn lex(s: &str) -> Result<Vec<Tok>, SelectorError> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if is_special(c) {
            let next = chars.get(i + 1).copied();
            let (tok, len) = match (c, next) {
                ('=', Some('=')) => (Tok::DoubleEq, 2),
                ('!', Some('=')) => (Tok::NotEq, 2),
                ('=', _) => (Tok::Eq, 1),
                ('!', _) => (Tok::Bang, 1),
                ('(', _) => (Tok::Open, 1),
                (')', _) => (Tok::Close, 1),
                (',', _) => (Tok::Comma, 1),
                ('>', _) => (Tok::Gt, 1),
                ('<', _) => (Tok::Lt, 1),
                _ => {
                    return Err(SelectorError::InvalidLabelSelector(format!(
                        "error lexing {c:?}"
                    )));
                }
            };
            out.push(tok);
            i += len;
            continue;
        }
        let start = i;
        while i < chars.len() && !chars[i].is_whitespace() && !is_special(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        out.push(match word.as_str() {
            "in" => Tok::In,
            "notin" => Tok::NotIn,
            _ => Tok::Ident(word),
        });
    }
    out.push(Tok::End);
    Ok(out)
}

struct Parser {
    tokens: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> &Tok {
        self.tokens.get(self.pos).unwrap_or(&Tok::End)
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.pos < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn err<T>(msg: String) -> Result<T, SelectorError> {
        Err(SelectorError::InvalidLabelSelector(msg))
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let bang = if self.peek() == &Tok::Bang {
            self.next();
            true
        } else {
            false
        };
        let key = match self.next() {
            Tok::Ident(k) => k,
            other if bang => {
                return Self::err(format!(
                    "found '{}', expected: identifier after '!'",
                    other.text()
                ));
            }
            other => return Self::err(format!("found '{}', expected: identifier", other.text())),
        };
        if bang {
            return Requirement::new(&key, LabelOp::DoesNotExist, Vec::new());
        }
        let op = match self.peek() {
            Tok::Comma | Tok::End => return Requirement::new(&key, LabelOp::Exists, Vec::new()),
            Tok::Eq => LabelOp::Equals,
            Tok::DoubleEq => LabelOp::DoubleEquals,
            Tok::NotEq => LabelOp::NotEquals,
            Tok::In => LabelOp::In,
            Tok::NotIn => LabelOp::NotIn,
            Tok::Gt => LabelOp::GreaterThan,
            Tok::Lt => LabelOp::LessThan,
            other => {
                return Self::err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    other.text()
                ));
            }
        };
        self.next();
        let values = match op {
            LabelOp::In | LabelOp::NotIn => self.set_values()?,
            _ => match self.peek().clone() {
                // `a=` selects the empty value, as in apimachinery.
                Tok::Comma | Tok::End => vec![String::new()],
                Tok::Ident(v) => {
                    self.next();
                    vec![v]
                }
                // Keywords are valid values (`a=in`).
                t @ (Tok::In | Tok::NotIn) => {
                    self.next();
                    vec![t.text()]
                }
                other => {
                    return Self::err(format!(
                        "found '{}', expected: identifier for value",
                        other.text()
                    ));
                }
            },
        };
        Requirement::new(&key, op, values)
    }

    /// `( v1, v2, ... )`; `()` is the set holding the empty value, as apimachinery parses it.
    fn set_values(&mut self) -> Result<Vec<String>, SelectorError> {
        match self.next() {
            Tok::Open => {}
            other => return Self::err(format!("found '{}' expected: '('", other.text())),
        }
        let mut values = Vec::new();
        let mut current: Option<String> = None;
        loop {
            match self.next() {
                Tok::Ident(v) => {
                    if current.is_some() {
                        return Self::err(format!("found '{v}', expected: ',' or ')'"));
                    }
                    current = Some(v);
                }
                t @ (Tok::In | Tok::NotIn) => {
                    if current.is_some() {
                        return Self::err(format!("found '{}', expected: ',' or ')'", t.text()));
                    }
                    current = Some(t.text());
                }
                Tok::Comma => values.push(current.take().unwrap_or_default()),
                Tok::Close => {
                    values.push(current.take().unwrap_or_default());
                    return Ok(values);
                }
                other => {
                    return Self::err(format!(
                        "found '{}', expected: ',', ')' or identifier",
                        other.text()
                    ));
                }
            }
        }
    }
}

// ---------- label key/value validation (IsQualifiedName / IsValidLabelValue) ----------

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && !s.is_empty()
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

fn validate_label_key(key: &str) -> Result<(), SelectorError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(is_dns_subdomain);
    if prefix_ok && is_name_part(name) {
        Ok(())
    } else {
        Err(SelectorError::InvalidLabelSelector(format!(
            "key: Invalid value: {key:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (with an optional DNS subdomain prefix and '/')"
        )))
    }
}

fn validate_label_value(key: &str, v: &str) -> Result<(), SelectorError> {
    if v.is_empty() || is_name_part(v) {
        Ok(())
    } else {
        Err(SelectorError::InvalidLabelSelector(format!(
            "values[0][{key}]: Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        )))
    }
}

// ---------- field selectors ----------

/// The operator of one field requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOp {
    /// `f=v` or `f==v`
    Equals,
    /// `f!=v`
    NotEquals,
}

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// Dotted field path, e.g. `metadata.name`.
    pub field: String,
    /// The operator.
    pub op: FieldOp,
    /// The unescaped value.
    pub value: String,
}

/// Field selector: `f=v`, `f==v`, `f!=v`, comma-joined. Field paths are dotted
/// (`metadata.name`, `involvedObject.uid`, `status.phase`, `spec.nodeName`, `type`, `reason`,
/// `regarding.name` ...).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

const ALL_KINDS_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];
const POD_FIELDS: &[&str] = &[
    "status.phase",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.podIP",
    "status.nominatedNodeName",
];
const CORE_EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];
const EVENTS_V1_FIELDS: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
];

/// The fields, beyond `metadata.name` and `metadata.namespace`, a kind supports in field
/// selectors.
pub fn kind_specific_fields(group: &str, kind: &str) -> &'static [&'static str] {
    match (group, kind) {
        ("", "Pod") => POD_FIELDS,
        ("", "Event") => CORE_EVENT_FIELDS,
        ("events.k8s.io", "Event") => EVENTS_V1_FIELDS,
        ("", "Secret") => &["type"],
        ("", "Namespace") => &["status.phase"],
        ("", "Node") => &["spec.unschedulable"],
        ("", "ReplicationController") | ("apps", "ReplicaSet") => &["status.replicas"],
        ("batch", "Job") => &["status.successful"],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses the string form used by `?fieldSelector=` (already form-decoded).
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for term in split_terms(s) {
            if term.trim().is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(&term) else {
                return Err(SelectorError::InvalidFieldSelector(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                )));
            };
            let field = lhs.trim().to_string();
            if field.is_empty() {
                return Err(SelectorError::InvalidFieldSelector(format!(
                    "invalid selector: '{s}'; empty field in '{term}'"
                )));
            }
            let value = unescape_value(rhs)?;
            requirements.push(FieldRequirement { field, op, value });
        }
        requirements.sort_by(|a, b| a.field.cmp(&b.field));
        Ok(FieldSelector { requirements })
    }

    /// Checks every field is one the kind supports: all kinds support `metadata.name` and
    /// `metadata.namespace`, plus [`kind_specific_fields`]. Unsupported fields give
    /// `field label not supported: spec.foo`, as the real server does.
    pub fn validate_for(&self, group: &str, kind: &str) -> Result<(), SelectorError> {
        self.validate_with(kind_specific_fields(group, kind))
    }

    /// Like [`FieldSelector::validate_for`] with an explicit list of extra fields (for a CRD's
    /// `selectableFields`, given without the leading dot).
    pub fn validate_with(&self, extra: &[&str]) -> Result<(), SelectorError> {
        for r in &self.requirements {
            let f = r.field.as_str();
            if !ALL_KINDS_FIELDS.contains(&f) && !extra.contains(&f) {
                return Err(SelectorError::UnsupportedField(r.field.clone()));
            }
        }
        Ok(())
    }

    /// Whether the object satisfies every term. Missing fields compare as the empty string
    /// (as the real server does).
    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements.iter().all(|r| {
            let have = field_value(obj, &r.field);
            match r.op {
                FieldOp::Equals => have == r.value,
                FieldOp::NotEquals => have != r.value,
            }
        })
    }

    /// True when there are no terms (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The terms, sorted by field.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// The value an `=`/`==` term requires of `field`, if any (e.g. `metadata.name` for a
    /// single-object watch, or `spec.nodeName` for a kubelet).
    pub fn exact_value(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.op == FieldOp::Equals)
            .map(|r| r.value.as_str())
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = match r.op {
                FieldOp::Equals => "=",
                FieldOp::NotEquals => "!=",
            };
            write!(f, "{}{op}{}", r.field, escape_value(&r.value))?;
        }
        Ok(())
    }
}

impl std::str::FromStr for FieldSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FieldSelector::parse(s)
    }
}

/// The value of a dotted field as the server's field sets hold it: strings as they are,
/// numbers and booleans in their text form, anything missing as "".
fn field_value(obj: &Value, path: &str) -> String {
    // Core Events: `source` is `source.component`, falling back to `reportingComponent`.
    if path == "source"
        && let Some(Value::Object(src)) = obj.get("source")
    {
        let component = src.get("component").and_then(Value::as_str).unwrap_or("");
        if component.is_empty() {
            return obj
                .get("reportingComponent")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
        }
        return component.to_string();
    }
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

/// Splits on commas not escaped with a backslash.
fn split_terms(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            cur.push(c);
            escaped = true;
        } else if c == ',' {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    out.push(cur);
    out
}

/// Splits a term at its first unescaped operator, trying `!=`, `==`, `=` at each position.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    let mut escaped = false;
    for (i, c) in term.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if c == '\\' {
            escaped = true;
            continue;
        }
        let rest = &term[i..];
        for (op, kind) in [
            ("!=", FieldOp::NotEquals),
            ("==", FieldOp::Equals),
            ("=", FieldOp::Equals),
        ] {
            if rest.starts_with(op) {
                return Some((&term[..i], kind, &term[i + op.len()..]));
            }
        }
    }
    None
}

fn unescape_value(s: &str) -> Result<String, SelectorError> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=' | '!')) => out.push(e),
                Some(other) => {
                    return Err(SelectorError::InvalidFieldSelector(format!(
                        "invalid field selector value {s:?}: invalid escape sequence '\\{other}'"
                    )));
                }
                None => {
                    return Err(SelectorError::InvalidFieldSelector(format!(
                        "invalid field selector value {s:?}: unterminated escape sequence"
                    )));
                }
            }
        } else if matches!(c, ',' | '=') {
            return Err(SelectorError::InvalidFieldSelector(format!(
                "invalid field selector value {s:?}: unescaped '{c}'"
            )));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

fn escape_value(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=' | '!') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn set_based_parse_and_match() {
        let s = LabelSelector::parse("env in (prod,staging),tier notin (db),app,!legacy").unwrap();
        assert!(s.matches(Some(&labels(json!({"env":"prod","tier":"web","app":"x"})))));
        // notin is true when the label is absent.
        assert!(s.matches(Some(&labels(json!({"env":"staging","app":"x"})))));
        assert!(!s.matches(Some(&labels(json!({"env":"dev","app":"x"})))));
        assert!(!s.matches(Some(&labels(json!({"env":"prod","tier":"db","app":"x"})))));
        // exists
        assert!(!s.matches(Some(&labels(json!({"env":"prod"})))));
        // !exists
        assert!(!s.matches(Some(&labels(json!({"env":"prod","app":"x","legacy":"1"})))));
        assert!(!s.matches(None));
        assert!(LabelSelector::parse("!legacy").unwrap().matches(None));
    }

    #[test]
    fn whitespace_forms() {
        let a = LabelSelector::parse("app in (a, b)").unwrap();
        let b = LabelSelector::parse("  app   in(a,b )  ").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "app in (a,b)");
        let c = LabelSelector::parse("x = y , z != w").unwrap();
        assert_eq!(c.to_string(), "x=y,z!=w");
        assert!(c.matches(Some(&labels(json!({"x":"y"})))));
        assert!(LabelSelector::parse("").unwrap().is_empty());
        assert!(LabelSelector::parse("   ").unwrap().matches(None));
    }

    #[test]
    fn invalid_syntax_errors() {
        for bad in [
            "a in b",
            "a in (b",
            "a notin",
            "!",
            "a b",
            "a=b,",
            ",a",
            "a=(b)",
            "a in (b c)",
            "-bad=x",
            "a=b=c",
            "a>x",
            "a=-x",
        ] {
            let err = LabelSelector::parse(bad);
            assert!(err.is_err(), "{bad:?} parsed as {err:?}");
        }
        let msg = LabelSelector::parse("a in b").unwrap_err().to_string();
        assert!(msg.starts_with("unable to parse requirement"), "{msg}");
    }

    #[test]
    fn display_is_canonical() {
        let s = LabelSelector::parse("z=1,b in (y,x),a,!c,d!=2,e notin (q,p)").unwrap();
        assert_eq!(s.to_string(), "a,b in (x,y),!c,d!=2,e notin (p,q),z=1");
        let m = LabelSelector::from_map(&labels(json!({"b":"2","a":"1"})));
        assert_eq!(m.to_string(), "a=1,b=2");
        assert_eq!(LabelSelector::parse("a==b").unwrap().to_string(), "a==b");
    }

    #[test]
    fn numeric_and_empty_value_forms() {
        let s = LabelSelector::parse("n>3,m<10").unwrap();
        assert!(s.matches(Some(&labels(json!({"n":"4","m":"2"})))));
        assert!(!s.matches(Some(&labels(json!({"n":"3","m":"2"})))));
        let e = LabelSelector::parse("a=").unwrap();
        assert!(e.matches(Some(&labels(json!({"a":""})))));
        assert!(!e.matches(None));
    }

    #[test]
    fn from_object_with_match_expressions() {
        let sel = LabelSelector::from_object(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["fe", "be"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "Exists"},
                {"key": "env", "operator": "NotIn", "values": ["dev"]}
            ]
        }))
        .unwrap();
        assert_eq!(
            sel.to_string(),
            "app=web,!canary,env notin (dev),tier in (be,fe),zone"
        );
        assert!(sel.matches(Some(&labels(json!({"app":"web","tier":"fe","zone":"a"})))));
        assert!(!sel.matches(Some(&labels(
            json!({"app":"web","tier":"fe","zone":"a","canary":"y"})
        ))));
        assert!(!sel.matches(Some(&labels(json!({"app":"web","tier":"fe"})))));
        // {} matches everything; null matches nothing.
        assert!(
            LabelSelector::from_object(&json!({}))
                .unwrap()
                .matches(None)
        );
        assert!(
            !LabelSelector::from_object(&Value::Null)
                .unwrap()
                .matches(None)
        );
        // Invalid operator and missing values are errors.
        assert!(
            LabelSelector::from_object(&json!({"matchExpressions":[{"key":"a","operator":"Foo"}]}))
                .is_err()
        );
        assert!(
            LabelSelector::from_object(
                &json!({"matchExpressions":[{"key":"a","operator":"In","values":[]}]})
            )
            .is_err()
        );
    }

    #[test]
    fn field_selector_on_event_involved_object_uid() {
        let ev = json!({
            "metadata": {"name": "e1", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "uid": "abc-123", "name": "p"},
            "reason": "Started",
            "source": {"component": "kubelet"},
            "type": "Normal"
        });
        let fs = FieldSelector::parse("involvedObject.uid=abc-123,type==Normal").unwrap();
        fs.validate_for("", "Event").unwrap();
        assert!(fs.matches(&ev));
        assert!(
            !FieldSelector::parse("involvedObject.uid=other")
                .unwrap()
                .matches(&ev)
        );
        assert!(FieldSelector::parse("source=kubelet").unwrap().matches(&ev));
        // Missing fields compare as "".
        assert!(
            FieldSelector::parse("involvedObject.fieldPath=")
                .unwrap()
                .matches(&ev)
        );
        let fs2 = FieldSelector::parse("regarding.uid=abc").unwrap();
        fs2.validate_for("events.k8s.io", "Event").unwrap();
        assert!(fs2.validate_for("", "Event").is_err());
    }

    #[test]
    fn unsupported_field_rejected() {
        let fs = FieldSelector::parse("spec.foo=bar").unwrap();
        let err = fs.validate_for("", "Pod").unwrap_err();
        assert_eq!(err.to_string(), "field label not supported: spec.foo");
        FieldSelector::parse("metadata.name=x")
            .unwrap()
            .validate_for("example.com", "Widget")
            .unwrap();
        FieldSelector::parse("spec.nodeName=n1,status.phase=Running")
            .unwrap()
            .validate_for("", "Pod")
            .unwrap();
        assert!(FieldSelector::parse("novalue").is_err());
    }

    #[test]
    fn field_not_equals() {
        let pod = json!({"metadata":{"name":"p"},"status":{"phase":"Running"}});
        let fs = FieldSelector::parse("status.phase!=Succeeded,status.phase!=Failed").unwrap();
        assert!(fs.matches(&pod));
        let fs = FieldSelector::parse("status.phase!=Running").unwrap();
        assert!(!fs.matches(&pod));
        // Numbers compare by their text form.
        let job = json!({"status":{"successful":1}});
        assert!(
            FieldSelector::parse("status.successful=1")
                .unwrap()
                .matches(&job)
        );
        // Escapes.
        let fs = FieldSelector::parse(r"metadata.name=a\,b").unwrap();
        assert_eq!(fs.exact_value("metadata.name"), Some("a,b"));
        assert_eq!(fs.to_string(), r"metadata.name=a\,b");
    }
}
