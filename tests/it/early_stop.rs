//! Early stopping judged against the engine model: a point the gate passes over every
//! request is never stopped, and one far above capacity stops well before its end. It
//! replays the model's requests through the same stopper the load generator runs.

use goodput::analysis::{EarlyStopper, tpot_ms};
use goodput::api::parse_benchmark;
use goodput::loadgen::run::open_loop_window_s;
use goodput::sim::offline::{SimArrival, SimOutcome, WorkloadSpec, build_arrivals, run, summarize};
use goodput::sim::preset;

/// Early stopping replayed on the model's requests, in the order they complete: across
/// seeds and rates around the example's capacity, it never stops a point the gate passes
/// (over every request), and it stops the points far above capacity well before their end.
#[test]
fn early_stopping_never_stops_a_point_the_gate_passes() {
    let loaded = parse_benchmark(
        include_str!("../../examples/capacity-benchmark.yaml"),
        std::path::Path::new("capacity-benchmark.yaml"),
    )
    .expect("the example parses");
    let gate = loaded.manifest.gate_config();
    let mut setup = preset("qwen2.5-7b-h100").unwrap();
    setup.prefix_caching = true;
    let base = WorkloadSpec::for_manifest(&loaded.manifest).expect("generated arrivals");
    let (mut passed, mut far, mut stopped_far, mut settled_far) = (0, 0, 0, 0.0);
    for seed in 0..3 {
        for i in 0..=20 {
            let rate = 6.0 + 0.25 * f64::from(i);
            let spec = WorkloadSpec {
                seed,
                ..base.clone()
            };
            let arrivals = build_arrivals(&spec, rate).unwrap();
            let result = run(&setup, &spec, &arrivals);
            let row = summarize(rate, &spec, &arrivals, &result, Some(&gate));
            let pass = row.report.expect("a gated report").capacity_gate_pass;

            let mut scheduled = vec![0u64; gate.classes.len()];
            for a in &arrivals {
                scheduled[a.class] += 1;
            }
            let first = arrivals.first().map_or(0.0, |a| a.at_s);
            let last = arrivals.last().map_or(0.0, |a| a.at_s);
            let mut stopper = EarlyStopper::new(
                gate.clone(),
                scheduled,
                first,
                open_loop_window_s(rate, first, last),
                last,
            );
            let mut order: Vec<usize> = (0..arrivals.len()).collect();
            order.sort_by(|&a, &b| {
                result.outcomes[a]
                    .finish
                    .total_cmp(&result.outcomes[b].finish)
            });
            let in_flight = in_flight_series(&arrivals, &result.outcomes);
            let mut stop = None;
            for (n, &r) in order.iter().enumerate() {
                let o = &result.outcomes[r];
                let ttft = (o.first_token - o.arrival) * 1e3;
                let tpot = tpot_ms(ttft, (o.finish - o.arrival) * 1e3, u64::from(o.output_len))
                    .unwrap_or(0.0);
                stopper.observe(arrivals[r].class, Some((ttft, tpot)));
                if (n + 1) % 25 == 0
                    && let Some(s) = stopper.check(o.finish, &in_flight)
                {
                    stop = Some(s);
                    break;
                }
            }
            if pass {
                passed += 1;
                assert!(
                    stop.is_none(),
                    "seed {seed}, {rate} RPS passes but was stopped: {stop:?}"
                );
            }
            if rate >= 9.5 {
                far += 1;
                if let Some(s) = stop {
                    stopped_far += 1;
                    settled_far += s.settled as f64 / s.scheduled as f64;
                }
            }
        }
    }
    assert!(
        passed >= 15,
        "{passed} passing points: the range misses the capacity"
    );
    assert!(
        stopped_far * 10 >= far * 9,
        "{stopped_far} of {far} far points stopped"
    );
    let mean_settled = settled_far / f64::from(stopped_far.max(1));
    assert!(
        mean_settled < 0.6,
        "far points stopped after {mean_settled:.2} of their requests"
    );
}

/// Requests in flight (arrived, not finished) every 0.1 s of the run.
fn in_flight_series(arrivals: &[SimArrival], outcomes: &[SimOutcome]) -> Vec<(f64, f64)> {
    let mut events: Vec<(f64, f64)> = arrivals
        .iter()
        .zip(outcomes)
        .flat_map(|(a, o)| [(a.at_s, 1.0), (o.finish, -1.0)])
        .collect();
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let end = events.last().map_or(0.0, |e| e.0);
    let (mut out, mut level, mut next) = (Vec::new(), 0.0, 0);
    let mut t = 0.0;
    while t <= end {
        while next < events.len() && events[next].0 <= t {
            level += events[next].1;
            next += 1;
        }
        out.push((t, level));
        t += 0.1;
    }
    out
}
