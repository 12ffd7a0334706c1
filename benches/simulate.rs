//! Offline simulation speed: the seed's 8-rate table (Qwen2.5-7B on one H100, 2,000
//! requests of 1,024/256 per rate) and a single run at rate 20 in process, then the table
//! and the seed's 12-step bisection as a user runs them (two `goodput simulate`
//! processes) against the reference Python simulator doing the same
//! (`benches/reference/sim.py`, run when `python3` is on the PATH). Bar: 100x; the bench
//! exits 1 below it.
//!
//!     cargo bench --bench simulate

use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

use goodput::sim::offline::{WorkloadSpec, simulate_rate, simulate_rates};
use goodput::sim::preset;

const RATES: [f64; 8] = [1.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0];

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let setup = preset("qwen2.5-7b-h100").expect("the seed preset exists");
    let spec = WorkloadSpec::single_shape(1024, 256, 1000.0, 40.0, 2000);
    // Warm up caches and the allocator.
    for &r in &RATES {
        black_box(simulate_rate(&setup, &spec, r, None).expect("a valid workload"));
    }
    let runs = 30;
    let single = median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                black_box(simulate_rate(&setup, &spec, 20.0, None).expect("a valid workload"));
                t.elapsed()
            })
            .collect(),
    );
    let sequential = median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                for &r in &RATES {
                    black_box(simulate_rate(&setup, &spec, r, None).expect("a valid workload"));
                }
                t.elapsed()
            })
            .collect(),
    );
    let parallel = median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                black_box(simulate_rates(&setup, &spec, &RATES, None).expect("a valid workload"));
                t.elapsed()
            })
            .collect(),
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "goodput simulate (median of {runs}): rate 20 run {:.2} ms, 8-rate table {:.2} ms on one \
         core, {:.2} ms on all {} cores (what `goodput simulate --rates` does)",
        ms(single),
        ms(sequential),
        ms(parallel),
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    let table = parallel;
    println!(
        "vs the issue's reference figures (0.5 s per run, 3.9 s per table): {:.0}x and {:.0}x \
         faster",
        500.0 / ms(single),
        3900.0 / ms(table)
    );

    // As a user runs it: two processes, the seed's table and its 12-step bisection.
    let seed = [
        "simulate",
        "--input-tokens=1024",
        "--output-tokens=256",
        "--ttft-slo-ms=1000",
        "--tpot-slo-ms=40",
    ];
    let table_args = [&seed[..], &["--rates=1,5,10,15,20,25,30,40"]].concat();
    let bisect_args = [&seed[..], &["--find-max-rate"]].concat();
    let cli = |args: &[&str]| {
        let t = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_goodput"))
            .args(args)
            .output()
            .expect("goodput runs");
        assert!(out.status.success(), "goodput {args:?} failed");
        (
            t.elapsed(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (_, bisection_text) = cli(&bisect_args);
    let cli_table = median((0..10).map(|_| cli(&table_args).0).collect());
    let cli_bisection = median((0..10).map(|_| cli(&bisect_args).0).collect());
    let ours = ms(cli_table) + ms(cli_bisection);
    println!(
        "goodput simulate as two processes (median of 10): table {:.1} ms + bisection {:.1} ms \
         = {ours:.1} ms; the bisection says: {}",
        ms(cli_table),
        ms(cli_bisection),
        bisection_text.lines().last().unwrap_or("").trim()
    );

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/reference/sim.py");
    match Command::new("python3").arg(script).output() {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let seconds = |key: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|s| s.trim().parse::<f64>().ok())
            };
            if let (Some(table_s), Some(bisection_s)) =
                (seconds("table_seconds "), seconds("bisection_seconds "))
            {
                let reference = (table_s + bisection_s) * 1e3;
                let ratio = reference / ours;
                println!(
                    "python3 reference simulator (measured here): table {table_s:.3} s + \
                     bisection {bisection_s:.3} s -> goodput is {ratio:.0}x faster (bar 100x)"
                );
                if ratio < 100.0 {
                    println!("BAR MISSED: table plus bisection under 100x the reference");
                    std::process::exit(1);
                }
            }
        }
        _ => println!("python3 not available: reference simulator not measured"),
    }
}
