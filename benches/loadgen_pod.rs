//! What running a point in a cluster costs: the same rate point run by `goodput loadgen`
//! standalone and as the operator's Job pod, and what the operator spends on it.
//!
//! The issue's bar: in a pod, the load generator's memory and CPU stay those of its own
//! bench (the standalone process), and the controller adds no per-request work: what it
//! spends on a point does not grow with the point's requests, but for reading each record
//! once when it collects the point (what that costs is measured; the bars below say how
//! all of it is held).
//!
//! Everything runs on this machine, on loopback: the fixed-latency streaming server of the
//! loadgen bench (`support/fixed_latency_server.rs`; TTFT 20 ms, ITL 5 ms, in a child
//! process), the in-repo test cluster (in this process; its pods are local processes of the
//! release-built `goodput`) and `goodput operator` (release build, its own process).
//!
//! Two point sizes, N requests at R req/s and 4N at 4R: the same length, so what the
//! operator does per unit of time (renewing its Lease) is the same in both and only the
//! requests differ. The manifest has one class (128 tokens in, 32 out), a 1 s warmup, a
//! 1 s minimum window and a schedule of exactly N requests. For each size:
//!
//! 1. **Pod.** A CapacityBenchmark of one rate R (cold cache, `maxBlocks: 1`, one shard,
//!    target `url:` the server) is created. The operator runs the point as a one-pod Job
//!    (`goodput loadgen --point-file ... --shard 0/1 --result-config-map ...`), collects
//!    the pod's result ConfigMap, merges and gates it and records the point in status. The
//!    pod's process (a child of this process: the cluster's kubelet spawns it) is found by
//!    its command line and sampled every 20 ms (`VmHWM` from `/proc/PID/status`, CPU ticks
//!    from `/proc/PID/stat`) until it is gone; the last `VmHWM` is its peak RSS. Its CPU
//!    time is exact: this process's `RUSAGE_CHILDREN` across the pod's life (nothing else
//!    of ours exits meanwhile), the last sample beside it. A passing rate makes the sweep
//!    look for a failing one above it, so the operator starts a second point in the same
//!    status write that records the first; once the first pod is up the cluster is told
//!    it cannot pull the image, so that pod never starts, and the benchmark is deleted
//!    before the standalone run.
//! 2. **Standalone.** The very point file the operator wrote (read back from the point's
//!    ConfigMap) is run by `goodput loadgen --point-file FILE --out DIR --quiet` as a
//!    child process with a pod's environment, as the loadgen bench runs it: the same
//!    schedule, prompts and plan against the same server. Peak RSS from the same 20 ms
//!    sampling, CPU from `wait4`. What the pod adds is only the cluster's part: the API
//!    client it builds before any load, the gzip of its records and the write of its
//!    result ConfigMap.
//! 3. **Operator.** The operator process's CPU from creating the benchmark to seeing the
//!    point recorded, plus 1 s: the sum of its threads' run time from
//!    `/proc/PID/task/*/schedstat` (nanoseconds; the 10 ms ticks of `/proc/PID/stat` if a
//!    thread came or went), and its reconciles. The window holds what every point of a
//!    sweep costs the operator: its start (point ConfigMap, result ConfigMap, RBAC, Job),
//!    the watch events and reconciles while it runs, the collection (read, gunzip, merge
//!    and gate the records) and the status write, plus the next point's start.
//!
//! Every size runs in rounds (default 2): pod then standalone, then standalone (from the
//! previous point file) then pod, so a drift in the rest of the machine's load falls on
//! both alike; the bars take the least figure of the rounds, as interference only ever
//! adds CPU time. Bars, held loosely enough for a shared two-core machine:
//! - every run sends its N requests, the server sees N, every measured request succeeds
//!   and both runs measure the same requests;
//! - pod CPU per request / standalone CPU per request <= 1.25, at both sizes;
//! - pod peak RSS - standalone peak RSS <= 8 MiB at both sizes (the API client and the
//!   hand-off: about 4 MiB whatever the size), and pod / standalone <= 1.25 at 4N (at N
//!   that fixed share is close to a quarter of a small process);
//! - operator CPU per point, 4N / N, < 2.5: a per-point cost, not a per-request one (it
//!   would near 4 if work per request dominated; under 2.5 while the per-request part of
//!   a point of N stays below the per-point part);
//! - the operator's CPU per request beyond the smaller point's, (4N - N) / 3N, under 1% of
//!   the load generator's CPU per request: the collection reads each record once (the
//!   result ConfigMap, gunzip, CSV, merge), a few microseconds against the load
//!   generator's several hundred.
//!
//! Knobs (environment): `LOADGEN_POD_BENCH_REQUESTS` (N, default 2,000),
//! `LOADGEN_POD_BENCH_RATE` (R, default 100 req/s), `LOADGEN_POD_BENCH_ROUNDS` (default 2),
//! `LOADGEN_POD_BENCH_KEEP` (keep the temporary directories: the standalone runs' outputs
//! and point files, the operator's log).
//!
//! Run: `cargo bench --bench loadgen_pod` (about 3 minutes). Linux only (reads `/proc`,
//! uses `wait4`).

