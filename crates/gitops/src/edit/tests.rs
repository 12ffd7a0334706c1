//! Unit tests of `edit`.

use super::*;
use proptest::prelude::*;

const DEPLOY: &str = include_str!("../testdata/deploy.yaml");
const DEPLOY_EXPECTED: &str = include_str!("../testdata/deploy.expected.yaml");
const VALUES: &str = include_str!("../testdata/values.yaml");
const VALUES_EXPECTED: &str = include_str!("../testdata/values.expected.yaml");
const KUSTOMIZATION: &str = include_str!("../testdata/kustomization.yaml");
const KUSTOMIZATION_EXPECTED: &str = include_str!("../testdata/kustomization.expected.yaml");

fn workload(kind: &str, name: &str) -> EditTarget {
    EditTarget::Workload {
        kind: kind.into(),
        name: name.into(),
        namespace: None,
    }
}

fn deployment(name: &str) -> EditTarget {
    workload("Deployment", name)
}

fn helm(path: &str) -> EditTarget {
    EditTarget::HelmValues { path: path.into() }
}

fn kustomize(name: &str) -> EditTarget {
    EditTarget::KustomizeReplicas { name: name.into() }
}

/// A one-document Deployment named `d` whose spec is `spec` (indented by the caller).
fn deploy_doc(spec: &str) -> String {
    format!("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n{spec}")
}

fn set(src: &str, target: &EditTarget, to: u64) -> String {
    match set_replicas(src, target, to) {
        Ok(edit) => edit.text,
        Err(e) => panic!("set_replicas failed: {e}"),
    }
}

fn err(src: &str, target: &EditTarget) -> EditError {
    match set_replicas(src, target, 8) {
        Ok(edit) => panic!("expected an error, got {:?}", edit.text),
        Err(e) => e,
    }
}

#[test]
fn deploy_fixture_changes_only_the_deployment() {
    let edit = set_replicas(DEPLOY, &deployment("vllm-llama"), 8).unwrap();
    assert_eq!(edit.text, DEPLOY_EXPECTED);
    assert_eq!(
        edit.from,
        Located {
            replicas: 4,
            document: 1,
            path: "spec.replicas".into(),
            line: 19,
            column: 13,
        }
    );
    assert_eq!(edit.to, 8);
}

#[test]
fn deploy_fixture_kind_selects_the_document() {
    let sts = locate(DEPLOY, &workload("StatefulSet", "vllm-llama")).unwrap();
    assert_eq!((sts.document, sts.line), (2, 46));
    let svc = locate(DEPLOY, &workload("Service", "vllm-llama")).unwrap();
    assert_eq!((svc.document, svc.line), (0, 9));
    let out = set(DEPLOY, &workload("StatefulSet", "vllm-llama"), 8);
    let want = DEPLOY.replacen(
        "spec:\n  replicas: 4\n  serviceName",
        "spec:\n  replicas: 8\n  serviceName",
        1,
    );
    assert_ne!(want, DEPLOY);
    assert_eq!(out, want);
}

#[test]
fn deploy_fixture_namespace_must_match_when_both_have_one() {
    let mut target = EditTarget::Workload {
        kind: "Deployment".into(),
        name: "vllm-llama".into(),
        namespace: Some("inference".into()),
    };
    assert_eq!(locate(DEPLOY, &target).unwrap().line, 19);
    target = EditTarget::Workload {
        kind: "Deployment".into(),
        name: "vllm-llama".into(),
        namespace: Some("other".into()),
    };
    let e = locate(DEPLOY, &target).unwrap_err();
    assert_eq!(e.reason(), "ReplicasNotFound");
    assert!(e.to_string().contains("in namespace other"), "{e}");
    // The StatefulSet has no namespace, so any namespace matches it.
    let sts = EditTarget::Workload {
        kind: "StatefulSet".into(),
        name: "vllm-llama".into(),
        namespace: Some("anything".into()),
    };
    assert_eq!(locate(DEPLOY, &sts).unwrap().document, 2);
}

#[test]
fn deploy_fixture_with_crlf_line_endings() {
    let src = DEPLOY.replace('\n', "\r\n");
    let want = DEPLOY_EXPECTED.replace('\n', "\r\n");
    assert_eq!(set(&src, &deployment("vllm-llama"), 8), want);
    let at = locate(&src, &deployment("vllm-llama")).unwrap();
    assert_eq!((at.line, at.column), (19, 13));
}

