use super::offline::*;
use super::*;

fn seed_workload(requests: usize) -> WorkloadSpec {
    WorkloadSpec::single_shape(1024, 256, 1000.0, 40.0, requests)
}

/// The seed's table: rate, TTFT p50 ms, TPOT p50 ms, SLO met.
const REFERENCE: [(f64, f64, f64, f64); 8] = [
    (1.0, 34.0, 5.2, 1.00),
    (5.0, 35.0, 6.0, 1.00),
    (10.0, 37.0, 7.5, 1.00),
    (15.0, 39.0, 10.0, 1.00),
    (20.0, 65.0, 15.5, 1.00),
    (25.0, 756.0, 40.1, 0.34),
    (30.0, 7342.0, 40.3, 0.08),
    (40.0, 14677.0, 40.3, 0.01),
];

/// The reference is one draw of the seed's own RNG; at the knee (25 req/s) single runs
/// spread from 15% to 75% SLO met, so the comparison is against the mean of 8 seeds.
#[test]
fn reproduces_the_seed_table() {
    let setup = preset("qwen2.5-7b-h100").unwrap();
    const SEEDS: u64 = 8;
    for (rate, ttft, tpot, met) in REFERENCE {
        let (mut ttft_sum, mut tpot_sum, mut met_sum) = (0.0, 0.0, 0.0);
        for seed in 0..SEEDS {
            let mut spec = seed_workload(2000);
            spec.seed = seed;
            let row = simulate_rate(&setup, &spec, rate, None).unwrap();
            ttft_sum += row.ttft_p50_ms;
            tpot_sum += row.tpot_p50_ms;
            met_sum += row.slo_met;
        }
        let n = SEEDS as f64;
        let (ttft_mean, tpot_mean, met_mean) = (ttft_sum / n, tpot_sum / n, met_sum / n);
        if rate <= 20.0 {
            assert!(
                (ttft_mean - ttft).abs() <= 0.10 * ttft,
                "rate {rate}: mean TTFT p50 {ttft_mean} vs {ttft}"
            );
            assert!(
                (tpot_mean - tpot).abs() <= 0.05 * tpot,
                "rate {rate}: mean TPOT p50 {tpot_mean} vs {tpot}"
            );
            assert!(met_mean > 0.99, "rate {rate}: SLO met {met_mean}");
        } else {
            assert!(
                (met_mean - met).abs() <= 0.1,
                "rate {rate}: mean SLO met {met_mean} vs {met}"
            );
        }
    }
}

#[test]
fn bisection_lands_near_22_6() {
    let setup = preset("qwen2.5-7b-h100").unwrap();
    let spec = seed_workload(2000);
    let max = find_max_rate(1.0, 40.0, 12, |r| {
        simulate_rate(&setup, &spec, r, None).unwrap().slo_met >= 0.99
    });
    assert!((max - 22.6).abs() <= 0.8, "max rate {max}");
}

#[test]
fn low_load_latency_is_prefill_then_weight_reads() {
    // One request alone: TTFT is one prefill step, TPOT one decode step.
    let setup = preset("qwen2.5-7b-h100").unwrap();
    let mut engine = Engine::new(setup.clone());
    let id = engine.submit(NewRequest {
        input_len: 1024,
        output_len: 4,
        block_hashes: vec![],
    });
    let step = engine.step().unwrap();
    assert_eq!(step.tokens, 1024);
    assert!((step.end - setup.step_time(1024, 0)).abs() < 1e-12);
    assert_eq!(engine.events()[0].generated, 1);
    let t1 = engine.now();
    engine.step().unwrap();
    // Context is the prompt plus the first token.
    assert!((engine.now() - t1 - setup.step_time(1, 1025)).abs() < 1e-12);
    engine.step();
    engine.step();
    assert!(engine.events()[0].finished);
    assert_eq!(engine.generated(id), None);
    assert!(engine.is_idle());
    assert_eq!(engine.stats().request_success_total, 1);
}

