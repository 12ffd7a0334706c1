//! What a scaled workload says it runs, and whether a benchmark's evidence transfers to it.
//!
//! Per-replica capacity measured by a `CapacityBenchmark` transfers to a workload only when
//! the model, its revision, the engine version, the tensor-parallel size and the class mix
//! are the same. A `ServingPlan` reads those facts from the workload object as fetched
//! dynamically (any kind with `/scale`: Deployment, StatefulSet, LeaderWorkerSet, Argo
//! Rollout), first from `goodput.dev/*` annotations, then from the engine container's image
//! and arguments, and compares them with the benchmark's frozen [`WorkloadManifest`].
//!
//! Everything here is pure: [`declared_identity`] reads a `serde_json::Value`,
//! [`identity_key`] prints what changes the evidence, and [`compare`] lists the differences
//! that refuse a plan and the facts it could not check.
//!
//! Every line this module writes (a problem, a refusal, an unchecked fact) starts with the
//! fact's label and a colon: `model`, `model revision`, `engine version`, `TP`,
//! `workload mix`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use goodput_core::engine_metrics::{ContainerArgs, EngineKind};
use goodput_core::workload::WorkloadManifest;

/// Annotation: the model id the workload serves.
pub const MODEL: &str = "goodput.dev/model";
/// Annotation: the model's weights revision.
pub const MODEL_REVISION: &str = "goodput.dev/model-revision";
/// Annotation: the serving engine's version.
pub const ENGINE_VERSION: &str = "goodput.dev/engine-version";
/// Annotation: the tensor-parallel size of one replica.
pub const TP: &str = "goodput.dev/tp";
/// Annotation: the class mix of the traffic, e.g. `chat=0.6,summarize=0.3,code=0.1`.
pub const WORKLOAD_MIX: &str = "goodput.dev/workload-mix";

/// Largest absolute difference between two shares of one class that still counts as the
/// same mix.
pub const MIX_TOLERANCE: f64 = 0.005;

/// Labels of the facts, the first word(s) of every line this module writes.
const L_MODEL: &str = "model";
const L_REVISION: &str = "model revision";
const L_ENGINE_VERSION: &str = "engine version";
const L_TP: &str = "TP";
const L_MIX: &str = "workload mix";

/// One declared fact and where it was read.
#[derive(Clone, Debug, PartialEq)]
pub struct Declared<T> {
    /// The value.
    pub value: T,
    /// Where it was read: `annotation goodput.dev/tp`, `pod template annotation
    /// goodput.dev/tp`, `container vllm arg --tensor-parallel-size`, `container vllm image
    /// vllm/vllm-openai:v0.6.3`.
    pub from: String,
}

/// What a workload declares it runs, fact by fact; `None` where it does not say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeclaredIdentity {
    /// Model id as the engine serves it.
    pub model: Option<Declared<String>>,
    /// Model weights revision.
    pub model_revision: Option<Declared<String>>,
    /// Engine name, `vllm` or `sglang` (only used to read arguments and the version).
    pub engine: Option<Declared<String>>,
    /// Engine version, as declared (a leading `v` may remain on an annotation's value).
    pub engine_version: Option<Declared<String>>,
    /// Tensor-parallel size of one replica.
    pub tp: Option<Declared<u32>>,
    /// Share of traffic per class.
    pub workload_mix: Option<Declared<BTreeMap<String, f64>>>,
    /// Declarations that could not be read (e.g. tp "two", a mix entry without '=', a
    /// `--tensor-parallel-size $(TP)` argument), one line each naming where and the value,
    /// starting with the fact's label (`TP: annotation goodput.dev/tp is "two", ...`). The
    /// fact itself is then `None`.
    pub problems: Vec<String>,
}

