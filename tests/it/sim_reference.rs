//! The engine model against the seed's simulator, draw for draw: with the seed's own random
//! numbers (Python's Mersenne Twister, `random.seed(0)`, `expovariate`), the 2,000-request
//! Qwen2.5-7B/H100 runs reproduce the published table at its printed precision.

use goodput::sim::offline::{SimArrival, WorkloadSpec, run, summarize};
use goodput::sim::preset;
use rand_mt::Mt;

/// Python's `random.Random(seed)` for a small non-negative integer seed.
struct PythonRandom(Mt);

impl PythonRandom {
    fn new(seed: u32) -> Self {
        // CPython seeds with init_by_array over the 32-bit words of |seed| ([0] for 0).
        PythonRandom(Mt::new_with_key([seed]))
    }

    /// `random.random()`: 53 random bits from two 32-bit draws.
    fn random(&mut self) -> f64 {
        let a = f64::from(self.0.next_u32() >> 5);
        let b = f64::from(self.0.next_u32() >> 6);
        (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0
    }

    /// `random.expovariate(rate)`.
    fn expovariate(&mut self, rate: f64) -> f64 {
        -(1.0 - self.random()).ln() / rate
    }
}

fn seed_arrivals(rate: f64) -> Vec<SimArrival> {
    let mut rng = PythonRandom::new(0);
    let mut t = 0.0;
    (0..2000u64)
        .map(|index| {
            t += rng.expovariate(rate);
            SimArrival {
                index,
                at_s: t,
                class: 0,
                input_tokens: 1024,
                output_tokens: 256,
                prefix: None,
            }
        })
        .collect()
}

/// The seed's workload: 1,024 tokens in, 256 out, SLO 1 s / 40 ms.
fn seed_spec() -> WorkloadSpec {
    WorkloadSpec::single_shape(1024, 256, 1000.0, 40.0, 2000)
}

#[test]
fn the_seed_table_exactly_with_the_seeds_random_numbers() {
    // rate, TTFT p50/p99 ms, TPOT p50/p99 ms, output tok/s, goodput req/s, SLO met %.
    let table: [(f64, [f64; 4], f64, f64, f64); 8] = [
        (1.0, [34.0, 60.0, 5.2, 5.6], 252.0, 1.0, 100.0),
        (5.0, [35.0, 90.0, 6.0, 6.9], 1256.0, 4.9, 100.0),
        (10.0, [37.0, 121.0, 7.5, 8.9], 2504.0, 9.8, 100.0),
        (15.0, [39.0, 166.0, 10.0, 12.8], 3742.0, 14.6, 100.0),
        (20.0, [65.0, 242.0, 15.5, 22.9], 4966.0, 19.4, 100.0),
        (25.0, [756.0, 2012.0, 40.1, 40.7], 6122.0, 8.2, 34.0),
        (30.0, [7342.0, 13321.0, 40.3, 40.9], 6178.0, 1.8, 8.0),
        (40.0, [14677.0, 29698.0, 40.3, 41.2], 6187.0, 0.4, 1.0),
    ];
    let setup = preset("qwen2.5-7b-h100").unwrap();
    let spec = seed_spec();
    for (rate, [t50, t99, p50, p99], tps, goodput, met) in table {
        let arrivals = seed_arrivals(rate);
        let result = run(&setup, &spec, &arrivals);
        let row = summarize(rate, &spec, &arrivals, &result, None);
        let got = (
            row.ttft_p50_ms.round(),
            row.ttft_p99_ms.round(),
            (row.tpot_p50_ms * 10.0).round() / 10.0,
            (row.tpot_p99_ms * 10.0).round() / 10.0,
            row.output_tps.round(),
            (row.goodput_rps * 10.0).round() / 10.0,
            (row.slo_met * 100.0).round(),
        );
        assert_eq!(got, (t50, t99, p50, p99, tps, goodput, met), "rate {rate}");
    }
}

#[test]
fn the_seed_bisection_gives_22_6_with_the_seeds_random_numbers() {
    let setup = preset("qwen2.5-7b-h100").unwrap();
    let spec = seed_spec();
    let max = goodput::sim::offline::find_max_rate(1.0, 40.0, 12, |rate| {
        let arrivals = seed_arrivals(rate);
        let result = run(&setup, &spec, &arrivals);
        summarize(rate, &spec, &arrivals, &result, None).slo_met >= 0.99
    });
    assert_eq!(format!("{max:.1}"), "22.6");
}