#[test]
fn reserve_policy_admits_only_what_fits() {
    let mut setup = preset("qwen2.5-7b-h100").unwrap();
    setup.kv_capacity_tokens = 3000;
    setup.max_model_len = 3000;
    let mut engine = Engine::new(setup);
    for _ in 0..3 {
        engine.submit(NewRequest {
            input_len: 1000,
            output_len: 200,
            block_hashes: vec![],
        });
    }
    engine.step();
    let s = engine.stats();
    // Two reservations of 1,200 fit in 3,000; the third waits.
    assert_eq!((s.running, s.waiting), (2, 1));
    assert!((s.kv_usage - 2400.0 / 3000.0).abs() < 1e-12);
}

#[test]
fn recompute_policy_preempts_the_newest_and_still_finishes_everything() {
    let mut setup = preset("qwen2.5-7b-h100").unwrap();
    setup.kv_policy = KvPolicy::Recompute;
    setup.kv_capacity_tokens = 4096;
    setup.max_model_len = 4096;
    let mut engine = Engine::new(setup);
    for _ in 0..4 {
        engine.submit(NewRequest {
            input_len: 800,
            output_len: 400,
            block_hashes: vec![],
        });
    }
    let mut finished = 0;
    let mut steps = 0;
    while engine.step().is_some() {
        finished += engine.events().iter().filter(|e| e.finished).count();
        steps += 1;
        assert!(engine.stats().kv_usage <= 1.0 + 1e-12);
        assert!(steps < 100_000, "no progress");
    }
    assert_eq!(finished, 4);
    // 4 × 1,200 tokens cannot be held in 4,096 at once.
    assert!(engine.stats().preemptions_total > 0);
}

#[test]
fn prefix_cache_hits_skip_prefill() {
    let mut setup = preset("qwen2.5-7b-h100").unwrap();
    setup.prefix_caching = true;
    let hashes = engine::synthetic_block_hashes(7, 1024, 1, 1040, setup.block_size);
    let mut engine = Engine::new(setup.clone());
    engine.submit(NewRequest {
        input_len: 1040,
        output_len: 2,
        block_hashes: hashes.clone(),
    });
    let cold = engine.step().unwrap();
    assert_eq!(cold.tokens, 1040);
    engine.step();
    let other = engine::synthetic_block_hashes(7, 1024, 2, 1040, setup.block_size);
    assert_eq!(other[..64], hashes[..64]);
    engine.submit(NewRequest {
        input_len: 1040,
        output_len: 2,
        block_hashes: other,
    });
    let warm = engine.step().unwrap();
    // 64 shared blocks of 16 tokens are cached: only the 16 unique tokens are computed.
    assert_eq!(warm.tokens, 16);
    let s = engine.stats();
    assert_eq!(s.prefix_cache_hits_total, 1024);
    assert_eq!(s.prefix_cache_queries_total, 2080);
}

#[test]
fn cancel_frees_kv() {
    let setup = preset("qwen2.5-7b-h100").unwrap();
    let mut engine = Engine::new(setup);
    let id = engine.submit(NewRequest {
        input_len: 100,
        output_len: 100,
        block_hashes: vec![],
    });
    engine.step();
    assert!(engine.stats().kv_usage > 0.0);
    assert!(engine.cancel(id));
    assert!(!engine.cancel(id));
    assert_eq!(engine.stats().kv_usage, 0.0);
    assert!(engine.is_idle());
}

#[test]
fn schedules_are_seeded_and_stratified() {
    let mut spec = seed_workload(1000);
    spec.classes.push(ClassShape {
        name: "long".into(),
        mix: 0.3,
        ..spec.classes[0].clone()
    });
    spec.classes[0].mix = 0.7;
    let a = build_arrivals(&spec, 10.0).unwrap();
    assert_eq!(a, build_arrivals(&spec, 10.0).unwrap());
    assert_eq!(a.iter().filter(|r| r.class == 1).count(), 300);
    let mean_gap = a.last().unwrap().at_s / 1000.0;
    assert!((mean_gap - 0.1).abs() < 0.01, "{mean_gap}");
    spec.seed = 1;
    assert_ne!(a, build_arrivals(&spec, 10.0).unwrap());
}

