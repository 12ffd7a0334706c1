//! `goodput lint`: CapacityBenchmark files checked before any traffic.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

/// Flags of `goodput lint`.
#[derive(clap::Args)]
pub struct LintArgs {
    /// CapacityBenchmark YAML files. A file of several documents (`---`) is linted
    /// benchmark by benchmark; its other objects (a Deployment, a Service) are left alone.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Lint for the operator, not for `goodput bench`: a Service target and a manifest in
    /// a ConfigMap, which only the operator resolves, are accepted (the operator then
    /// checks the manifest when it reads the ConfigMap).
    #[arg(long)]
    cluster: bool,
}

/// `FILE: error: PATH: message` per finding (`warning:` for warnings), `FILE: ok` for a file
/// without errors (with ` (NAME)` after FILE when the file holds several documents); exit
/// status 1 if any file could not be parsed, holds no benchmark, or has an error.
pub fn run(args: LintArgs) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let mut failed = false;
    for path in &args.files {
        let name = path.display();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                failed = true;
                writeln!(out, "{name}: error: cannot read: {e}")?;
                continue;
            }
        };
        let documents = goodput::api::yaml_documents(&text);
        let several = documents.len() > 1;
        let mut benchmarks = 0;
        for doc in &documents {
            if several && !goodput::api::is_benchmark_document(&doc.text) {
                continue;
            }
            benchmarks += 1;
            let label = match (several, goodput::api::document_name(&doc.text)) {
                (true, Some(n)) => format!("{name} ({n})"),
                _ => name.to_string(),
            };
            match goodput::api::parse_benchmark_document(doc, path) {
                Err(e) => {
                    failed = true;
                    writeln!(out, "{label}: error: {}", e.message())?;
                }
                Ok(mut loaded) => {
                    if args.cluster {
                        loaded
                            .findings
                            .retain(|f| !goodput::api::resolved_in_cluster(f));
                        loaded
                            .findings
                            .extend(goodput::api::lint::cluster_unsupported(
                                &loaded.benchmark.spec,
                            ));
                    }
                    for finding in &loaded.findings {
                        writeln!(out, "{label}: {finding}")?;
                    }
                    if loaded.has_errors() {
                        failed = true;
                    } else {
                        writeln!(out, "{label}: ok")?;
                    }
                }
            }
        }
        if benchmarks == 0 {
            failed = true;
            writeln!(out, "{name}: error: no CapacityBenchmark in the file")?;
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