#[test]
fn helm_values_fixture_skips_decoys_and_keeps_spacing() {
    let edit = set_replicas(VALUES, &helm("vllm.replicaCount"), 8).unwrap();
    assert_eq!(edit.text, VALUES_EXPECTED);
    assert_eq!(edit.from.path, "vllm.replicaCount");
    assert_eq!((edit.from.line, edit.from.column), (20, 21));
    assert_eq!(
        locate(VALUES, &helm("global.replicaCount")).unwrap().line,
        3
    );
    assert_eq!(
        locate(VALUES, &helm("router.replicaCount")).unwrap().line,
        13
    );
}

#[test]
fn helm_values_fixture_refuses_the_shared_anchor() {
    // `defaults.replicaCount` is merged into router and vllm: editing it edits both.
    let e = err(VALUES, &helm("defaults.replicaCount"));
    assert_eq!(e.reason(), "ReplicasBehindAlias");
    assert!(matches!(e, EditError::Alias { line: 7, .. }), "{e:?}");
    assert!(e.to_string().contains("every place"), "{e}");
}

#[test]
fn kustomization_fixture_edits_the_named_entry() {
    let edit = set_replicas(KUSTOMIZATION, &kustomize("vllm-llama"), 8).unwrap();
    assert_eq!(edit.text, KUSTOMIZATION_EXPECTED);
    assert_eq!(edit.from.path, "replicas[1].count");
    assert_eq!(edit.from.line, 10);
    assert_eq!(
        locate(KUSTOMIZATION, &kustomize("router"))
            .unwrap()
            .replicas,
        2
    );
    let e = err(KUSTOMIZATION, &kustomize("nope"));
    assert_eq!(e.reason(), "ReplicasNotFound");
    assert!(
        e.to_string()
            .contains("router (line 7), vllm-llama (line 9)"),
        "{e}"
    );
}

#[test]
fn kustomization_entry_without_count() {
    let src = "replicas:\n  - name: a\n    count: 2\n  - name: b\n";
    let e = err(src, &kustomize("b"));
    assert_eq!(e.reason(), "ReplicasNotFound");
    assert!(e.to_string().contains("no `count`"), "{e}");
    let e = err("resources: [a.yaml]\n", &kustomize("b"));
    assert!(
        e.to_string()
            .contains("no document has a top-level `replicas:` list"),
        "{e}"
    );
}

#[test]
fn flow_map_keeps_its_siblings() {
    let src = "kind: Deployment\nmetadata: {name: d}\nspec: {replicas: 4, paused: false} # flow\n";
    assert_eq!(
        set(src, &deployment("d"), 8),
        "kind: Deployment\nmetadata: {name: d}\nspec: {replicas: 8, paused: false} # flow\n"
    );
}

#[test]
fn quoted_values_keep_their_quotes() {
    let src = deploy_doc("  replicas: \"4\"  # quoted\n");
    assert_eq!(
        set(&src, &deployment("d"), 8),
        deploy_doc("  replicas: \"8\"  # quoted\n")
    );
    let src = deploy_doc("  replicas: '4' # single\n");
    assert_eq!(
        set(&src, &deployment("d"), 12),
        deploy_doc("  replicas: '12' # single\n")
    );
    // An escape spells the digits differently from the value: not spliceable.
    let e = err(&deploy_doc("  replicas: \"\\x34\"\n"), &deployment("d"));
    assert_eq!(e.reason(), "ReplicasNotInteger");
}