/// A workload of two classes whose prompts range from one token to several token budgets
/// (chunked prefill), at a rate that may be far past capacity.
fn mixed_workload(
    seed: u64,
    requests: usize,
    short: (u32, u32),
    long: (u32, u32),
    jitter: f64,
    prefix: Option<SharedPrefix>,
) -> WorkloadSpec {
    let class = |name: &str, mix: f64, (input_tokens, output_tokens): (u32, u32)| ClassShape {
        name: name.into(),
        mix,
        input_tokens,
        output_tokens,
        ttft_cutoff_ms: 500.0,
        tpot_cutoff_ms: 50.0,
    };
    WorkloadSpec {
        classes: vec![class("short", 0.7, short), class("long", 0.3, long)],
        requests,
        seed,
        arrival: Arrival::Poisson,
        output_jitter: jitter,
        shared_prefix: prefix,
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Bulk decoding is an implementation of the same model: on any workload the engine
    /// allows it for, every request's times, its largest gap and every counter are equal,
    /// to the bit, to stepping every token.
    #[test]
    fn decoding_in_bulk_changes_nothing(
        seed in 0u64..1_000,
        requests in 1usize..300,
        rate in 0.5f64..80.0,
        short_in in 1u32..600,
        short_out in 1u32..200,
        long_in in 1u32..5_000,
        long_out in 1u32..600,
        jitter in proptest::sample::select(vec![0.0, 0.5]),
        max_num_seqs in 1u32..64,
        budget_extra in 0u32..2_048,
        kv_capacity_tokens in 6_000u64..40_000,
        caching in proptest::bool::ANY,
    ) {
        let mut setup = preset("qwen2.5-7b-h100").unwrap();
        setup.max_num_seqs = max_num_seqs;
        setup.max_num_batched_tokens = max_num_seqs + budget_extra;
        setup.kv_capacity_tokens = kv_capacity_tokens;
        setup.max_model_len = 6_000;
        setup.prefix_caching = caching;
        let prefix = caching.then_some(SharedPrefix { pool: 3, tokens: 256, zipf: 1.0 });
        let spec = mixed_workload(
            seed,
            requests,
            (short_in, short_out),
            (long_in, long_out),
            jitter,
            prefix,
        );
        let arrivals = build_arrivals(&spec, rate).unwrap();
        let bulk_engine = Engine::bulk(setup.clone());
        proptest::prop_assert!(bulk_engine.decodes_in_bulk());
        let bulk = run_on(bulk_engine, &spec, &arrivals);
        let one_by_one = run_on(Engine::new(setup), &spec, &arrivals);
        proptest::prop_assert_eq!(bulk.outcomes, one_by_one.outcomes);
        proptest::prop_assert_eq!(bulk.stats, one_by_one.stats);
        proptest::prop_assert_eq!(bulk.queue_samples, one_by_one.queue_samples);
    }
}

#[test]
fn bulk_decoding_is_off_where_a_decode_may_wait() {
    let mut setup = preset("qwen2.5-7b-h100").unwrap();
    assert!(Engine::bulk(setup.clone()).decodes_in_bulk());
    setup.kv_policy = KvPolicy::Recompute;
    assert!(!Engine::bulk(setup.clone()).decodes_in_bulk());
    setup.kv_policy = KvPolicy::Reserve;
    setup.max_num_seqs = setup.max_num_batched_tokens + 1;
    assert!(!Engine::bulk(setup).decodes_in_bulk());
}

#[test]
fn a_cancelled_request_in_bulk_leaves_and_frees_its_kv() {
    let setup = preset("qwen2.5-7b-h100").unwrap();
    let mut engine = Engine::bulk(setup);
    let keep = engine.submit(NewRequest {
        input_len: 100,
        output_len: 50,
        block_hashes: vec![],
    });
    let gone = engine.submit(NewRequest {
        input_len: 100,
        output_len: 10,
        block_hashes: vec![],
    });
    engine.step();
    engine.step();
    assert_eq!(engine.generated(gone), Some(2));
    assert!(engine.cancel(gone));
    let mut finished = Vec::new();
    while engine.step().is_some() {
        finished.extend(engine.events().iter().filter(|e| e.finished).map(|e| e.id));
    }
    assert_eq!(finished, vec![keep]);
    let s = engine.stats();
    assert_eq!(s.kv_usage, 0.0);
    assert_eq!(s.request_success_total, 1);
    assert_eq!(s.generation_tokens_total, 52);
}
