//! Evaluator semantics on small hand-made stores.

use super::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

/// `expr` at `t`, as `(labels without __name__ unless kept, value)` sorted by labels.
fn query(store: &SampleStore, expr: &str, t: f64) -> Vec<(Vec<(String, String)>, f64)> {
    let parsed = parse(expr).unwrap_or_else(|e| panic!("{e}"));
    let mut out: Vec<_> = eval_instant(&parsed, store, t)
        .unwrap_or_else(|e| panic!("{expr}: {e}"))
        .into_iter()
        .map(|s| (s.labels.into_iter().collect::<Vec<_>>(), s.value))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn one(store: &SampleStore, expr: &str, t: f64) -> f64 {
    let r = query(store, expr, t);
    assert_eq!(r.len(), 1, "{expr} at {t}: {r:?}");
    r[0].1
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

fn eval_err(store: &SampleStore, expr: &str) -> AlertError {
    match parse(expr).and_then(|e| eval_instant(&e, store, 100.0)) {
        Ok(v) => panic!("{expr} evaluated to {v:?}"),
        Err(e) => e,
    }
}

#[test]
fn rate_and_increase_add_back_resets_and_extrapolate_like_prometheus() {
    let mut s = SampleStore::default();
    // A reset between 20 and 5: 10 → 20, restart, 5 → 35.
    for (t, v) in [
        (0.0, 0.0),
        (10.0, 10.0),
        (20.0, 20.0),
        (30.0, 5.0),
        (40.0, 15.0),
        (50.0, 25.0),
        (60.0, 35.0),
    ] {
        s.push("c", &[("i", "a")], t, v);
    }
    // The window (0, 60] holds 10..60: raw increase 35 − 10 + 20 = 45 over 50 s; the first
    // point is one interval from the window's start (within 1.1×), so the estimate reaches
    // both edges: 45 × 60 / 50.
    assert!(close(one(&s, "increase(c[1m])", 60.0), 54.0));
    assert!(close(one(&s, "rate(c[1m])", 60.0), 0.9));

    // A series beginning late in the window: half an interval's extrapolation at the start.
    let mut late = SampleStore::default();
    for (t, v) in [(40.0, 100.0), (50.0, 110.0), (60.0, 120.0)] {
        late.push("c", &[], t, v);
    }
    assert!(close(one(&late, "increase(c[1m])", 60.0), 25.0));
    // Near the counter's zero point the start extrapolation stops there: 1 → 11 → 21 over
    // 20 s reaches 0 one second before the first point (rather than half an interval).
    let mut young = SampleStore::default();
    for (t, v) in [(40.0, 1.0), (50.0, 11.0), (60.0, 21.0)] {
        young.push("c", &[], t, v);
    }
    assert!(close(one(&young, "increase(c[1m])", 60.0), 21.0));
    // One point: no rate.
    assert!(query(&s, "rate(c[5s])", 60.0).is_empty());
}

#[test]
fn deriv_is_the_least_squares_slope_and_zero_when_flat() {
    let mut s = SampleStore::default();
    for k in 0..=12 {
        let t = 5.0 * k as f64;
        // 2 per second; the noisy copy has equal dips at points symmetric about the centre
        // of the window (0, 60] (5..60 s), which leave the least-squares slope as it is.
        let dip = if k == 4 || k == 9 { 0.5 } else { 0.0 };
        s.push("q", &[], t, 2.0 * t + 3.0);
        s.push("noisy", &[], t, 2.0 * t + 3.0 - dip);
        s.push("flat", &[], t, 40.0);
    }
    assert!(close(one(&s, "deriv(q[1m])", 60.0), 2.0));
    assert!(close(one(&s, "deriv(noisy[1m])", 60.0), 2.0));
    assert_eq!(one(&s, "deriv(flat[1m])", 60.0), 0.0);
    // Over the time functions, and the left-open window: (0, 60] leaves t = 0 out.
    assert!(close(one(&s, "min_over_time(q[1m])", 60.0), 13.0));
    assert!(close(one(&s, "max_over_time(q[1m])", 60.0), 123.0));
    assert!(close(one(&s, "avg_over_time(q[1m])", 60.0), 68.0));
}

#[test]
fn instant_selectors_look_back_five_minutes_and_stop_at_staleness() {
    let mut s = SampleStore::default();
    s.push("g", &[("r", "0")], 0.0, 7.0);
    s.push("g", &[("r", "1")], 0.0, 1.0);
    s.push_stale("g", &[("r", "1")], 10.0);
    assert_eq!(query(&s, "g", 5.0).len(), 2);
    assert_eq!(query(&s, "g", 15.0).len(), 1);
    assert_eq!(one(&s, "g", 299.0), 7.0);
    assert!(query(&s, "g", 300.0).is_empty());
    // Range functions skip the marker; the sample before it still counts.
    assert_eq!(one(&s, "max_over_time(g{r=\"1\"}[1m])", 30.0), 1.0);
    // Before the first point: nothing.
    assert!(query(&s, "g", -1.0).is_empty());
}

#[test]
fn matchers_select_by_equality_and_regex() {
    let mut s = SampleStore::default();
    for (job, v) in [("vllm", 1.0), ("sglang", 2.0), ("node", 4.0)] {
        s.push("up", &[("job", job)], 0.0, v);
    }
    assert_eq!(one(&s, "sum(up{job=\"vllm\"})", 0.0), 1.0);
    assert_eq!(one(&s, "sum(up{job!=\"vllm\"})", 0.0), 6.0);
    assert_eq!(one(&s, "sum(up{job=~\"vllm|sglang\"})", 0.0), 3.0);
    // Regexes are anchored.
    assert_eq!(one(&s, "sum(up{job=~\"v.*\"})", 0.0), 1.0);
    assert_eq!(one(&s, "sum(up{job!~\"v.*|s.*\"})", 0.0), 4.0);
    assert_eq!(one(&s, "sum({__name__=\"up\", job=~\".+\"})", 0.0), 7.0);
    // A label a series lacks matches as empty.
    assert_eq!(one(&s, "count(up{zone=\"\"})", 0.0), 3.0);
}

#[test]
fn aggregations_group_by_and_without() {
    let mut s = SampleStore::default();
    s.push("m", &[("job", "a"), ("instance", "1")], 0.0, 1.0);
    s.push("m", &[("job", "a"), ("instance", "2")], 0.0, 3.0);
    s.push("m", &[("job", "b"), ("instance", "3")], 0.0, 5.0);
    assert_eq!(
        query(&s, "sum by (job) (m)", 0.0),
        vec![
            (labels(&[("job", "a")]), 4.0),
            (labels(&[("job", "b")]), 5.0)
        ]
    );
    assert_eq!(
        query(&s, "max without (instance) (m)", 0.0),
        vec![
            (labels(&[("job", "a")]), 3.0),
            (labels(&[("job", "b")]), 5.0)
        ]
    );
    assert_eq!(
        query(&s, "min by (job) (m)", 0.0),
        vec![
            (labels(&[("job", "a")]), 1.0),
            (labels(&[("job", "b")]), 5.0)
        ]
    );
    assert_eq!(
        query(&s, "avg by (job) (m)", 0.0)[0],
        (labels(&[("job", "a")]), 2.0)
    );
    assert_eq!(query(&s, "count(m)", 0.0), vec![(vec![], 3.0)]);
    assert_eq!(query(&s, "sum(m)", 0.0), vec![(vec![], 9.0)]);
    // No input, no output (not a zero).
    assert!(query(&s, "sum(absent_metric)", 0.0).is_empty());
}

#[test]
fn binary_operators_match_vectors_and_keep_or_drop_names() {
    let mut s = SampleStore::default();
    s.push("errors", &[("instance", "a"), ("reason", "x")], 0.0, 2.0);
    s.push("errors", &[("instance", "b"), ("reason", "x")], 0.0, 1.0);
    s.push("total", &[("instance", "a")], 0.0, 10.0);
    s.push("total", &[("instance", "b")], 0.0, 100.0);
    s.push("total", &[("instance", "c")], 0.0, 5.0);

    // Default matching: every label but the name; none match here.
    assert!(query(&s, "errors / total", 0.0).is_empty());
    // ignoring(): the ignored labels leave the result too.
    assert_eq!(
        query(&s, "errors / ignoring (reason) total", 0.0),
        vec![
            (labels(&[("instance", "a")]), 0.2),
            (labels(&[("instance", "b")]), 0.01)
        ]
    );
    // on(): only the listed labels survive.
    assert_eq!(
        query(&s, "errors / on (instance) total > 0.1", 0.0),
        vec![(labels(&[("instance", "a")]), 0.2)]
    );
    // A filtering comparison keeps the name and the left value; `bool` gives 0/1, no name.
    assert_eq!(
        query(&s, "total > 7", 0.0),
        vec![
            (labels(&[("__name__", "total"), ("instance", "a")]), 10.0),
            (labels(&[("__name__", "total"), ("instance", "b")]), 100.0)
        ]
    );
    assert_eq!(
        query(&s, "7 < total", 0.0).len(),
        2,
        "a scalar on the left filters the same way"
    );
    assert_eq!(one(&s, "7 < total{instance=\"a\"}", 0.0), 10.0);
    assert_eq!(
        query(&s, "total > bool 7", 0.0),
        vec![
            (labels(&[("instance", "a")]), 1.0),
            (labels(&[("instance", "b")]), 1.0),
            (labels(&[("instance", "c")]), 0.0)
        ]
    );
    // Arithmetic with scalars, precedence and parentheses, unary minus.
    assert_eq!(one(&s, "2 * total{instance=\"c\"} + 1", 0.0), 11.0);
    assert_eq!(one(&s, "2 * (total{instance=\"c\"} + 1)", 0.0), 12.0);
    assert_eq!(one(&s, "-total{instance=\"c\"} % 3", 0.0), -2.0);
    assert_eq!(one(&s, "2 ^ 3 - 1", 0.0), 7.0);
    assert_eq!(one(&s, "1 > bool 2", 0.0), 0.0);

    // Set operators, by labels without the name.
    assert_eq!(
        query(&s, "total and on (instance) errors", 0.0).len(),
        2,
        "c has no errors"
    );
    assert_eq!(
        query(&s, "total unless on (instance) errors", 0.0),
        vec![(labels(&[("__name__", "total"), ("instance", "c")]), 5.0)]
    );
    let or = query(&s, "total{instance=\"a\"} or total", 0.0);
    assert_eq!(or.len(), 3);
    let or = query(&s, "errors or on (instance) total", 0.0);
    assert_eq!(or.len(), 3, "{or:?}");
    assert!(or.contains(&(labels(&[("__name__", "total"), ("instance", "c")]), 5.0)));
}

#[test]
fn ambiguous_matches_and_duplicate_results_are_errors() {
    let mut s = SampleStore::default();
    s.push("a", &[("i", "1"), ("x", "p")], 0.0, 1.0);
    s.push("a", &[("i", "1"), ("x", "q")], 0.0, 2.0);
    s.push("b", &[("i", "1")], 0.0, 3.0);
    s.push("c", &[("i", "1")], 0.0, 4.0);
    let e = |expr| match parse(expr).and_then(|p| eval_instant(&p, &s, 0.0)) {
        Err(AlertError::Eval(m)) => m,
        other => panic!("{expr}: {other:?}"),
    };
    assert!(e("b / on (i) a").contains("many-to-many"));
    assert!(e("a / on (i) b").contains("multiple matches"));
    // Two names, one label set once the name is gone.
    assert!(e("{__name__=~\"b|c\"} * 1").contains("same labelset"));
}

#[test]
fn unsupported_constructs_are_named() {
    let mut s = SampleStore::default();
    s.push("x", &[], 100.0, 1.0);
    s.push("y", &[], 100.0, 1.0);
    for (expr, named) in [
        (
            "histogram_quantile(0.9, rate(x_bucket[5m]))",
            "histogram_quantile",
        ),
        ("x offset 5m", "offset"),
        ("x @ 100", "@"),
        ("topk(3, x)", "topk"),
        ("quantile(0.5, x)", "quantile"),
        ("stddev(x)", "stddev"),
        ("max_over_time(x[5m:1m])", "subquery"),
        ("x * on () group_left y", "group_left"),
        ("abs(x)", "abs"),
        ("x atan2 y", "atan2"),
        ("x[5m]", "range vector"),
    ] {
        match eval_err(&s, expr) {
            AlertError::Unsupported(m) => assert!(m.contains(named), "{expr}: {m}"),
            AlertError::Eval(m) => assert!(m.contains(named), "{expr}: {m}"),
            other => panic!("{expr}: {other:?}"),
        }
    }
    assert!(matches!(parse("rate(x[5m]"), Err(AlertError::Parse { .. })));
}

fn rule(expr: &str, for_s: f64) -> Rule {
    Rule {
        alert: "Test".into(),
        expr: expr.into(),
        for_s,
        labels: [("severity".to_string(), "warning".to_string())].into(),
        annotations: BTreeMap::new(),
    }
}

#[test]
fn for_drives_pending_firing_and_resolved() {
    let mut s = SampleStore::default();
    // High from 30 to 70, a blip at 100, high again from 150 on.
    for k in 0..=20 {
        let t = 10.0 * f64::from(k);
        let high = (30.0..=70.0).contains(&t) || t == 100.0 || t >= 150.0;
        s.push("x", &[("instance", "a")], t, if high { 5.0 } else { 1.0 });
        s.push("x", &[("instance", "b")], t, 1.0);
    }
    let events =
        evaluate(&[rule("x > 2", 20.0)], &s, 0.0, 200.0, 10.0).unwrap_or_else(|e| panic!("{e}"));
    let want_labels: BTreeMap<String, String> = [
        ("instance".to_string(), "a".to_string()),
        ("severity".to_string(), "warning".to_string()),
    ]
    .into();
    let got: Vec<_> = events
        .iter()
        .map(|e| {
            assert_eq!(e.labels, want_labels);
            assert_eq!(e.alert, "Test");
            (e.pending_at_s, e.firing_at_s, e.resolved_at_s)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (30.0, Some(50.0), Some(80.0)),
            // Dropped while pending.
            (100.0, None, Some(110.0)),
            // Still firing at the end.
            (150.0, Some(170.0), None),
        ]
    );
    // for: 0 fires at once.
    let events =
        evaluate(&[rule("x > 2", 0.0)], &s, 0.0, 200.0, 10.0).unwrap_or_else(|e| panic!("{e}"));
    assert!(events.iter().all(|e| e.firing_at_s == Some(e.pending_at_s)));
    assert_eq!(events.len(), 3);
}

#[test]
fn rule_files_parse_and_bad_ones_are_refused() {
    let rules = parse_rules(
        "groups:\n- name: g\n  interval: 15s\n  rules:\n  - alert: A\n    expr: up == 0\n    for: 1m30s\n    labels: {severity: critical}\n    annotations: {summary: down}\n  - alert: B\n    expr: vector_like > 1\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].for_s, 90.0);
    assert_eq!(rules[0].labels["severity"], "critical");
    assert_eq!(rules[1].for_s, 0.0);

    let refused = |yaml: &str| parse_rules(yaml).err().unwrap_or_else(|| panic!("{yaml}"));
    assert!(matches!(
        refused("groups:\n- name: g\n  rules:\n  - record: r\n    expr: sum(x)\n"),
        AlertError::Unsupported(_)
    ));
    assert!(matches!(
        refused(
            "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: x\n    keep_firing_for: 5m\n"
        ),
        AlertError::InRule { .. }
    ));
    assert!(matches!(
        refused("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: x\n    fro: 5m\n"),
        AlertError::RuleFile(_)
    ));
    assert!(matches!(
        refused("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: x\n    for: soon\n"),
        AlertError::InRule { .. }
    ));
    match refused("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: rate(x[5m]\n") {
        AlertError::InRule { alert, source } => {
            assert_eq!(alert, "A");
            assert!(matches!(*source, AlertError::Parse { .. }));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn evaluate_refuses_bad_windows_and_names_the_failing_rule() {
    let s = SampleStore::default();
    let r = [rule("x > 1", 0.0)];
    assert!(matches!(
        evaluate(&r, &s, 0.0, 10.0, 0.0),
        Err(AlertError::Window(_))
    ));
    assert!(matches!(
        evaluate(&r, &s, 10.0, 0.0, 1.0),
        Err(AlertError::Window(_))
    ));
    match evaluate(&[rule("topk(1, x)", 0.0)], &s, 0.0, 10.0, 1.0) {
        Err(AlertError::InRule { alert, source }) => {
            assert_eq!(alert, "Test");
            assert!(matches!(*source, AlertError::Unsupported(ref m) if m.contains("topk")));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(evaluate(&r, &s, 0.0, 10.0, 1.0), Ok(vec![]));
}

#[test]
fn metric_names_lists_selectors_and_name_alternations() {
    let names = |e: &str| {
        metric_names(&parse(e).unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"))
    };
    let n = names(
        "sum(rate(a_total[1m])) / on (i) b or {__name__=~\"c|d:e\"} > 1 and {__name__=\"f\"}",
    );
    assert_eq!(
        n.into_iter().collect::<Vec<_>>(),
        vec!["a_total", "b", "c", "d:e", "f"]
    );
    assert!(matches!(
        metric_names(&parse("{job=\"x\"}").unwrap_or_else(|e| panic!("{e}"))),
        Err(AlertError::Unsupported(_))
    ));
}
