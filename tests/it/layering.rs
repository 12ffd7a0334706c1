//! The pure core keeps to itself: its modules name no module that does IO (the load
//! generator, the simulated engine's servers, the operator, the CLI, Git, the pack) nor the
//! CRD types. Splitting the crate into a workspace (the core below the CRD types, the
//! instruments and the shells) needs exactly that; this holds it until the compiler can.

use std::path::{Path, PathBuf};

/// Files and folders of `src/` that make the pure core.
const CORE: &[&str] = &[
    "workload",
    "analysis",
    "planning",
    "record.rs",
    "failure/mod.rs",
    "failure/report.rs",
    "alerts",
    "engine_metrics/parse.rs",
    "engine_metrics/profile.rs",
    "engine_metrics/series.rs",
    "engine_metrics/findings.rs",
];

/// The modules the core may name.
const CORE_MODULES: &[&str] = &[
    "workload",
    "analysis",
    "planning",
    "record",
    "failure",
    "alerts",
    "engine_metrics",
];

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .expect("a readable source folder")
            .map(|e| e.expect("a readable entry").path())
            .collect();
        entries.sort();
        for e in entries {
            rust_files(&e, out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// `crate::name` paths in `text`, before its first `#[cfg(test)]` (a unit test may
/// reach further than the code it tests).
fn crate_paths(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    code.match_indices("crate::")
        .map(|(i, m)| {
            code[i + m.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn the_pure_core_names_no_shell_instrument_or_crd_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for part in CORE {
        let path = src.join(part);
        assert!(path.exists(), "{} is gone: update CORE", path.display());
        rust_files(&path, &mut files);
    }
    let mut upward = Vec::new();
    for file in files.iter().filter(|f| !f.ends_with("tests.rs")) {
        let text = std::fs::read_to_string(file).expect("a readable source file");
        for name in crate_paths(&text) {
            if !CORE_MODULES.contains(&name.as_str()) {
                upward.push(format!(
                    "{}: crate::{name}",
                    file.strip_prefix(&src).unwrap_or(file).display()
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "the core names outside modules: {upward:#?}"
    );
}

#[test]
fn a_path_to_a_shell_is_found() {
    let text = "use crate::analysis::mean;\nfn f() { crate::loadgen::run(); }\n\
                #[cfg(test)]\nmod tests { use crate::sim::x; }\n";
    assert_eq!(crate_paths(text), ["analysis", "loadgen"]);
}
