//! Offline simulation speed: the seed's 8-rate table (Qwen2.5-7B on one H100, 2,000
//! requests of 1,024/256 per rate) and a single run at rate 20, against the reference
//! Python simulator (`benches/reference/sim.py`, run when `python3` is on the PATH).
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
         faster (bar 100x, i.e. table under 40 ms)",
        500.0 / ms(single),
        3900.0 / ms(table)
    );

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/reference/sim.py");
    match Command::new("python3").arg(script).output() {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let secs = text
                .lines()
                .find_map(|l| l.strip_prefix("table_seconds "))
                .and_then(|s| s.trim().parse::<f64>().ok());
            if let Some(secs) = secs {
                println!(
                    "python3 reference simulator (measured here): 8-rate table {:.3} s -> goodput \
                     is {:.0}x faster",
                    secs,
                    secs * 1e3 / ms(table)
                );
            }
        }
        _ => println!("python3 not available: reference simulator not measured"),
    }
}
