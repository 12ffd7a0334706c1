//! The subcommands, one file each, and what several share; `main.rs` parses the command
//! line and dispatches here.

use std::path::Path;

use anyhow::Result;
use clap::ValueEnum;

use goodput::workload::{LoadedManifest, WorkloadManifest, load_manifest, seed_manifest};

pub mod analyze;
pub mod bench;
pub mod crds;
pub mod lint;
pub mod loadgen;
pub mod operator;
pub mod plan;
pub mod propose;
pub mod serve_sim;
pub mod simulate;

/// How a subcommand prints its result.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

/// Resolves on Ctrl-C or SIGTERM (what Kubernetes sends a pod before it kills it).
pub async fn shutdown_signal() {
    let term = async {
        #[cfg(unix)]
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
            return;
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// The manifest from `--manifest`, or the seed's; warnings go to stderr.
pub fn manifest_or_seed(path: Option<&Path>) -> Result<WorkloadManifest> {
    let Some(path) = path else {
        return Ok(seed_manifest());
    };
    let LoadedManifest { manifest, warnings } = load_manifest(path)?;
    for w in warnings {
        eprintln!("{}: {w}", path.display());
    }
    Ok(manifest)
}