#[test]
fn merge_key_supplying_the_value_is_refused() {
    let src = "base: &b {replicaCount: 4}\nvllm: {<<: *b}\n";
    let e = err(src, &helm("vllm.replicaCount"));
    assert_eq!(
        e,
        EditError::Alias {
            target: "Helm values vllm.replicaCount".into(),
            line: 2
        }
    );
    // A merge list, and a merge in block style.
    let src = "a: &a {x: 1}\nb: &b {replicaCount: 4}\nvllm:\n  <<: [*a, *b]\n";
    assert_eq!(
        err(src, &helm("vllm.replicaCount")).reason(),
        "ReplicasBehindAlias"
    );
    // A merge that cannot supply the key is not the reason it is missing.
    let src = "base: &b {image: x}\nvllm: {<<: *b}\n";
    assert_eq!(
        err(src, &helm("vllm.replicaCount")).reason(),
        "ReplicasNotFound"
    );
    // A map that merges itself must not send the search around in circles.
    let src = "a: &a {x: 1, <<: *a}\n";
    assert_eq!(err(src, &helm("a.y")).reason(), "ReplicasBehindAlias");
    // A direct key overrides the merge and is editable.
    let src = "base: &b {replicaCount: 1}\nvllm: {<<: *b, replicaCount: 4}\n";
    assert_eq!(
        set(src, &helm("vllm.replicaCount"), 8),
        "base: &b {replicaCount: 1}\nvllm: {<<: *b, replicaCount: 8}\n"
    );
}

#[test]
fn aliases_are_refused() {
    let src = format!("n: &n 4\n---\n{}", deploy_doc("  replicas: *n\n"));
    // Anchors do not cross documents: that is a parse error, not an alias.
    assert_eq!(err(&src, &deployment("d")).reason(), "YamlInvalid");
    let src = deploy_doc("  template: {}\n  replicas: *n\n").replace("spec:\n", "x: &n 4\nspec:\n");
    let e = err(&src, &deployment("d"));
    assert!(matches!(e, EditError::Alias { line: 8, .. }), "{e:?}");
    // The whole spec comes from an anchor.
    let src = "s: &s {replicas: 4}\nkind: Deployment\nmetadata: {name: d}\nspec: *s\n";
    assert!(matches!(
        err(src, &deployment("d")),
        EditError::Alias { line: 4, .. }
    ));
    // An anchored value that nothing aliases is safe to edit; one that is aliased is not.
    let src = deploy_doc("  replicas: &r 4\n");
    assert_eq!(
        set(&src, &deployment("d"), 8),
        deploy_doc("  replicas: &r 8\n")
    );
    let src = deploy_doc("  replicas: &r 4\n  other: *r\n");
    assert_eq!(err(&src, &deployment("d")).reason(), "ReplicasBehindAlias");
}

#[test]
fn two_matching_documents_are_ambiguous() {
    let one = deploy_doc("  replicas: 4\n");
    let src = format!("{one}---\n{one}");
    let e = err(&src, &deployment("d"));
    assert_eq!(
        e,
        EditError::Ambiguous {
            target: "Deployment d spec.replicas".into(),
            count: 2,
            lines: vec![6, 13],
        }
    );
    assert!(e.to_string().contains("at lines 6, 13"), "{e}");
    // A duplicated key inside one document, too.
    let e = err(
        &deploy_doc("  replicas: 4\n  replicas: 5\n"),
        &deployment("d"),
    );
    assert!(matches!(e, EditError::Ambiguous { count: 2, .. }), "{e:?}");
}

#[test]
fn not_found_says_what_is_there() {
    let e = err(DEPLOY, &deployment("qwen"));
    let msg = e.to_string();
    assert_eq!(e.reason(), "ReplicasNotFound");
    assert!(
        msg.starts_with("Deployment qwen spec.replicas not found"),
        "{msg}"
    );
    assert!(msg.contains("#0 Service vllm-llama (line 5)"), "{msg}");
    assert!(
        msg.contains("#1 Deployment vllm-llama in inference (line 13)"),
        "{msg}"
    );
    assert!(msg.contains("#2 StatefulSet vllm-llama (line 42)"), "{msg}");

    let e = err(
        &deploy_doc("  selector: {}\n  template: {}\n"),
        &deployment("d"),
    );
    let msg = e.to_string();
    assert!(
        msg.contains("has `spec` (line 6) but no `replicas`"),
        "{msg}"
    );
    assert!(msg.contains("keys there: selector, template"), "{msg}");
    assert!(msg.contains("runs 1 replica"), "{msg}");

    let msg = err(VALUES, &helm("vllm.replicas")).to_string();
    assert!(
        msg.contains("has `vllm` (line 16) but no `replicas`"),
        "{msg}"
    );
    assert!(msg.contains("<<, image, replicaCount, extraArgs"), "{msg}");
    let msg = err(VALUES, &helm("model.replicas")).to_string();
    assert!(msg.contains("no top-level `model`"), "{msg}");
    let msg = err(VALUES, &helm("vllm..x")).to_string();
    assert!(msg.contains("not a dotted key path"), "{msg}");
    let msg = err("", &helm("a")).to_string();
    assert!(msg.contains("no YAML document"), "{msg}");
}