#[path = "../tests/support/operator.rs"]
mod harness;
#[path = "support/process.rs"]
mod process;
#[path = "support/fixed_latency_server.rs"]
mod server;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use goodput::api::{CapacityBenchmark, Phase};
use goodput::controller::build;
use goodput::loadgen::handoff::ShardResult;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};

use harness::Operator;
use process::{env_or, proc_cpu_s, proc_rss, raise_nofile};
use server::{ROLE_ENV, ServerProc, run_server};
use testcluster::kubelet::Kubelet;

/// The image the operator hands its Jobs: the test cluster maps it to the release binary.
const IMAGE: &str = "goodput";
/// How often a measured process's `/proc` files are read.
const SAMPLE: Duration = Duration::from_millis(20);
/// Bar on pod / standalone: CPU per request at both sizes, peak RSS at the larger one.
const POD_BAR: f64 = 1.25;
/// Bar on what a pod adds to the standalone peak RSS at either size (MiB): its API client
/// and the hand-off of its result, the same at any size.
const POD_EXTRA_MIB: f64 = 8.0;
/// Bar on the operator's CPU per point, 4N over N: under 2.5 holds while what it spends
/// per request on a point of N stays below what it spends per point.
const OPERATOR_BAR: f64 = 2.5;
/// Bar on the operator's CPU per request beyond the smaller point's, as a share of the load
/// generator's CPU per request (percent).
const OPERATOR_SHARE_PCT: f64 = 1.0;
/// Requests per point grow by this much from the small point to the large one.
const SCALE: u64 = 4;
const MIB: f64 = 1024.0 * 1024.0;

/// The benchmark of one rate point: `requests` requests at `rate` req/s against `url`, one
/// class, one cache mode, one schedule block, one shard.
fn benchmark_yaml(name: &str, url: &str, requests: u64, rate: f64) -> String {
    let manifest: String = server::manifest(32, requests)
        .lines()
        .map(|line| format!("      {line}\n"))
        .collect();
    format!(
        r#"apiVersion: goodput.dev/v1alpha1
kind: CapacityBenchmark
metadata: {{name: {name}}}
spec:
  target: {{url: "{url}", model: bench-model, replicas: 1}}
  workload:
    manifest:
{manifest}  experiments:
    cacheModes: [cold]
    rateSweep: {{rates: [{rate}]}}
    maxBlocks: 1
  loadgen: {{shards: 1}}
"#
    )
}

/// What one load generator process did and cost.
#[derive(Clone, Copy, Default)]
struct Cost {
    /// Requests sent (the summary's count, warmup included).
    sent: u64,
    /// Requests the server saw meanwhile.
    server_saw: u64,
    /// Rows of `requests.csv` (the measured requests: the warmup's are left out), and
    /// those that succeeded.
    rows: u64,
    ok: u64,
    /// From the first `/proc` sample (pod) or the spawn (standalone) to the exit.
    wall_s: f64,
    /// utime + stime, exact (rusage).
    cpu_s: f64,
    /// utime + stime at the last `/proc` sample.
    sampled_cpu_s: f64,
    /// `VmHWM` at the last `/proc` sample (bytes).
    peak_rss: f64,
}

impl Cost {
    fn cpu_us_per_request(&self) -> f64 {
        self.cpu_s * 1e6 / self.sent.max(1) as f64
    }

