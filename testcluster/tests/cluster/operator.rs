//! `goodput operator` as a user drives it, through the real `kubectl`: apply the CRD and
//! the cluster example, `wait --for=condition=Ready`, `get cb` with its printer columns,
//! `describe` with the conditions, points and Events.

use std::process::{Command, Stdio};

use testcluster::cluster::ClusterConfig;

use crate::support::{Kubectl, goodput_bin, start_with};

const CRD_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../crds/capacitybenchmark.yaml"
);
const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/simulated-engine.yaml"
);

/// Kills the operator process when the test ends, passed or not.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_waits_for_gets_and_describes_a_benchmark() {
    let bin = goodput_bin();
    let cluster = start_with(ClusterConfig::default().image("goodput", &bin)).await;
    let Some(k) = Kubectl::new(&cluster) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    cluster
        .write_kubeconfig(&kubeconfig)
        .expect("kubeconfig written");
    let _operator = Killed(
        Command::new(&bin)
            .args([
                "operator",
                "--image",
                "goodput",
                "--admin-addr",
                "127.0.0.1:0",
                // Pods start in milliseconds here: sharded points need little lead.
                "--shard-start-lead-s",
                "5",
            ])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the operator starts"),
    );
    k.ok(&["apply", "-f", CRD_FILE]).await;
    let out = k.ok(&["apply", "-f", EXAMPLE]).await;
    assert!(out.contains("created"), "{out}");
    let out = k
        .ok(&[
            "wait",
            "cb/qwen2-5-7b-simulated",
            "--for=condition=Ready",
            "--timeout=300s",
        ])
        .await;
    assert!(out.contains("condition met"), "{out}");

    let table = k.ok(&["get", "cb"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "TARGET",
            "PHASE",
            "POINT",
            "CAPACITY",
            "PER-REPLICA",
            "REPLICAS",
            "AGE"
        ],
        "{table}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..3],
        ["qwen2-5-7b-simulated", "simulated", "Succeeded"],
        "{table}"
    );

    let describe = k.ok(&["describe", "cb", "qwen2-5-7b-simulated"]).await;
    let field = |name: &str, value: &str| {
        describe.lines().any(|l| {
            let l = l.trim();
            l.starts_with(name) && l.ends_with(value)
        })
    };
    assert!(field("Type:", "Ready"), "no Ready condition:\n{describe}");
    assert!(
        field("Type:", "SpecValid"),
        "no SpecValid condition:\n{describe}"
    );
    assert!(field("Verdict:", "pass"), "no passing point:\n{describe}");
    for event in ["PointStarted", "PointFinished", "Finished: "] {
        assert!(describe.contains(event), "{event} missing:\n{describe}");
    }
}