#[test]
fn block_scalar_text_is_never_a_key() {
    let src = "kind: Deployment\nmetadata: {name: d}\ndata:\n  spec: |\n    replicas: 4\n";
    let e = err(src, &deployment("d"));
    assert_eq!(e.reason(), "ReplicasNotFound");
}

#[test]
fn non_integers_are_refused() {
    for (value, reason) in [
        ("4.5", "ReplicasNotInteger"),
        ("4.0", "ReplicasNotInteger"),
        ("four", "ReplicasNotInteger"),
        ("0x4", "ReplicasNotInteger"),
        ("04", "ReplicasNotInteger"),
        ("-1", "ReplicasNotInteger"),
        ("+4", "ReplicasNotInteger"),
        ("~", "ReplicasNotInteger"),
        ("", "ReplicasNotInteger"),
        ("\"\"", "ReplicasNotInteger"),
        ("99999999999999999999999", "ReplicasNotInteger"),
        ("{a: 1}", "ReplicasNotInteger"),
        ("[4]", "ReplicasNotInteger"),
        ("|\n    4", "ReplicasBlockScalar"),
        (">-\n    4", "ReplicasBlockScalar"),
        ("!!int 4", "ReplicasTagged"),
        ("!!str 4", "ReplicasTagged"),
        ("!custom 4", "ReplicasTagged"),
    ] {
        let src = deploy_doc(&format!("  replicas: {value}\n"));
        let e = err(&src, &deployment("d"));
        assert_eq!(e.reason(), reason, "{value:?}: {e}");
        assert!(e.to_string().contains("line 6"), "{value:?}: {e}");
    }
    let e = err(&deploy_doc("  replicas: !!int 4\n"), &deployment("d"));
    assert_eq!(
        e,
        EditError::Tagged {
            target: "Deployment d spec.replicas".into(),
            tag: "!!int".into(),
            line: 6
        }
    );
    assert_eq!(
        err(&deploy_doc("  replicas:\n"), &deployment("d")).to_string(),
        "Deployment d spec.replicas at line 6 is `null (empty)`, not a non-negative decimal \
             integer (digits only, no leading zero)"
    );
    // Zero itself is fine.
    assert_eq!(
        locate(&deploy_doc("  replicas: 0\n"), &deployment("d"))
            .unwrap()
            .replicas,
        0
    );
}

