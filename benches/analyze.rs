//! `goodput analyze` on a 1,000,000-row requests.csv (about 48 MB): rows/s and peak memory,
//! against the reference Python analyzer of the methodology (about 10 s and 860 MB on a
//! 2-core machine; measured here too when `python3` is on the PATH).
//!
//!     cargo bench --bench analyze                 # 1,000,000 rows, 5 runs
//!     cargo bench --bench analyze -- --rows 200000 --runs 3 --no-python
//!
//! The input is generated deterministically (seed 1) into the target directory.

#[path = "../tests/support/synth.rs"]
mod synth;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Reference figures of the Python analyzer on a 1M-row file, from the issue that set the bar.
const PYTHON_REFERENCE_S: f64 = 10.0;
const PYTHON_REFERENCE_MB: f64 = 860.0;

struct Run {
    wall: Duration,
    peak_rss_mb: f64,
}

/// Runs a command to completion and reports its wall time and peak resident memory.
// The child is reaped by `wait4` (which also gives its peak memory), not `Child::wait`.
#[allow(clippy::zombie_processes)]
fn measure(cmd: &mut Command) -> Run {
    let start = Instant::now();
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("benchmark command starts");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our own un-waited child; status and usage are valid pointers.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    assert_eq!(rc, pid, "wait4 failed");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "benchmark command failed: {cmd:?}"
    );
    // Linux reports ru_maxrss in KiB.
    Run {
        wall,
        peak_rss_mb: usage.ru_maxrss as f64 / 1024.0,
    }
}

fn arg_value(args: &[String], name: &str) -> Option<u64> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).and_then(|v| v.parse().ok())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows = arg_value(&args, "--rows").unwrap_or(1_000_000);
    let runs = arg_value(&args, "--runs").unwrap_or(5).max(1);
    let python = !args.iter().any(|a| a == "--no-python");

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir: PathBuf = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("bench-data");
    std::fs::create_dir_all(&dir).expect("bench data directory");
    let csv = dir.join(format!("requests-{rows}.csv"));
    let spec = synth::large_point(rows);
    let mut file = std::fs::File::create(&csv).expect("bench CSV can be created");
    synth::write_point_csv(&mut file, &spec, 1).expect("bench CSV can be written");
    let bytes = std::fs::metadata(&csv).map(|m| m.len()).unwrap_or(0);
    let duration = spec.duration_s.to_string();
    println!(
        "input: {} ({rows} rows, {:.1} MB)",
        csv.display(),
        bytes as f64 / 1e6
    );

    let bin = env!("CARGO_BIN_EXE_goodput");
    let mut results: Vec<Run> = (0..runs)
        .map(|_| {
            measure(Command::new(bin).args([
                "analyze",
                csv.to_str().expect("UTF-8 path"),
                "--duration-s",
                &duration,
                "--queue-trend",
                "flat",
                "--quiet",
            ]))
        })
        .collect();
    results.sort_by_key(|r| r.wall);
    let median = &results[results.len() / 2];
    let best = &results[0];
    let peak = results.iter().map(|r| r.peak_rss_mb).fold(0.0, f64::max);
    let secs = median.wall.as_secs_f64();
    println!(
        "goodput analyze: median {:.3} s (best {:.3} s) over {runs} runs, {:.2} M rows/s, \
         {:.0} MB/s, peak RSS {peak:.1} MB",
        secs,
        best.wall.as_secs_f64(),
        rows as f64 / secs / 1e6,
        bytes as f64 / secs / 1e6,
    );
    let scale = rows as f64 / 1e6;
    println!(
        "vs the reference figures ({PYTHON_REFERENCE_S} s, {PYTHON_REFERENCE_MB} MB per 1M rows): \
         {:.1}x faster (bar 20x), {:.1}x less memory (bar 10x)",
        PYTHON_REFERENCE_S * scale / secs,
        PYTHON_REFERENCE_MB / peak,
    );

    if python && Command::new("python3").arg("--version").output().is_ok() {
        let script = root.join("benches/reference/analyze_slo.py");
        let py = measure(
            Command::new("python3")
                .arg(&script)
                .arg(&csv)
                .arg(&duration)
                .arg("flat"),
        );
        println!(
            "python3 reference analyzer (measured): {:.2} s, peak RSS {:.1} MB -> goodput is \
             {:.1}x faster, uses {:.1}x less memory",
            py.wall.as_secs_f64(),
            py.peak_rss_mb,
            py.wall.as_secs_f64() / secs,
            py.peak_rss_mb / peak
        );
    }
}