/// Reads what a workload object declares it runs.
///
/// Annotations come first: the workload's `metadata.annotations`, then its pod templates'
/// (`spec.template`, or for a LeaderWorkerSet `spec.leaderWorkerTemplate.leaderTemplate`
/// then `.workerTemplate`). A fact without an annotation is read from the first container
/// of those templates that looks like an engine (its image or command names `vllm` or
/// `sglang`): its `command` and `args` words and its image tag. An annotation that is
/// present but unreadable is a problem, not a reason to look further.
pub fn declared_identity(workload: &Value) -> DeclaredIdentity {
    let templates = pod_templates(workload);
    let annotations = annotation_sources(workload, &templates);
    let container = templates.iter().find_map(|t| engine_container(t));
    let mut problems = Vec::new();

    let model = annotated(&annotations, MODEL, L_MODEL, parse_text)
        .or_else(|| container.as_ref().and_then(EngineContainer::model));
    let model_revision = annotated(&annotations, MODEL_REVISION, L_REVISION, parse_text)
        .or_else(|| container.as_ref().and_then(EngineContainer::revision));
    let engine_version = annotated(&annotations, ENGINE_VERSION, L_ENGINE_VERSION, parse_text)
        .or_else(|| {
            container
                .as_ref()
                .and_then(EngineContainer::version)
                .map(Ok)
        });
    let tp = annotated(&annotations, TP, L_TP, parse_tp)
        .or_else(|| container.as_ref().and_then(EngineContainer::tp));
    let workload_mix = annotated(&annotations, WORKLOAD_MIX, L_MIX, parse_mix);

    DeclaredIdentity {
        model: settle(model, &mut problems),
        model_revision: settle(model_revision, &mut problems),
        engine: container.as_ref().map(|c| c.engine.clone()),
        engine_version: settle(engine_version, &mut problems),
        tp: settle(tp, &mut problems),
        workload_mix: settle(workload_mix, &mut problems),
        problems,
    }
}

/// A short, stable key of what changes the evidence: `model=Qwen/Qwen2.5-7B-Instruct
/// revision=r1 engine=0.6.3 tp=1`. A fact not declared prints as `?`; the engine version
/// prints without a leading `v`.
pub fn identity_key(d: &DeclaredIdentity) -> String {
    fn or_unknown(v: Option<String>) -> String {
        v.unwrap_or_else(|| "?".to_string())
    }
    format!(
        "model={} revision={} engine={} tp={}",
        or_unknown(d.model.as_ref().map(|m| m.value.clone())),
        or_unknown(d.model_revision.as_ref().map(|r| r.value.clone())),
        or_unknown(
            d.engine_version
                .as_ref()
                .map(|v| strip_v(&v.value).to_string())
        ),
        or_unknown(d.tp.as_ref().map(|t| t.value.to_string())),
    )
}

/// The outcome of comparing a workload with a benchmark's manifest.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Comparison {
    /// Differences (and unreadable declarations) that keep the benchmark's capacity from
    /// transferring, one line each.
    pub refused: Vec<String>,
    /// Facts the workload does not declare, so nothing was compared, one line each.
    pub unchecked: Vec<String>,
}

/// Compares what a workload declares with what the benchmark measured: model id (exact),
/// model revision, engine version (a leading `v` ignored on either side), TP and the class
/// mix (same classes, each share within [`MIX_TOLERANCE`]). Each difference and each of
/// `declared.problems` is a refusal; a fact not declared (and without a problem) is
/// unchecked. The engine name is not compared.
pub fn compare(manifest: &WorkloadManifest, declared: &DeclaredIdentity) -> Comparison {
    let mut out = Comparison {
        refused: declared.problems.clone(),
        unchecked: Vec::new(),
    };
    let has_problem = |label: &str| {
        declared
            .problems
            .iter()
            .any(|p| p.starts_with(&format!("{label}: ")))
    };
    let mut check = |label: &str, verdict: Verdict, how: &str| match verdict {
        Verdict::Same => {}
        Verdict::Differs(line) => out.refused.push(line),
        Verdict::Undeclared if has_problem(label) => {}
        Verdict::Undeclared => out
            .unchecked
            .push(format!("{label}: the workload does not declare it ({how})")),
    };

    check(
        L_MODEL,
        verdict_text(L_MODEL, &manifest.model.id, &declared.model, |a, b| a == b),
        "annotation goodput.dev/model, a --model argument or `vllm serve MODEL`",
    );
    check(
        L_REVISION,
        verdict_text(
            L_REVISION,
            &manifest.model.revision,
            &declared.model_revision,
            |a, b| a == b,
        ),
        "annotation goodput.dev/model-revision or a --revision argument",
    );
    check(
        L_ENGINE_VERSION,
        verdict_text(
            L_ENGINE_VERSION,
            &manifest.engine.version,
            &declared.engine_version,
            |a, b| strip_v(a) == strip_v(b),
        ),
        "annotation goodput.dev/engine-version or a versioned vllm/sglang image tag",
    );
    check(
        L_TP,
        verdict_tp(manifest.engine.placement.tp, &declared.tp),
        "annotation goodput.dev/tp or a --tensor-parallel-size/--tp-size argument",
    );
    check(
        L_MIX,
        verdict_mix(&manifest_mix(manifest), &declared.workload_mix),
        "annotation goodput.dev/workload-mix",
    );
    out
}