#[test]
fn invalid_yaml_reports_where() {
    let e = err("kind: Deployment\nspec: [1, 2\nx: 3\n", &deployment("d"));
    assert_eq!(e.reason(), "YamlInvalid");
    assert!(matches!(e, EditError::Parse { line: 3, .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("the YAML does not parse at line 3:"),
        "{e}"
    );
}

#[test]
fn bom_and_missing_final_newline_are_kept() {
    let src = format!("\u{feff}{}", deploy_doc("  replicas: 4 # x"));
    let want = format!("\u{feff}{}", deploy_doc("  replicas: 8 # x"));
    assert_eq!(set(&src, &deployment("d"), 8), want);
    let src = deploy_doc("  replicas: 4");
    assert_eq!(set(&src, &deployment("d"), 8), deploy_doc("  replicas: 8"));
    let src = deploy_doc("  replicas: 4\r\n...")
        .replace('\n', "\r\n")
        .replace("\r\r", "\r");
    let out = set(&src, &deployment("d"), 8);
    assert_eq!(out, src.replace("replicas: 4", "replicas: 8"));
}

#[test]
fn same_value_returns_the_text_unchanged() {
    let edit = set_replicas(DEPLOY, &deployment("vllm-llama"), 4).unwrap();
    assert_eq!(edit.text, DEPLOY);
    assert_eq!((edit.from.replicas, edit.to), (4, 4));
    assert_eq!(unified_diff("deploy.yaml", DEPLOY, &edit.text), "");
}

#[test]
fn digit_count_can_change() {
    let src = deploy_doc("  replicas: 9 # nine\n  paused: false\n");
    let ten = set(&src, &deployment("d"), 10);
    assert_eq!(ten, deploy_doc("  replicas: 10 # nine\n  paused: false\n"));
    let src = deploy_doc("  replicas: \"12\"\n");
    assert_eq!(
        set(&src, &deployment("d"), 3),
        deploy_doc("  replicas: \"3\"\n")
    );
    let big = set(&src, &deployment("d"), u64::MAX);
    assert_eq!(locate(&big, &deployment("d")).unwrap().replicas, u64::MAX);
}

#[test]
fn verify_catches_any_other_change() {
    let before = flatten(DEPLOY).unwrap();
    let path = [key("spec"), key("replicas")];
    assert!(verify(&before, DEPLOY_EXPECTED, 1, &path, "8").is_ok());
    // The right value changed, but so did another one.
    let two = DEPLOY_EXPECTED.replace("serviceName: vllm-llama", "serviceName: x");
    let e = verify(&before, &two, 1, &path, "8").unwrap_err();
    assert_eq!(e.reason(), "EditVerifyFailed");
    assert!(e.to_string().contains("found 2"), "{e}");
    // The same path in the wrong document (the mistake a first-document-only tool makes).
    let wrong = DEPLOY.replacen("replicas: 4 ", "replicas: 8 ", 1);
    let e = verify(&before, &wrong, 1, &path, "8").unwrap_err();
    assert!(e.to_string().contains("document 0 spec.replicas"), "{e}");
    // Broken text.
    let e = verify(&before, "a: [", 1, &path, "8").unwrap_err();
    assert!(e.to_string().contains("no longer parses"), "{e}");
    // A different style is a different value.
    let quoted = DEPLOY.replacen("replicas: 4 #", "replicas: '8' #", 1);
    assert!(verify(&before, &quoted, 1, &path, "8").is_err());
}

#[test]
fn targets_and_reasons_read_well() {
    assert_eq!(
        deployment("qwen-7b").to_string(),
        "Deployment qwen-7b spec.replicas"
    );
    let ns = EditTarget::Workload {
        kind: "LeaderWorkerSet".into(),
        name: "q".into(),
        namespace: Some("ml".into()),
    };
    assert_eq!(ns.to_string(), "LeaderWorkerSet ml/q spec.replicas");
    assert_eq!(
        helm("vllm.replicaCount").to_string(),
        "Helm values vllm.replicaCount"
    );
    assert_eq!(
        kustomize("qwen-7b").to_string(),
        "Kustomize replicas[name=qwen-7b].count"
    );
    assert_eq!(
        parse_dotted("a.b[0][2].c"),
        Some(vec![
            key("a"),
            key("b"),
            Seg::Index(0),
            Seg::Index(2),
            key("c")
        ])
    );
    assert_eq!(parse_dotted("a[x]"), None);
    assert_eq!(parse_dotted("a[0]b"), None);
    assert_eq!(parse_dotted(""), None);
    let src = "pools:\n  - name: a\n    replicas: 4\n";
    assert_eq!(
        set(src, &helm("pools[0].replicas"), 5),
        "pools:\n  - name: a\n    replicas: 5\n"
    );
}

#[test]
fn diff_of_the_deploy_fixture() {
    let diff = unified_diff("deploy/vllm.yaml", DEPLOY, DEPLOY_EXPECTED);
    let want = "--- a/deploy/vllm.yaml\n+++ b/deploy/vllm.yaml\n@@ -16,7 +16,7 @@\n   \
                    namespace: inference\n   labels: {app: 'vllm', \"tier\": \"serving\",   plain: yes}\n \
                    spec:\n-  replicas: 4 # goodput: replicas\n+  replicas: 8 # goodput: replicas\n   \
                    selector:\n     matchLabels:\n       app: vllm\n";
    assert_eq!(diff, want);
    assert_eq!(diff.lines().filter(|l| l.starts_with('-')).count(), 2); // `---` and the line
    assert_eq!(diff.lines().filter(|l| l.starts_with('+')).count(), 2); // `+++` and the line
    // CRLF shows the same lines, without the \r.
    let crlf = unified_diff(
        "deploy/vllm.yaml",
        &DEPLOY.replace('\n', "\r\n"),
        &DEPLOY_EXPECTED.replace('\n', "\r\n"),
    );
    assert_eq!(crlf, want);
}

#[test]
fn diff_edges() {
    assert_eq!(unified_diff("f", "a\n", "a\n"), "");
    assert_eq!(
        unified_diff("f", "x: 1", "x: 2"),
        "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-x: 1\n\\ No newline at end of file\n+x: 2\n\\ No newline at end of file\n"
    );
    assert_eq!(
        unified_diff("f", "a\nb", "a\nb\n"),
        "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"
    );
    assert_eq!(
        unified_diff("f", "", "a\n"),
        "--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+a\n"
    );
    assert_eq!(
        unified_diff("f", "a\nb\n", "a\n"),
        "--- a/f\n+++ b/f\n@@ -1,2 +1 @@\n a\n-b\n"
    );
    let before = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
    let after = "1\n2\n3\nX\n5\n6\nY\n8\n9\n";
    assert_eq!(
        unified_diff("f", before, after),
        "--- a/f\n+++ b/f\n@@ -1,9 +1,9 @@\n 1\n 2\n 3\n-4\n+X\n 5\n 6\n-7\n+Y\n 8\n 9\n"
    );
}

// ---- property test: generated multi-document files --------------------------------------

#[derive(Clone, Debug)]
struct GenDoc {
    kind: &'static str,
    name: &'static str,
    replicas: u64,
    /// 0 plain, 1 single quotes, 2 double quotes.
    quote: u8,
    name_quote: u8,
    comment: Option<&'static str>,
    spaces: usize,
    flow_spec: bool,
    extra_first: bool,
    note: bool,
    end_marker: bool,
}

fn quoted(v: &str, quote: u8) -> String {
    match quote {
        1 => format!("'{v}'"),
        2 => format!("\"{v}\""),
        _ => v.to_string(),
    }
}

fn gen_doc() -> impl Strategy<Value = GenDoc> {
    let comment = prop::option::of(prop::sample::select(vec![
        "# goodput: replicas",
        "#",
        "# replicas: 4 \"quoted\" 'x'",
        "# ünïcödé",
    ]));
    (
        (
            prop::sample::select(vec!["Deployment", "Service", "StatefulSet"]),
            prop::sample::select(vec!["target", "other", "vllm"]),
            0u64..200,
            0u8..3,
            0u8..3,
        ),
        (
            comment,
            1usize..4,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (kind, name, replicas, quote, name_quote),
                (comment, spaces, flow_spec, extra_first, note, end_marker),
            )| GenDoc {
                kind,
                name,
                replicas,
                quote,
                name_quote,
                comment,
                spaces,
                flow_spec,
                extra_first,
                note,
                end_marker,
            },
        )
}

fn render_doc(d: &GenDoc, ind: &str) -> String {
    let mut s = String::new();
    s.push_str("apiVersion: apps/v1\n");
    s.push_str(&format!("kind: {}\n", d.kind));
    s.push_str(&format!(
        "metadata:\n{ind}name: {}\n",
        quoted(d.name, d.name_quote)
    ));
    if d.note {
        s.push_str(&format!(
                "{ind}annotations:\n{ind}{ind}note: |\n{ind}{ind}{ind}spec:\n{ind}{ind}{ind}{ind}replicas: {}\n",
                d.replicas
            ));
    }
    let value = quoted(&d.replicas.to_string(), d.quote);
    let comment = d.comment.map(|c| format!("  {c}")).unwrap_or_default();
    let sp = " ".repeat(d.spaces);
    if d.flow_spec {
        if d.extra_first {
            s.push_str(&format!(
                "spec: {{paused: false, replicas:{sp}{value} }}{comment}\n"
            ));
        } else {
            s.push_str(&format!(
                "spec: {{ replicas:{sp}{value},paused: false}}{comment}\n"
            ));
        }
    } else {
        s.push_str("spec:\n");
        if d.extra_first {
            s.push_str(&format!(
                "{ind}selector:\n{ind}{ind}matchLabels: {{app: x}}\n"
            ));
        }
        s.push_str(&format!("{ind}replicas:{sp}{value}{comment}\n"));
        s.push_str(&format!("{ind}strategy:\n{ind}{ind}type: RollingUpdate\n"));
    }
    if d.end_marker {
        s.push_str("...\n");
    }
    s
}

#[derive(Clone, Debug)]
struct GenFile {
    docs: Vec<GenDoc>,
    crlf: bool,
    bom: bool,
    leading_comment: bool,
    first_marker: bool,
    final_newline: bool,
    indent: usize,
    new_value: u64,
}

fn gen_file() -> impl Strategy<Value = GenFile> {
    (
        prop::collection::vec(gen_doc(), 0..4),
        gen_doc(),
        0usize..4,
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
        prop::sample::select(vec![2usize, 4]),
        prop_oneof![0u64..20, 0u64..100_000],
    )
        .prop_map(
            |(
                mut decoys,
                mut target,
                at,
                (crlf, bom, leading_comment, first_marker, final_newline),
                indent,
                new_value,
            )| {
                // Exactly one Deployment named `target`.
                for d in &mut decoys {
                    if d.kind == "Deployment" && d.name == "target" {
                        d.name = "other";
                    }
                }
                target.kind = "Deployment";
                target.name = "target";
                decoys.insert(at.min(decoys.len()), target);
                GenFile {
                    docs: decoys,
                    crlf,
                    bom,
                    leading_comment,
                    first_marker,
                    final_newline,
                    indent,
                    new_value,
                }
            },
        )
}

fn render_file(f: &GenFile) -> String {
    let ind = " ".repeat(f.indent);
    let mut s = String::new();
    if f.bom {
        s.push('\u{feff}');
    }
    if f.leading_comment {
        s.push_str("# generated: replicas: 4\n");
    }
    for (i, d) in f.docs.iter().enumerate() {
        if i > 0 || f.first_marker {
            s.push_str("---\n");
        }
        s.push_str(&render_doc(d, &ind));
    }
    if !f.final_newline {
        s.pop();
    }
    if f.crlf {
        s = s.replace('\n', "\r\n");
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_files_change_only_the_digits(f in gen_file()) {
        let src = render_file(&f);
        let target = deployment("target");
        let old = f.docs.iter().find(|d| d.kind == "Deployment" && d.name == "target").map(|d| d.replicas);
        let before = locate(&src, &target).map_err(|e| TestCaseError::fail(format!("{e}\n{src}")))?;
        prop_assert_eq!(Some(before.replicas), old);
        let edit = set_replicas(&src, &target, f.new_value).map_err(|e| TestCaseError::fail(format!("{e}\n{src}")))?;
        let out = edit.text;
        if f.new_value == before.replicas {
            prop_assert_eq!(&out, &src);
        } else {
            let (a, b) = (src.as_bytes(), out.as_bytes());
            let p = a.iter().zip(b).take_while(|(x, y)| x == y).count();
            let max_s = a.len().min(b.len()) - p;
            let s = a.iter().rev().zip(b.iter().rev()).take(max_s).take_while(|(x, y)| x == y).count();
            let (old_mid, new_mid) = (&a[p..a.len() - s], &b[p..b.len() - s]);
            prop_assert!(old_mid.iter().all(u8::is_ascii_digit), "{:?}", old_mid);
            prop_assert!(new_mid.iter().all(u8::is_ascii_digit), "{:?}", new_mid);
            // The changed bytes are on the located line, inside the number.
            let line = src[..p].matches('\n').count() + 1;
            prop_assert_eq!(line, before.line);
            let digits_start = p - a[..p].iter().rev().take_while(|c| c.is_ascii_digit()).count();
            let digits_end = a[digits_start..].iter().take_while(|c| c.is_ascii_digit()).count() + digits_start;
            prop_assert_eq!(&src[digits_start..digits_end], before.replicas.to_string());
            prop_assert_eq!(
                format!("{}{}{}", &src[..digits_start], f.new_value, &src[digits_end..]),
                out.clone()
            );
        }
        let after = locate(&out, &target).map_err(|e| TestCaseError::fail(format!("{e}\n{out}")))?;
        prop_assert_eq!(after.replicas, f.new_value);
        prop_assert_eq!((after.document, after.line, after.column, after.path), (before.document, before.line, before.column, before.path));
    }
}