    fn json(&self) -> Value {
        json!({
            "sent": self.sent, "server_saw": self.server_saw, "rows": self.rows, "ok": self.ok, "wall_s": self.wall_s, "cpu_s": self.cpu_s,
            "sampled_cpu_s": self.sampled_cpu_s, "cpu_us_per_request": self.cpu_us_per_request(),
            "peak_rss_bytes": self.peak_rss,
        })
    }
}

/// What the operator spent on one point.
#[derive(Clone, Copy, Default)]
struct OperatorCost {
    cpu_s: f64,
    reconciles: u64,
    /// From creating the benchmark to seeing its point recorded.
    wall_s: f64,
    /// Bytes of the shard's result ConfigMap (`binaryData`, decoded).
    result_bytes: usize,
}

/// One round of one point size: the point as a pod, and standalone.
struct Round {
    pod: Cost,
    standalone: Cost,
    operator: OperatorCost,
    /// The point's verdict in the benchmark's status.
    verdict: String,
}

/// One point size, its rounds.
struct Size {
    requests: u64,
    rate: f64,
    rounds: Vec<Round>,
}

impl Size {
    /// The least of `f` over the rounds: interference from the rest of the machine only
    /// ever adds CPU time.
    fn least(&self, f: impl Fn(&Round) -> f64) -> f64 {
        self.rounds.iter().map(f).fold(f64::INFINITY, f64::min)
    }
}

fn tv(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// CPU seconds of this process's reaped children so far.
fn children_cpu_s() -> f64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage with a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A process's CPU time: every thread's time on a CPU from `/proc/PID/task/*/schedstat`
/// (nanoseconds), and the total from `/proc/PID/stat` (10 ms ticks) beside it.
struct ThreadsCpu {
    ticks_s: f64,
    threads: BTreeMap<u32, u64>,
}

impl ThreadsCpu {
    fn read(pid: u32) -> ThreadsCpu {
        let mut threads = BTreeMap::new();
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.flatten() {
                let Some(tid) = task.file_name().to_str().and_then(|s| s.parse().ok()) else {
                    continue;
                };
                let text = std::fs::read_to_string(task.path().join("schedstat"));
                if let Some(ns) = text
                    .ok()
                    .and_then(|t| t.split_whitespace().next().and_then(|v| v.parse().ok()))
                {
                    threads.insert(tid, ns);
                }
            }
        }
        ThreadsCpu {
            ticks_s: proc_cpu_s(pid),
            threads,
        }
    }

    /// CPU seconds since `before`: the threads' time when every thread alive then still is
    /// and the ticks agree (a thread that came and went in between shows only in the
    /// ticks), else the ticks.
    fn since(&self, before: &ThreadsCpu) -> f64 {
        let ticks = self.ticks_s - before.ticks_s;
        let kept = before.threads.keys().all(|t| self.threads.contains_key(t));
        let ns: u64 = self
            .threads
            .iter()
            .map(|(t, ns)| ns.saturating_sub(before.threads.get(t).copied().unwrap_or(0)))
            .sum();
        let exact = ns as f64 / 1e9;
        if kept && (ticks - exact).abs() <= 0.025 {
            exact
        } else {
            eprintln!(
                "loadgen_pod bench: operator threads' CPU {exact:.4} s against {ticks:.2} s in \
                 ticks: the ticks count"
            );
            ticks
        }
    }
}

/// A child of this process running `goodput loadgen ... --result-config-map ...`: the
/// point's pod, as the test cluster's kubelet spawned it.
fn find_pod_process() -> Option<u32> {
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|x| x.1.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u32>().ok());
        if ppid != Some(me) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.contains(&&b"loadgen"[..]) && args.contains(&&b"--result-config-map"[..]) {
            return Some(pid);
        }
    }
    None
}

/// What the pod's process looked like from outside.
#[derive(Clone, Copy)]
struct Followed {
    /// Seconds from `t0` to its first sighting and to its being gone (reaped).
    seen_s: f64,
    gone_s: f64,
    /// CPU s and `VmHWM` at the last sample.
    cpu_s: f64,
    hwm: f64,
}