/// The result of comparing one fact.
enum Verdict {
    /// Both sides agree.
    Same,
    /// They differ; the refusal line.
    Differs(String),
    /// The workload does not declare the fact.
    Undeclared,
}

/// Compares one text fact; `same` decides equality.
fn verdict_text(
    label: &str,
    measured: &str,
    declared: &Option<Declared<String>>,
    same: impl Fn(&str, &str) -> bool,
) -> Verdict {
    match declared {
        None => Verdict::Undeclared,
        Some(d) if same(measured, &d.value) => Verdict::Same,
        Some(d) => Verdict::Differs(format!(
            "{label}: the benchmark measured {measured:?}, the workload runs {:?} ({})",
            d.value, d.from
        )),
    }
}

/// Compares the tensor-parallel size.
fn verdict_tp(measured: u32, declared: &Option<Declared<u32>>) -> Verdict {
    match declared {
        None => Verdict::Undeclared,
        Some(d) if d.value == measured => Verdict::Same,
        Some(d) => Verdict::Differs(format!(
            "{L_TP}: the benchmark measured tp={measured}, the workload runs tp={} ({})",
            d.value, d.from
        )),
    }
}

/// Compares the class mix: the classes on either side only, or whose shares differ by more
/// than [`MIX_TOLERANCE`], are named.
fn verdict_mix(
    measured: &BTreeMap<String, f64>,
    declared: &Option<Declared<BTreeMap<String, f64>>>,
) -> Verdict {
    let Some(d) = declared else {
        return Verdict::Undeclared;
    };
    let mut names: Vec<&String> = measured.keys().chain(d.value.keys()).collect();
    names.sort();
    names.dedup();
    let differing: Vec<&str> = names
        .into_iter()
        .filter(|name| match (measured.get(*name), d.value.get(*name)) {
            // A hair of slack so that 0.6 against 0.605 counts as within 0.005.
            (Some(a), Some(b)) => (a - b).abs() > MIX_TOLERANCE + 1e-9,
            _ => true,
        })
        .map(String::as_str)
        .collect();
    if differing.is_empty() {
        return Verdict::Same;
    }
    Verdict::Differs(format!(
        "{L_MIX}: the benchmark measured {}, the workload runs {} ({}); classes that differ: {}",
        format_mix(measured),
        format_mix(&d.value),
        d.from,
        differing.join(", ")
    ))
}

/// The manifest's share per class.
fn manifest_mix(manifest: &WorkloadManifest) -> BTreeMap<String, f64> {
    manifest
        .workload
        .iter()
        .map(|c| (c.name.clone(), c.mix))
        .collect()
}

