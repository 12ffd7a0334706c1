//! `goodput crds`: the CustomResourceDefinitions printed, written or checked.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

/// Flags of `goodput crds`.
#[derive(clap::Args)]
pub struct CrdsArgs {
    /// Write each CRD to its file in this folder (`capacitybenchmark.yaml`,
    /// `servingplan.yaml`) instead of printing them.
    #[arg(long, value_name = "DIR", conflicts_with = "check")]
    write: Option<PathBuf>,
    /// Compare the files in this folder with the generated CRDs; exit status 1, naming
    /// each file that differs, if any does (the CRD drift check).
    #[arg(long, value_name = "DIR")]
    check: Option<PathBuf>,
}

pub fn run(args: CrdsArgs) -> Result<ExitCode> {
    let files = goodput::api::crd_files();
    if let Some(dir) = args.write {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, yaml) in &files {
            let path = dir.join(name);
            std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(dir) = args.check {
        let mut drifted = false;
        for (name, yaml) in &files {
            let path = dir.join(name);
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            if &committed != yaml {
                eprintln!(
                    "{}: differs from the generated CRD: run `goodput crds --write {}`",
                    path.display(),
                    dir.display()
                );
                drifted = true;
            }
        }
        return Ok(if drifted {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        });
    }
    let stream: Vec<&str> = files.iter().map(|(_, yaml)| yaml.as_str()).collect();
    write!(std::io::stdout().lock(), "{}", stream.join("---\n"))?;
    Ok(ExitCode::SUCCESS)
}