/// Finds the pod's process (within `limit`) and samples it until it is gone (reaped).
/// Once it is found, the cluster is told it cannot pull the image, so no later pod starts.
fn follow_pod(t0: Instant, limit: Duration, kubelet: &Kubelet) -> Option<Followed> {
    let pid = loop {
        if let Some(pid) = find_pod_process() {
            kubelet.set_image_pullable(IMAGE, false);
            break pid;
        }
        if t0.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let seen_s = t0.elapsed().as_secs_f64();
    let (mut cpu_s, mut hwm) = (0.0, 0.0);
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    while proc_dir.exists() && t0.elapsed() < limit {
        // A zombie has no memory left to report (VmHWM is gone) but keeps its CPU times.
        let (_, h) = proc_rss(pid);
        let c = proc_cpu_s(pid);
        if h > 0.0 {
            hwm = h;
        }
        if c > 0.0 {
            cpu_s = c;
        }
        std::thread::sleep(SAMPLE);
    }
    Some(Followed {
        seen_s,
        gone_s: t0.elapsed().as_secs_f64(),
        cpu_s,
        hwm,
    })
}

/// Requests in a `requests.csv`, and those with status `ok`.
fn count_rows(csv_bytes: &[u8]) -> (u64, u64) {
    let mut r = csv::Reader::from_reader(csv_bytes);
    let status = r
        .headers()
        .ok()
        .and_then(|h| h.iter().position(|c| c == "status"));
    let (mut all, mut ok) = (0, 0);
    for rec in r.records().flatten() {
        all += 1;
        if status.and_then(|i| rec.get(i)) == Some("ok") {
            ok += 1;
        }
    }
    (all, ok)
}

/// `goodput loadgen --point-file` as a child process of this one, measured as the loadgen
/// bench measures it; killed after `limit`.
fn run_standalone(point_file: &Path, out: &Path, limit: Duration) -> Cost {
    std::fs::create_dir_all(out).expect("the standalone output directory is created");
    let log = std::fs::File::create(out.with_extension("log")).expect("the log file opens");
    let t0 = Instant::now();
    // The environment a pod gets from the test cluster's kubelet, less its kubeconfig.
    let keep: Vec<(String, String)> = ["PATH", "HOME", "LANG"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    // Reaped by the wait4 loop below (for its rusage), not by `Child::wait`.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new(harness::GOODPUT)
        .arg("loadgen")
        .arg("--point-file")
        .arg(point_file)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .env_clear()
        .envs(keep)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("goodput loadgen starts");
    let pid = child.id();
    let (mut sampled_cpu, mut hwm, mut killed) = (0.0, 0.0f64, false);
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 on our own child with valid out-pointers; after it reaps the
        // child, `child` is never waited on or signalled again.
        let r = unsafe { libc::wait4(pid as i32, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid as i32 {
            break (status, usage);
        }
        assert!(r == 0, "wait4 failed: {}", std::io::Error::last_os_error());
        if !killed && t0.elapsed() > limit {
            eprintln!(
                "loadgen_pod bench: standalone loadgen still running after {limit:?}; killing it"
            );
            let _ = child.kill();
            killed = true;
        }
        let (_, h) = proc_rss(pid);
        let c = proc_cpu_s(pid);
        if h > 0.0 {
            hwm = hwm.max(h);
        }
        if c > 0.0 {
            sampled_cpu = c;
        }
        std::thread::sleep(SAMPLE);
    };
    let wall_s = t0.elapsed().as_secs_f64();
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        let text = std::fs::read_to_string(out.with_extension("log")).unwrap_or_default();
        eprintln!("loadgen_pod bench: standalone loadgen failed (wait status {status}):\n{text}");
    }
    let (rows, ok) = count_rows(&std::fs::read(out.join("requests.csv")).unwrap_or_default());
    let sent = std::fs::read_to_string(out.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["client"]["sent"].as_u64())
        .unwrap_or(0);
    Cost {
        sent,
        server_saw: 0,
        rows,
        ok,
        wall_s,
        cpu_s: tv(usage.ru_utime) + tv(usage.ru_stime),
        sampled_cpu_s: sampled_cpu,
        peak_rss: hwm,
    }
}

/// What a point run as the operator's pod cost, and the point file it ran.
struct PodRun {
    cost: Cost,
    operator: OperatorCost,
    verdict: String,
    point_json: String,
}

/// How long a point of `requests` at `rate` may take, pod start and collection included.
fn limit(requests: u64, rate: f64) -> Duration {
    Duration::from_secs_f64(requests as f64 / rate * 3.0 + 120.0)
}

/// Runs the point as the operator's pod (benchmark `name`), then deletes the benchmark.
async fn run_pod(
    s: &harness::Setup,
    operator: &Operator,
    server: &ServerProc,
    name: &str,
    requests: u64,
    rate: f64,
) -> PodRun {
    let limit = limit(requests, rate);
    let yaml = benchmark_yaml(name, &format!("http://{}", server.addr), requests, rate);
    let op_pid = operator.pid();
    let reconciles0 = operator.reconciles().await.unwrap_or(0);
    let server0 = server_requests(server);
    let op_cpu0 = ThreadsCpu::read(op_pid);
    let children0 = children_cpu_s();
    let t0 = Instant::now();
    let kubelet = s.cluster.kubelet().clone();
    let follower = std::thread::spawn(move || follow_pod(t0, limit, &kubelet));
    harness::create(&s.client, &yaml).await;
    // The point is recorded in the same status write that starts the next one (the sweep
    // looks for a failing rate above a passing one); that one's pod never starts.
    let cb = harness::wait_for(
        &s.client,
        name,
        limit,
        "the benchmark's first point",
        |cb| !harness::points(cb).is_empty() || harness::phase(cb) == Some(Phase::Failed),
    )
    .await;
    let recorded_s = t0.elapsed().as_secs_f64();
    // Whatever the operator does right after that write counts too.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let op_cpu = ThreadsCpu::read(op_pid).since(&op_cpu0);
    let reconciles = operator.reconciles().await.unwrap_or(0) - reconciles0;
    let followed = tokio::task::spawn_blocking(move || follower.join())
        .await
        .expect("the pod follower's task joins")
        .expect("the pod follower does not panic");
    let children = children_cpu_s() - children0;
    let pod_server_requests = server_requests(server) - server0;
    let Some(followed) = followed else {
        panic!(
            "no loadgen pod process appeared within {limit:?}; status: {:#?}",
            cb.status
        );
    };
    let point = harness::points(&cb)
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("the benchmark failed: {:#?}", cb.status));
    // The verdict, and the first reason for it (a lagging client makes a point invalid:
    // what it cost is measured all the same).
    let verdict = match point.reasons.first() {
        Some(why) => format!("{}: {why}", point.verdict),
        None => point.verdict.clone(),
    };

    // The pod's result and the point file, from their ConfigMaps.
    let maps: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let point_map = point
        .result_config_map
        .clone()
        .expect("a finished point names its point ConfigMap");
    let job = point_map
        .strip_suffix("-point")
        .expect("the point ConfigMap is named <job>-point")
        .to_owned();
    let point_json = maps
        .get(&point_map)
        .await
        .expect("the point ConfigMap reads")
        .data
        .and_then(|mut d| d.remove(build::POINT_KEY))
        .expect("the point ConfigMap holds the point file");
    let result_map = maps
        .get(&build::result_config_map_name(&job, 0))
        .await
        .expect("the result ConfigMap reads");
    let result_bytes = result_map
        .binary_data
        .as_ref()
        .map_or(0, |b| b.values().map(|v| v.0.len()).sum());
    let shard = ShardResult::from_config_map(&result_map).expect("the shard's result parses");
    let (rows, ok) = count_rows(&shard.requests_csv);
    let pod = Cost {
        sent: shard.summary.client.sent,
        server_saw: pod_server_requests,
        rows,
        ok,
        wall_s: followed.gone_s - followed.seen_s,
        // The exact figure, unless something else of ours exited meanwhile (then the
        // children's total would be far above the last sample).
        cpu_s: if children >= followed.cpu_s && children < followed.cpu_s + 0.5 {
            children
        } else {
            eprintln!(
                "loadgen_pod bench: {name}: children's CPU {children:.3} s against the pod's \
                 last sample {:.3} s: the sample counts",
                followed.cpu_s
            );
            followed.cpu_s
        },
        sampled_cpu_s: followed.cpu_s,
        peak_rss: followed.hwm,
    };

    // The benchmark goes (and its next point's Job with it) before the standalone run.
    let api: Api<CapacityBenchmark> = Api::namespaced(s.client.clone(), "default");
    api.delete(name, &DeleteParams::background())
        .await
        .expect("the benchmark deletes");
    let owned = ListParams::default().labels(&format!("{}={name}", build::BENCHMARK_LABEL));
    let jobs: Api<Job> = Api::namespaced(s.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let gone_by = Instant::now() + Duration::from_secs(60);
    loop {
        let left = jobs.list(&owned).await.map_or(1, |l| l.items.len())
            + pods
                .list(&ListParams::default().labels(&format!("job-name={job}")))
                .await
                .map_or(1, |l| l.items.len());
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < gone_by,
            "the benchmark's Jobs and pods are still there 60 s after it was deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.cluster.kubelet().set_image_pullable(IMAGE, true);
    PodRun {
        cost: pod,
        operator: OperatorCost {
            cpu_s: op_cpu,
            reconciles,
            wall_s: recorded_s,
            result_bytes,
        },
        verdict,
        point_json,
    }
}

/// Runs `point_file` standalone (output under `dir`, named after `name`), counting the
/// requests the server sees meanwhile.
async fn standalone(
    server: &ServerProc,
    dir: &Path,
    name: &str,
    point_file: &Path,
    limit: Duration,
) -> Cost {
    let out = dir.join(format!("{name}-standalone"));
    let file = point_file.to_owned();
    let before = server_requests(server);
    let mut cost = tokio::task::spawn_blocking(move || run_standalone(&file, &out, limit))
        .await
        .expect("the standalone run's task joins");
    cost.server_saw = server_requests(server) - before;
    cost
}

/// Runs one point size `rounds` times, the pod and the standalone run in turn (pod first
/// in odd rounds, standalone first in even ones, from the previous round's point file), so
/// that a drift in the machine's load falls on both alike.
async fn run_size(
    s: &harness::Setup,
    operator: &Operator,
    server: &ServerProc,
    dir: &Path,
    requests: u64,
    rate: f64,
    rounds: u32,
) -> Size {
    let mut done = Vec::new();
    let mut last_point: Option<PathBuf> = None;
    for round in 1..=rounds {
        let name = format!("podcost-{requests}-r{round}");
        let mut alone = None;
        if round % 2 == 0
            && let Some(file) = &last_point
        {
            alone = Some(standalone(server, dir, &name, file, limit(requests, rate)).await);
        }
        let pod = run_pod(s, operator, server, &name, requests, rate).await;
        let file = dir.join(format!("{name}.point.json"));
        std::fs::write(&file, &pod.point_json).expect("the point file is written");
        let alone = match alone {
            Some(c) => c,
            None => standalone(server, dir, &name, &file, limit(requests, rate)).await,
        };
        last_point = Some(file);
        done.push(Round {
            pod: pod.cost,
            standalone: alone,
            operator: pod.operator,
            verdict: pod.verdict,
        });
    }
    Size {
        requests,
        rate,
        rounds: done,
    }
}

/// Requests the server has seen so far.
fn server_requests(server: &ServerProc) -> u64 {
    server.stats()["requests"].as_u64().unwrap_or(0)
}

/// One bar: its figure, the bar, and whether it is met.
struct Bar {
    name: String,
    value: String,
    bar: String,
    met: bool,
}

async fn run_parent() {
    let requests: u64 = env_or("LOADGEN_POD_BENCH_REQUESTS", 2000);
    let rate: f64 = env_or("LOADGEN_POD_BENCH_RATE", 100.0);
    let rounds: u32 = env_or("LOADGEN_POD_BENCH_ROUNDS", 2).max(1);
    let t0 = Instant::now();
    let server = ServerProc::spawn(20.0, 5.0);
    let s = harness::setup().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let log = s.dir.path().join("operator.log");
    let operator = Operator::start(&s.kubeconfig, IMAGE, &log);
    let op_pid = operator.pid();
    // Leading, and through its start-up: then its CPU at rest over 5 s.
    let deadline = Instant::now() + Duration::from_secs(60);
    while operator.leader().await != Some(1) {
        assert!(
            Instant::now() < deadline,
            "the operator did not lead within 60 s; its log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle0 = ThreadsCpu::read(op_pid);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_cpu_per_s = ThreadsCpu::read(op_pid).since(&idle0) / 5.0;

    let mut sizes = Vec::new();
    for (n, r) in [(requests, rate), (requests * SCALE, rate * SCALE as f64)] {
        eprintln!(
            "loadgen_pod bench: {n} requests at {r} req/s, {rounds} round(s) as a pod and \
             standalone ({:.0} s so far)",
            t0.elapsed().as_secs_f64()
        );
        sizes.push(run_size(&s, &operator, &server, dir.path(), n, r, rounds).await);
    }
    let server_stats = server.stats();
    server.stop();

    println!(
        "loadgen_pod bench: one rate point, `goodput loadgen` standalone vs as the operator's \
         Job pod, against a fixed-latency server (TTFT 20 ms, ITL 5 ms, 128 in / 32 out) on \
         127.0.0.1, {rounds} round(s) ({:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    println!(
        "  {:<20}  {:<12}  {:>10}  {:>6}  {:>15}  {:>10}  {:>12}",
        "point", "run", "sent; ok", "wall s", "CPU s (sampled)", "CPU us/req", "peak RSS MiB"
    );
    for z in &sizes {
        for (i, round) in z.rounds.iter().enumerate() {
            for (label, c) in [("standalone", &round.standalone), ("pod", &round.pod)] {
                println!(
                    "  {:<20}  {:<12}  {:>10}  {:>6.1}  {:>15}  {:>10.1}  {:>12.1}",
                    format!("{} req @ {} req/s", z.requests, z.rate),
                    format!("{label} {}", i + 1),
                    format!("{}; {}", c.sent, c.ok),
                    c.wall_s,
                    format!("{:.3} ({:.2})", c.cpu_s, c.sampled_cpu_s),
                    c.cpu_us_per_request(),
                    c.peak_rss / MIB
                );
            }
        }
    }
    println!(
        "  {:<20}  {:<5}  {:>6}  {:>10}  {:>10}  {:>13}  point verdict",
        "operator, per point", "round", "CPU ms", "reconciles", "recorded s", "result CM KiB"
    );
    for z in &sizes {
        for (i, round) in z.rounds.iter().enumerate() {
            println!(
                "  {:<20}  {:<5}  {:>6.1}  {:>10}  {:>10.1}  {:>13.1}  {}",
                format!("{} req @ {} req/s", z.requests, z.rate),
                i + 1,
                round.operator.cpu_s * 1e3,
                round.operator.reconciles,
                round.operator.wall_s,
                round.operator.result_bytes as f64 / 1024.0,
                round.verdict
            );
        }
    }
    println!(
        "  operator at rest: {:.2} ms CPU per s (Lease renewals, watches)",
        idle_cpu_per_s * 1e3
    );
    println!("  bars, on the least figure of the rounds:");

    let mut bars = Vec::new();
    for z in &sizes {
        let n = z.requests;
        let all_sent = z.rounds.iter().all(|r| {
            let (pod, alone) = (&r.pod, &r.standalone);
            [pod.sent, pod.server_saw, alone.sent, alone.server_saw] == [n; 4]
                && pod.ok == pod.rows
                && alone.ok == alone.rows
                && pod.rows == alone.rows
                && pod.rows > 0
        });
        let counts: Vec<String> = z
            .rounds
            .iter()
            .map(|r| {
                format!(
                    "{}/{}/{}/{} of {}",
                    r.pod.server_saw,
                    r.pod.ok,
                    r.standalone.server_saw,
                    r.standalone.ok,
                    r.pod.rows
                )
            })
            .collect();
        bars.push(Bar {
            name: format!("{n} req: server saw / ok, pod / standalone"),
            value: counts.join(", "),
            bar: format!("{n} / all measured"),
            met: all_sent,
        });
        let (pod_rss, alone_rss) = (
            z.least(|r| r.pod.peak_rss),
            z.least(|r| r.standalone.peak_rss),
        );
        let extra = (pod_rss - alone_rss) / MIB;
        bars.push(Bar {
            name: format!("{n} req: pod - standalone peak RSS"),
            value: format!(
                "{extra:+.1} MiB ({:.1} / {:.1} MiB, x{:.3})",
                pod_rss / MIB,
                alone_rss / MIB,
                pod_rss / alone_rss
            ),
            bar: format!("<= {POD_EXTRA_MIB} MiB"),
            met: extra <= POD_EXTRA_MIB,
        });
        if n != requests {
            bars.push(Bar {
                name: format!("{n} req: pod / standalone peak RSS"),
                value: format!("{:.3}", pod_rss / alone_rss),
                bar: format!("<= {POD_BAR}"),
                met: pod_rss / alone_rss <= POD_BAR,
            });
        }
        let (pod_us, alone_us) = (
            z.least(|r| r.pod.cpu_us_per_request()),
            z.least(|r| r.standalone.cpu_us_per_request()),
        );
        bars.push(Bar {
            name: format!("{n} req: pod / standalone CPU per request"),
            value: format!("{:.3} ({pod_us:.1} / {alone_us:.1} us)", pod_us / alone_us),
            bar: format!("<= {POD_BAR}"),
            met: pod_us / alone_us <= POD_BAR,
        });
    }
    let (small, large) = (&sizes[0], &sizes[1]);
    let (op_small, op_large) = (
        small.least(|r| r.operator.cpu_s),
        large.least(|r| r.operator.cpu_s),
    );
    let op_ratio = op_large / op_small;
    let extra = (large.requests - small.requests) as f64;
    let op_marginal_us = (op_large - op_small) * 1e6 / extra;
    let loadgen_us = large.least(|r| r.standalone.cpu_us_per_request());
    bars.push(Bar {
        name: format!(
            "operator CPU per point, {} / {} req",
            large.requests, small.requests
        ),
        value: format!(
            "{op_ratio:.3} ({:.1} / {:.1} ms)",
            op_large * 1e3,
            op_small * 1e3
        ),
        bar: format!("< {OPERATOR_BAR} (requests x{SCALE})"),
        met: op_ratio < OPERATOR_BAR,
    });
    bars.push(Bar {
        name: "operator CPU per extra request".into(),
        value: format!(
            "{op_marginal_us:.2} us ({:.2}% of the load generator's {loadgen_us:.0} us)",
            op_marginal_us / loadgen_us * 100.0
        ),
        bar: format!("< {OPERATOR_SHARE_PCT}%"),
        met: op_marginal_us < loadgen_us * OPERATOR_SHARE_PCT / 100.0,
    });
    let w1 = bars.iter().map(|b| b.name.len()).max().unwrap_or(0);
    let w2 = bars.iter().map(|b| b.value.len()).max().unwrap_or(0);
    let w3 = bars.iter().map(|b| b.bar.len()).max().unwrap_or(0);
    for b in &bars {
        println!(
            "  {:w1$}  {:w2$}  {:w3$}  {}",
            b.name,
            b.value,
            b.bar,
            if b.met { "met" } else { "NOT met" }
        );
    }
    let all_met = bars.iter().all(|b| b.met);
    println!("  all bars: {}", if all_met { "met" } else { "NOT met" });
    let sizes_json: Vec<Value> = sizes
        .iter()
        .map(|z| {
            let rounds: Vec<Value> = z
                .rounds
                .iter()
                .map(|r| {
                    json!({
                        "pod": r.pod.json(), "standalone": r.standalone.json(),
                        "operator": {
                            "cpu_s": r.operator.cpu_s, "reconciles": r.operator.reconciles,
                            "recorded_s": r.operator.wall_s,
                            "result_config_map_bytes": r.operator.result_bytes,
                        },
                        "verdict": r.verdict,
                    })
                })
                .collect();
            json!({"requests": z.requests, "rate": z.rate, "rounds": rounds})
        })
        .collect();
    let bars_json: Vec<Value> = bars
        .iter()
        .map(|b| json!({"figure": b.name, "value": b.value, "bar": b.bar, "met": b.met}))
        .collect();
    println!(
        "{}",
        json!({
            "sizes": sizes_json, "operator_idle_cpu_s_per_s": idle_cpu_per_s,
            "operator_cpu_ratio": op_ratio, "operator_marginal_us_per_request": op_marginal_us,
            "server_first_token_late_us": server_stats["first_token_late_us"],
            "bars": bars_json, "all_bars_met": all_met,
        })
    );
    if std::env::var_os("LOADGEN_POD_BENCH_KEEP").is_some() {
        eprintln!(
            "loadgen_pod bench: files kept in {} and {}",
            dir.keep().display(),
            s.dir.keep().display()
        );
    }
    drop(operator);
    drop(s.cluster);
    if !all_met {
        std::process::exit(1);
    }
}

fn main() {
    if std::env::var(ROLE_ENV).as_deref() == Ok("server") {
        run_server();
        return;
    }
    raise_nofile();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the bench's runtime starts")
        .block_on(run_parent());
}