/// `chat=0.5,long=0.5`, in class-name order.
fn format_mix(mix: &BTreeMap<String, f64>) -> String {
    mix.iter()
        .map(|(name, share)| format!("{name}={share}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A version without one leading `v` or `V`.
fn strip_v(version: &str) -> &str {
    version
        .strip_prefix(['v', 'V'])
        .filter(|rest| !rest.is_empty())
        .unwrap_or(version)
}

// ---------------------------------------------------------------------------------------
// Reading the workload object.

/// One fact as read: `None` absent, `Some(Err(problem line))` present but unreadable.
type Reading<T> = Option<Result<Declared<T>, String>>;

/// Keeps a fact that was read, and moves an unreadable one to `problems`.
fn settle<T>(reading: Reading<T>, problems: &mut Vec<String>) -> Option<Declared<T>> {
    match reading? {
        Ok(d) => Some(d),
        Err(problem) => {
            problems.push(problem);
            None
        }
    }
}

/// The pod templates, in the order they are read: `spec.template`, or a LeaderWorkerSet's
/// leader template then worker template.
fn pod_templates(workload: &Value) -> Vec<&Value> {
    let spec = &workload["spec"];
    match spec.get("leaderWorkerTemplate") {
        Some(lws) => ["leaderTemplate", "workerTemplate"]
            .iter()
            .filter_map(|k| lws.get(*k))
            .filter(|t| t.is_object())
            .collect(),
        None => spec
            .get("template")
            .filter(|t| t.is_object())
            .into_iter()
            .collect(),
    }
}

/// The annotation maps in the order they are read, each with how its values are cited.
fn annotation_sources<'a>(
    workload: &'a Value,
    templates: &[&'a Value],
) -> Vec<(&'static str, &'a Map<String, Value>)> {
    let own = std::iter::once(("annotation", workload));
    let pods = templates.iter().map(|t| ("pod template annotation", *t));
    own.chain(pods)
        .filter_map(|(how, obj)| {
            obj.pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .map(|m| (how, m))
        })
        .collect()
}

/// The first annotation `key` among `sources`, parsed; a parse failure is a problem line.
fn annotated<T>(
    sources: &[(&'static str, &Map<String, Value>)],
    key: &str,
    label: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Reading<T> {
    let (how, raw) = sources
        .iter()
        .find_map(|(how, map)| map.get(key).map(|v| (*how, v)))?;
    let from = format!("{how} {key}");
    let Some(text) = raw.as_str() else {
        return Some(Err(format!("{label}: {from} is {raw}, not a string")));
    };
    Some(
        parse(text)
            .map(|value| Declared {
                value,
                from: from.clone(),
            })
            .map_err(|why| format!("{label}: {from} is {text:?}, {why}")),
    )
}

/// A non-empty text value, trimmed.
fn parse_text(text: &str) -> Result<String, String> {
    let t = text.trim();
    if t.is_empty() {
        Err("empty".to_string())
    } else {
        Ok(t.to_string())
    }
}

/// A positive whole tensor-parallel size.
fn parse_tp(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("not a positive whole number".to_string()),
    }
}

/// `chat=0.6,summarize=0.3,code=0.1`: each class once, each share a number in [0, 1].
/// Empty entries (a trailing comma) are skipped.
fn parse_mix(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let mut mix = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, share)) = entry.split_once('=') else {
            return Err(format!("entry {entry:?} has no '='"));
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(format!("entry {entry:?} has no class name"));
        }
        let share: f64 = share
            .trim()
            .parse()
            .ok()
            .filter(|s: &f64| (0.0..=1.0).contains(s))
            .ok_or_else(|| format!("entry {entry:?} has no share between 0 and 1"))?;
        if mix.insert(name.to_string(), share).is_some() {
            return Err(format!("class {name:?} appears twice"));
        }
    }
    if mix.is_empty() {
        return Err("no classes".to_string());
    }
    Ok(mix)
}

// ---------------------------------------------------------------------------------------
// The engine container.

/// The engines whose containers are read (their descriptor says how), in the order tried.
fn read_engines() -> impl Iterator<Item = (EngineKind, &'static ContainerArgs)> {
    EngineKind::ALL
        .into_iter()
        .filter_map(|k| Some((k, k.descriptor().container.as_ref()?)))
}

/// The container a workload's engine runs in, as read.
struct EngineContainer {
    /// The container's name (`?` when unnamed).
    name: String,
    /// Which engine.
    kind: EngineKind,
    /// How its command line names what it serves.
    args: &'static ContainerArgs,
    /// The engine's name and where it was read.
    engine: Declared<String>,
    /// `command` then `args`, each split on whitespace.
    words: Vec<String>,
    /// The image reference, if any.
    image: Option<String>,
}

/// The first container of a pod template that looks like an engine.
fn engine_container(template: &Value) -> Option<EngineContainer> {
    template
        .pointer("/spec/containers")?
        .as_array()?
        .iter()
        .find_map(read_container)
}

/// A container, if its command or image names an engine (the command wins).
fn read_container(container: &Value) -> Option<EngineContainer> {
    let name = container["name"].as_str().unwrap_or("?").to_string();
    let words = container_words(container);
    let image = container["image"].as_str().map(str::to_string);
    let by_command = read_engines()
        .find(|(e, _)| words.iter().any(|w| word_names_engine(w, *e)))
        .map(|e| (e, format!("container {name} command")));
    let by_image = || {
        let image = image.as_deref()?;
        let image_name = split_image(image).0.to_ascii_lowercase();
        read_engines()
            .find(|(e, _)| image_name.contains(e.as_str()))
            .map(|e| (e, format!("container {name} image {image}")))
    };
    let ((kind, args), from) = by_command.or_else(by_image)?;
    Some(EngineContainer {
        engine: Declared {
            value: kind.as_str().to_string(),
            from,
        },
        name,
        kind,
        args,
        words,
        image,
    })
}

/// The `command` and `args` strings of a container, split on whitespace (so a `sh -c "..."`
/// script reads as words), with surrounding quotes trimmed.
fn container_words(container: &Value) -> Vec<String> {
    ["command", "args"]
        .iter()
        .filter_map(|k| container[*k].as_array())
        .flatten()
        .filter_map(Value::as_str)
        .flat_map(str::split_whitespace)
        .map(|w| w.trim_matches(['"', '\'']))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether a word is the engine's program (`vllm`, `/usr/bin/vllm`) or one of its Python
/// modules (`vllm.entrypoints.openai.api_server`, `sglang.launch_server`).
fn word_names_engine(word: &str, engine: EngineKind) -> bool {
    if word.starts_with('-') {
        return false;
    }
    let base = word.rsplit('/').next().unwrap_or(word);
    let name = engine.as_str();
    base == name || base.starts_with(&format!("{name}."))
}

impl EngineContainer {
    /// The model: vLLM's `serve MODEL` positional, else the last model flag.
    fn model(&self) -> Reading<String> {
        if self.kind == EngineKind::Vllm
            && let Some(model) = self.serve_positional()
        {
            return Some(Ok(Declared {
                value: model,
                from: format!("container {} arg after `vllm serve`", self.name),
            }));
        }
        self.flag(self.args.model, L_MODEL, parse_text)
    }

    /// The model revision, from `--revision`.
    fn revision(&self) -> Reading<String> {
        self.flag(&["--revision"], L_REVISION, parse_text)
    }

    /// The tensor-parallel size, from the engine's TP flag.
    fn tp(&self) -> Reading<u32> {
        self.flag(self.args.tp, L_TP, parse_tp)
    }

    /// The engine version, from the tag of an image whose name names an engine.
    fn version(&self) -> Option<Declared<String>> {
        let image = self.image.as_deref()?;
        let (name, tag) = split_image(image);
        let lower = name.to_ascii_lowercase();
        if !read_engines().any(|(e, _)| lower.contains(e.as_str())) {
            return None;
        }
        Some(Declared {
            value: version_from_tag(tag?)?,
            from: format!("container {} image {image}", self.name),
        })
    }

    /// The word after `serve` when `serve` follows a word naming vLLM and is not a flag.
    fn serve_positional(&self) -> Option<String> {
        self.words.windows(3).find_map(|w| {
            (word_names_engine(&w[0], EngineKind::Vllm)
                && w[1] == "serve"
                && !w[2].starts_with('-'))
            .then(|| w[2].clone())
        })
    }

    /// The value of the last of `flags` given (`--flag value` or `--flag=value`), parsed;
    /// a flag without a value, or a value that does not parse, is a problem line.
    fn flag<T>(
        &self,
        flags: &[&str],
        label: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Reading<T> {
        let mut found: Option<(&str, Option<&str>)> = None;
        for (i, word) in self.words.iter().enumerate() {
            for flag in flags {
                if word == flag {
                    let next = self.words.get(i + 1).map(String::as_str);
                    found = Some((flag, next.filter(|v| !v.starts_with('-'))));
                } else if let Some(value) = word
                    .strip_prefix(flag)
                    .and_then(|rest| rest.strip_prefix('='))
                {
                    found = Some((flag, Some(value)));
                }
            }
        }
        let (flag, value) = found?;
        let from = format!("container {} arg {flag}", self.name);
        let Some(value) = value else {
            return Some(Err(format!("{label}: {from} has no value")));
        };
        Some(
            parse(value)
                .map(|value| Declared {
                    value,
                    from: from.clone(),
                })
                .map_err(|why| format!("{label}: {from} is {value:?}, {why}")),
        )
    }
}

/// An image reference's name and tag: `registry:5000/vllm/vllm-openai:v0.6.3@sha256:...`
/// is (`registry:5000/vllm/vllm-openai`, `Some("v0.6.3")`); a digest is dropped.
fn split_image(image: &str) -> (&str, Option<&str>) {
    let without_digest = image.split_once('@').map_or(image, |(name, _)| name);
    let last_slash = without_digest.rfind('/').map_or(0, |i| i + 1);
    match without_digest[last_slash..].rfind(':') {
        Some(colon) => {
            let at = last_slash + colon;
            (&without_digest[..at], Some(&without_digest[at + 1..]))
        }
        None => (without_digest, None),
    }
}

/// An engine version from an image tag: a leading `v` dropped, cut at the first `-`
/// (`v0.4.1.post7-cu124` → `0.4.1.post7`); `None` unless it starts with a digit (so
/// `latest`, `nightly` and the like are unknown).
fn version_from_tag(tag: &str) -> Option<String> {
    let t = tag.strip_prefix(['v', 'V']).unwrap_or(tag);
    let t = t.split_once('-').map_or(t, |(head, _)| head);
    t.starts_with(|c: char| c.is_ascii_digit())
        .then(|| t.to_string())
}

#[cfg(test)]
mod tests;
