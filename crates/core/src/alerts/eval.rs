//! A PromQL evaluator for the subset the shipped rules and the dashboard use, on a
//! [`SampleStore`] at one instant.
//!
//! Supported: instant selectors with `=`, `!=`, `=~`, `!~` matchers; range selectors as
//! the argument of `rate`, `increase`, `deriv`, `avg_over_time`, `max_over_time`,
//! `min_over_time`; `sum`, `max`, `min`, `avg`, `count` with `by` / `without`; arithmetic
//! (`+ - * / % ^`) and comparisons (`== != > < >= <=`, with or without `bool`) between
//! scalars and vectors and between vectors (one-to-one matching, `on` / `ignoring`); `and`,
//! `or`, `unless`; unary minus; number literals; parentheses. Anything else is
//! [`AlertError::Unsupported`], naming the construct.
//!
//! Semantics follow Prometheus 3:
//!
//! - An instant selector at `t` takes each series' latest point in `(t − 5 min, t]`, none
//!   when that point is a staleness marker.
//! - A range selector `[r]` takes the points in `(t − r, t]`, staleness markers left out.
//! - `rate` / `increase` add back counter resets (a decrease counts as a restart from 0)
//!   and extrapolate to the window's edges as Prometheus' `extrapolatedRate` does: to an
//!   edge when the first or last point lies within 1.1 average sample intervals of it,
//!   else by half an interval, and never below the counter's zero point.
//! - `deriv` is the least-squares slope per second (0 for a constant series).
//! - Functions, arithmetic and `bool` comparisons drop `__name__`; filtering comparisons
//!   and set operators keep the left side's labels; a one-to-one result with `on(...)`
//!   keeps only those labels, with `ignoring(...)` drops them. Duplicate label sets in a
//!   result, or a match group with several series on one side, are errors, as there.
//!
//! Not modelled: native histograms, `offset` and `@` (unsupported), and the lookback
//! delta as a setting (always 5 minutes).

use std::collections::{BTreeMap, BTreeSet};

use promql_parser::label::{MatchOp, Matchers};
use promql_parser::parser::token::{
    T_ADD, T_AVG, T_COUNT, T_DIV, T_EQLC, T_GTE, T_GTR, T_LAND, T_LOR, T_LSS, T_LTE, T_LUNLESS,
    T_MAX, T_MIN, T_MOD, T_MUL, T_NEQ, T_POW, T_SUB, T_SUM, TokenId,
};
use promql_parser::parser::{
    AggregateExpr, BinaryExpr, Call, Expr, LabelModifier, MatrixSelector, VectorMatchCardinality,
    VectorSelector,
};

use super::AlertError;
use super::store::{SampleStore, is_stale_marker};

/// Label sets, `__name__` included while an expression keeps it.
pub(super) type Labels = BTreeMap<String, String>;

/// A series' points, `(t seconds, value)`.
type Points = [(f64, f64)];
/// A range selector's result for one series.
type RangeSeries = (Labels, Vec<(f64, f64)>);
/// A range function: the window's points, the evaluation time and the range (seconds).
type RangeFn = fn(&Points, f64, f64) -> Option<f64>;

const NAME: &str = "__name__";
/// Prometheus' default lookback delta for instant selectors.
pub const LOOKBACK_S: f64 = 300.0;

/// One element of an instant vector.
#[derive(Clone, Debug, PartialEq)]
pub struct InstantSample {
    /// Labels, with `__name__` where the expression keeps it.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

/// The result of evaluating an expression.
enum Value {
    Scalar(f64),
    Vector(Vec<InstantSample>),
    /// A range selector's points per series; only valid as a function argument.
    Matrix,
}

/// Parses `expr` with `promql-parser`.
pub fn parse(expr: &str) -> Result<Expr, AlertError> {
    promql_parser::parser::parse(expr).map_err(|message| AlertError::Parse {
        expr: expr.trim().to_string(),
        message,
    })
}

/// Evaluates a parsed expression at `t_s` to an instant vector; a scalar result becomes
/// one sample without labels (as a rule's result does in Prometheus).
pub fn eval_instant(
    expr: &Expr,
    store: &SampleStore,
    t_s: f64,
) -> Result<Vec<InstantSample>, AlertError> {
    let ctx = Ctx { store, t: t_s };
    match ctx.eval(expr)? {
        Value::Scalar(value) => Ok(vec![InstantSample {
            labels: Labels::new(),
            value,
        }]),
        Value::Vector(v) => Ok(v),
        Value::Matrix => Err(AlertError::Eval(
            "the expression is a range vector; an alert needs an instant vector".into(),
        )),
    }
}

struct Ctx<'a> {
    store: &'a SampleStore,
    t: f64,
}

