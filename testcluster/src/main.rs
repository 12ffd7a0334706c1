//! `testcluster`: serves a test cluster in the foreground until SIGINT or SIGTERM, and
//! writes its admin kubeconfig once it is ready.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;
use testcluster::cluster::{Cluster, ClusterConfig};

/// A Kubernetes test cluster on loopback: an API-server double, pods as local processes,
/// Services as loopback proxies.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Write the admin kubeconfig here once the cluster serves.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Map an image (tag and digest ignored) to the executable its containers run:
    /// NAME=EXECUTABLE. Repeatable.
    #[arg(long = "image", value_name = "NAME=EXECUTABLE")]
    images: Vec<String>,
    /// Port of the API server on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Keep pod volumes and logs here (default: a temporary folder removed at exit).
    #[arg(long)]
    workdir: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut config = ClusterConfig {
        port: args.port,
        workdir: args.workdir,
        ..ClusterConfig::default()
    };
    for spec in &args.images {
        let Some((name, exe)) = spec.split_once('=') else {
            bail!("--image {spec}: expected NAME=EXECUTABLE");
        };
        let exe = std::fs::canonicalize(exe)
            .with_context(|| format!("--image {spec}: {exe} not found"))?;
        config = config.image(name, exe);
    }
    let cluster = Cluster::start(config).await?;
    cluster
        .write_kubeconfig(&args.kubeconfig)
        .with_context(|| format!("writing {}", args.kubeconfig.display()))?;
    eprintln!(
        "testcluster: serving on {}; kubeconfig at {}",
        cluster.url(),
        args.kubeconfig.display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    cluster.shutdown();
    Ok(())
}