fn unsupported(what: impl Into<String>) -> AlertError {
    AlertError::Unsupported(what.into())
}

impl Ctx<'_> {
    fn eval(&self, expr: &Expr) -> Result<Value, AlertError> {
        match expr {
            Expr::NumberLiteral(n) => Ok(Value::Scalar(n.val)),
            Expr::Paren(p) => self.eval(&p.expr),
            Expr::VectorSelector(vs) => Ok(Value::Vector(self.select_instant(vs)?)),
            Expr::MatrixSelector(ms) => {
                self.select_range(ms)?;
                Ok(Value::Matrix)
            }
            Expr::Unary(u) => match self.eval(&u.expr)? {
                Value::Scalar(v) => Ok(Value::Scalar(-v)),
                Value::Vector(v) => {
                    let out = v
                        .into_iter()
                        .map(|s| InstantSample {
                            labels: without_name(s.labels),
                            value: -s.value,
                        })
                        .collect();
                    Ok(Value::Vector(unique(out)?))
                }
                Value::Matrix => Err(unsupported("unary minus on a range vector")),
            },
            Expr::Aggregate(a) => self.aggregate(a),
            Expr::Binary(b) => self.binary(b),
            Expr::Call(c) => self.call(c),
            Expr::Subquery(_) => Err(unsupported("subquery")),
            Expr::StringLiteral(_) => Err(unsupported("string literal")),
            Expr::Extension(_) => Err(unsupported("extension expression")),
        }
    }

    fn vector(&self, expr: &Expr, what: &str) -> Result<Vec<InstantSample>, AlertError> {
        match self.eval(expr)? {
            Value::Vector(v) => Ok(v),
            _ => Err(AlertError::Eval(format!("{what} needs an instant vector"))),
        }
    }

    /// Series of the store the selector matches, with `__name__` among their labels.
    fn matching<'s>(
        &'s self,
        vs: &'s VectorSelector,
    ) -> Result<impl Iterator<Item = (Labels, &'s Points)> + 's, AlertError> {
        if vs.offset.is_some() {
            return Err(unsupported("`offset` modifier"));
        }
        if vs.at.is_some() {
            return Err(unsupported("`@` modifier"));
        }
        if !vs.matchers.or_matchers.is_empty() {
            return Err(unsupported("`or` inside a label matcher"));
        }
        Ok(self.store.series().iter().filter_map(move |s| {
            if vs.name.as_ref().is_some_and(|n| *n != s.name) {
                return None;
            }
            let mut labels = s.labels.clone();
            labels.insert(NAME.to_string(), s.name.clone());
            matches_all(&vs.matchers, &labels).then_some((labels, s.points.as_slice()))
        }))
    }

    fn select_instant(&self, vs: &VectorSelector) -> Result<Vec<InstantSample>, AlertError> {
        let t = self.t;
        Ok(self
            .matching(vs)?
            .filter_map(|(labels, points)| {
                let end = points.partition_point(|p| p.0 <= t);
                let &(pt, value) = points[..end].last()?;
                (pt > t - LOOKBACK_S && !is_stale_marker(value))
                    .then_some(InstantSample { labels, value })
            })
            .collect())
    }

    /// Each matching series with its points in `(t − range, t]`, staleness markers left
    /// out; series without points are left out.
    fn select_range(&self, ms: &MatrixSelector) -> Result<Vec<RangeSeries>, AlertError> {
        let range = ms.range.as_secs_f64();
        let t = self.t;
        Ok(self
            .matching(&ms.vs)?
            .filter_map(|(labels, points)| {
                let start = points.partition_point(|p| p.0 <= t - range);
                let end = points.partition_point(|p| p.0 <= t);
                let kept: Vec<(f64, f64)> = points[start..end.max(start)]
                    .iter()
                    .copied()
                    .filter(|p| !is_stale_marker(p.1))
                    .collect();
                (!kept.is_empty()).then_some((labels, kept))
            })
            .collect())
    }

    fn call(&self, c: &Call) -> Result<Value, AlertError> {
        let name = c.func.name;
        let [arg] = c.args.args.as_slice() else {
            return Err(unsupported(format!("function `{name}`")));
        };
        let f: RangeFn = match name {
            "rate" => |p, t, r| extrapolated_rate(p, t - r, t, r, true),
            "increase" => |p, t, r| extrapolated_rate(p, t - r, t, r, false),
            "deriv" => |p, _, _| slope(p),
            "avg_over_time" => |p, _, _| Some(p.iter().map(|x| x.1).sum::<f64>() / p.len() as f64),
            "max_over_time" => |p, _, _| p.iter().map(|x| x.1).reduce(nan_max),
            "min_over_time" => |p, _, _| p.iter().map(|x| x.1).reduce(nan_min),
            _ => return Err(unsupported(format!("function `{name}`"))),
        };
        let ms = match arg.as_ref() {
            Expr::MatrixSelector(ms) => ms,
            Expr::Subquery(_) => return Err(unsupported(format!("subquery in `{name}`"))),
            _ => {
                return Err(unsupported(format!(
                    "`{name}` of anything but a range selector"
                )));
            }
        };
        let range = ms.range.as_secs_f64();
        let out = self
            .select_range(ms)?
            .into_iter()
            .filter_map(|(labels, points)| {
                f(&points, self.t, range).map(|value| InstantSample {
                    labels: without_name(labels),
                    value,
                })
            })
            .collect();
        Ok(Value::Vector(unique(out)?))
    }

    fn aggregate(&self, a: &AggregateExpr) -> Result<Value, AlertError> {
        let op = a.op.id();
        if a.param.is_some() || !matches!(op, T_SUM | T_AVG | T_COUNT | T_MIN | T_MAX) {
            return Err(unsupported(format!("aggregation `{}`", a.op)));
        }
        let input = self.vector(&a.expr, &format!("`{}`", a.op))?;
        // Per group: (sum, count, min, max).
        let mut groups: BTreeMap<Labels, (f64, f64, f64, f64)> = BTreeMap::new();
        for s in input {
            let key: Labels = match &a.modifier {
                Some(LabelModifier::Include(by)) => s
                    .labels
                    .into_iter()
                    .filter(|(k, _)| by.labels.contains(k))
                    .collect(),
                Some(LabelModifier::Exclude(without)) => s
                    .labels
                    .into_iter()
                    .filter(|(k, _)| k != NAME && !without.labels.contains(k))
                    .collect(),
                None => Labels::new(),
            };
            let g = groups.entry(key).or_insert((0.0, 0.0, f64::NAN, f64::NAN));
            g.0 += s.value;
            g.1 += 1.0;
            g.2 = nan_min(g.2, s.value);
            g.3 = nan_max(g.3, s.value);
        }
        let out = groups
            .into_iter()
            .map(|(labels, (sum, n, min, max))| InstantSample {
                labels,
                value: match op {
                    T_SUM => sum,
                    T_AVG => sum / n,
                    T_COUNT => n,
                    T_MIN => min,
                    _ => max,
                },
            })
            .collect();
        Ok(Value::Vector(out))
    }

    fn binary(&self, b: &BinaryExpr) -> Result<Value, AlertError> {
        let op = b.op.id();
        let modifier = b.modifier.as_ref();
        if let Some(m) = modifier {
            if matches!(
                m.card,
                VectorMatchCardinality::ManyToOne(_) | VectorMatchCardinality::OneToMany(_)
            ) {
                return Err(unsupported("`group_left` / `group_right` matching"));
            }
            if m.fill_values.lhs.is_some() || m.fill_values.rhs.is_some() {
                return Err(unsupported("`fill` modifiers"));
            }
        }
        let kind = OpKind::of(op).ok_or_else(|| unsupported(format!("operator `{}`", b.op)))?;
        let return_bool = modifier.is_some_and(|m| m.return_bool);
        let matching = modifier.and_then(|m| m.matching.as_ref());
        let lhs = self.eval(&b.lhs)?;
        let rhs = self.eval(&b.rhs)?;
        match (lhs, rhs) {
            (Value::Scalar(l), Value::Scalar(r)) => match kind {
                OpKind::Arith => Ok(Value::Scalar(arith(op, l, r))),
                OpKind::Cmp => Ok(Value::Scalar(f64::from(u8::from(compare(op, l, r))))),
                OpKind::Set => Err(AlertError::Eval(format!(
                    "`{}` needs vectors on both sides",
                    b.op
                ))),
            },
            (Value::Vector(v), Value::Scalar(s)) => Ok(Value::Vector(vector_scalar(
                op,
                kind,
                v,
                s,
                false,
                return_bool,
            )?)),
            (Value::Scalar(s), Value::Vector(v)) => Ok(Value::Vector(vector_scalar(
                op,
                kind,
                v,
                s,
                true,
                return_bool,
            )?)),
            (Value::Vector(l), Value::Vector(r)) => match kind {
                OpKind::Set => Ok(Value::Vector(set_op(op, l, r, matching))),
                _ => Ok(Value::Vector(vector_vector(
                    op,
                    kind,
                    l,
                    r,
                    matching,
                    return_bool,
                )?)),
            },
            _ => Err(unsupported(format!("`{}` on a range vector", b.op))),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum OpKind {
    Arith,
    Cmp,
    Set,
}

impl OpKind {
    fn of(op: TokenId) -> Option<OpKind> {
        match op {
            T_ADD | T_SUB | T_MUL | T_DIV | T_MOD | T_POW => Some(OpKind::Arith),
            T_EQLC | T_NEQ | T_GTR | T_LSS | T_GTE | T_LTE => Some(OpKind::Cmp),
            T_LAND | T_LOR | T_LUNLESS => Some(OpKind::Set),
            _ => None,
        }
    }
}

fn arith(op: TokenId, l: f64, r: f64) -> f64 {
    match op {
        T_ADD => l + r,
        T_SUB => l - r,
        T_MUL => l * r,
        T_DIV => l / r,
        T_MOD => l % r,
        _ => l.powf(r),
    }
}

fn compare(op: TokenId, l: f64, r: f64) -> bool {
    match op {
        T_EQLC => l == r,
        T_NEQ => l != r,
        T_GTR => l > r,
        T_LSS => l < r,
        T_GTE => l >= r,
        _ => l <= r,
    }
}

fn vector_scalar(
    op: TokenId,
    kind: OpKind,
    v: Vec<InstantSample>,
    s: f64,
    scalar_left: bool,
    return_bool: bool,
) -> Result<Vec<InstantSample>, AlertError> {
    let mut out = Vec::with_capacity(v.len());
    for x in v {
        let (l, r) = if scalar_left {
            (s, x.value)
        } else {
            (x.value, s)
        };
        match kind {
            OpKind::Arith => out.push(InstantSample {
                labels: without_name(x.labels),
                value: arith(op, l, r),
            }),
            OpKind::Cmp if return_bool => out.push(InstantSample {
                labels: without_name(x.labels),
                value: f64::from(u8::from(compare(op, l, r))),
            }),
            // A filter keeps the vector's element as it is, whichever side the scalar is.
            OpKind::Cmp => {
                if compare(op, l, r) {
                    out.push(x);
                }
            }
            OpKind::Set => {
                return Err(AlertError::Eval(
                    "set operators need vectors on both sides".into(),
                ));
            }
        }
    }
    if kind == OpKind::Arith || return_bool {
        unique(out)
    } else {
        Ok(out)
    }
}

/// The labels two sides are matched on.
fn signature(labels: &Labels, matching: Option<&LabelModifier>) -> Labels {
    match matching {
        Some(LabelModifier::Include(on)) => labels
            .iter()
            .filter(|(k, _)| on.labels.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        Some(LabelModifier::Exclude(ignoring)) => labels
            .iter()
            .filter(|(k, _)| *k != NAME && !ignoring.labels.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        None => labels
            .iter()
            .filter(|(k, _)| *k != NAME)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

fn set_op(
    op: TokenId,
    l: Vec<InstantSample>,
    r: Vec<InstantSample>,
    matching: Option<&LabelModifier>,
) -> Vec<InstantSample> {
    let right: BTreeSet<Labels> = r.iter().map(|s| signature(&s.labels, matching)).collect();
    match op {
        T_LAND => l
            .into_iter()
            .filter(|s| right.contains(&signature(&s.labels, matching)))
            .collect(),
        T_LUNLESS => l
            .into_iter()
            .filter(|s| !right.contains(&signature(&s.labels, matching)))
            .collect(),
        _ => {
            let left: BTreeSet<Labels> = l.iter().map(|s| signature(&s.labels, matching)).collect();
            let mut out = l;
            out.extend(
                r.into_iter()
                    .filter(|s| !left.contains(&signature(&s.labels, matching))),
            );
            out
        }
    }
}

fn vector_vector(
    op: TokenId,
    kind: OpKind,
    l: Vec<InstantSample>,
    r: Vec<InstantSample>,
    matching: Option<&LabelModifier>,
    return_bool: bool,
) -> Result<Vec<InstantSample>, AlertError> {
    let mut right: BTreeMap<Labels, f64> = BTreeMap::new();
    for s in &r {
        if right
            .insert(signature(&s.labels, matching), s.value)
            .is_some()
        {
            return Err(AlertError::Eval(format!(
                "many-to-many matching not allowed: several series on the right-hand side \
                 of `{}` match {:?}",
                op_name(op),
                signature(&s.labels, matching)
            )));
        }
    }
    let mut matched: BTreeSet<Labels> = BTreeSet::new();
    let mut out = Vec::new();
    for s in l {
        let sig = signature(&s.labels, matching);
        let Some(&rv) = right.get(&sig) else {
            continue;
        };
        let value = match kind {
            OpKind::Arith => arith(op, s.value, rv),
            _ if return_bool => f64::from(u8::from(compare(op, s.value, rv))),
            _ if compare(op, s.value, rv) => s.value,
            _ => continue,
        };
        if !matched.insert(sig.clone()) {
            return Err(AlertError::Eval(format!(
                "multiple matches for labels {sig:?} on the left-hand side of `{}`: \
                 many-to-one matching must be explicit",
                op_name(op)
            )));
        }
        let mut labels = s.labels;
        if kind == OpKind::Arith || return_bool {
            labels.remove(NAME);
        }
        match matching {
            Some(LabelModifier::Include(on)) => labels.retain(|k, _| on.labels.contains(k)),
            Some(LabelModifier::Exclude(ignoring)) => {
                labels.retain(|k, _| !ignoring.labels.contains(k))
            }
            None => {}
        }
        out.push(InstantSample { labels, value });
    }
    unique(out)
}

fn op_name(op: TokenId) -> String {
    promql_parser::parser::token::TokenType::new(op).to_string()
}

fn matches_all(matchers: &Matchers, labels: &Labels) -> bool {
    matchers.matchers.iter().all(|m| {
        // A missing label matches as the empty string, as in Prometheus.
        let v = labels.get(&m.name).map_or("", String::as_str);
        match &m.op {
            MatchOp::Equal => v == m.value,
            MatchOp::NotEqual => v != m.value,
            MatchOp::Re(re) => re.is_match(v),
            MatchOp::NotRe(re) => !re.is_match(v),
        }
    })
}

fn without_name(mut labels: Labels) -> Labels {
    labels.remove(NAME);
    labels
}

/// Fails on two samples with one label set, as Prometheus does.
fn unique(v: Vec<InstantSample>) -> Result<Vec<InstantSample>, AlertError> {
    let mut seen = BTreeSet::new();
    for s in &v {
        if !seen.insert(&s.labels) {
            return Err(AlertError::Eval(format!(
                "vector cannot contain metrics with the same labelset {:?}",
                s.labels
            )));
        }
    }
    Ok(v)
}

/// The larger, NaN only when both are (Prometheus' `max`, `max_over_time`).
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b > a { b } else { a }
}

/// The smaller, NaN only when both are.
fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b < a { b } else { a }
}

/// Prometheus' `extrapolatedRate` for `rate` (`is_rate`, per second) and `increase`, over
/// the points of a window `(start, end]` of `range_s` seconds; `None` with fewer than two.
pub(super) fn extrapolated_rate(
    points: &[(f64, f64)],
    start: f64,
    end: f64,
    range_s: f64,
    is_rate: bool,
) -> Option<f64> {
    let (&(first_t, first_v), &(last_t, last_v)) = (points.first()?, points.last()?);
    if points.len() < 2 {
        return None;
    }
    let mut result = last_v - first_v;
    // A decrease is a reset: the counter restarted from 0, so what it had is added back.
    let mut prev = first_v;
    for &(_, v) in &points[1..] {
        if v < prev {
            result += prev;
        }
        prev = v;
    }
    let sampled = last_t - first_t;
    let average = sampled / (points.len() - 1) as f64;
    let threshold = average * 1.1;
    let mut to_start = first_t - start;
    let mut to_end = end - last_t;
    if to_start >= threshold {
        to_start = average / 2.0;
    }
    // A counter is never negative: extrapolate no further back than its zero point.
    if result > 0.0 && first_v >= 0.0 {
        let to_zero = sampled * (first_v / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    if to_end >= threshold {
        to_end = average / 2.0;
    }
    let mut factor = (sampled + to_start + to_end) / sampled;
    if is_rate {
        factor /= range_s;
    }
    Some(result * factor)
}

/// Least-squares slope per second; 0 for a constant series, `None` with fewer than two
/// points (Prometheus' `deriv`).
pub(super) fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let first = points[0].1;
    if points.iter().all(|p| p.1 == first) {
        return Some(if first.is_infinite() { f64::NAN } else { 0.0 });
    }
    let n = points.len() as f64;
    let t0 = points[0].0;
    let mean_t = points.iter().map(|p| p.0 - t0).sum::<f64>() / n;
    let mean_v = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut cov, mut var) = (0.0, 0.0);
    for &(t, v) in points {
        let dt = t - t0 - mean_t;
        cov += dt * (v - mean_v);
        var += dt * dt;
    }
    Some(cov / var)
}

/// Metric names an expression selects: each selector's name, or the names its `__name__`
/// matcher allows when it is `=` or a `=~` alternation of plain names. A selector with
/// neither is [`AlertError::Unsupported`] (its names cannot be listed).
pub fn metric_names(expr: &Expr) -> Result<BTreeSet<String>, AlertError> {
    let mut out = BTreeSet::new();
    collect_names(expr, &mut out)?;
    Ok(out)
}

fn collect_names(expr: &Expr, out: &mut BTreeSet<String>) -> Result<(), AlertError> {
    match expr {
        Expr::VectorSelector(vs) => selector_names(vs, out),
        Expr::MatrixSelector(ms) => selector_names(&ms.vs, out),
        Expr::Aggregate(a) => collect_names(&a.expr, out),
        Expr::Unary(u) => collect_names(&u.expr, out),
        Expr::Binary(b) => {
            collect_names(&b.lhs, out)?;
            collect_names(&b.rhs, out)
        }
        Expr::Paren(p) => collect_names(&p.expr, out),
        Expr::Subquery(s) => collect_names(&s.expr, out),
        Expr::Call(c) => c.args.args.iter().try_for_each(|a| collect_names(a, out)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => Ok(()),
    }
}

fn selector_names(vs: &VectorSelector, out: &mut BTreeSet<String>) -> Result<(), AlertError> {
    if let Some(name) = &vs.name {
        out.insert(name.clone());
        return Ok(());
    }
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    for m in vs.matchers.matchers.iter().filter(|m| m.name == NAME) {
        match &m.op {
            MatchOp::Equal => {
                out.insert(m.value.clone());
                return Ok(());
            }
            MatchOp::Re(_) if m.value.split('|').all(plain) => {
                out.extend(m.value.split('|').map(str::to_string));
                return Ok(());
            }
            _ => {}
        }
    }
    Err(unsupported(format!(
        "selector `{vs}` without a listable metric name"
    )))
}
