//! llama.cpp's server (`llama-server`, built from the `llama-cpp-python` sdist) on the same
//! tiny model: a second engine with its own page (`llamacpp:*`, no request counter or
//! histograms), its own vocabulary listing and its own connection habits.

use crate::engine_fixture;
use crate::{loadgen, manifest_file, read_summary};

/// A cold point of `goodput loadgen` with the vLLM example's classes: the vocabulary read
/// from `/v1/models` (`meta.n_vocab`), no request failed, the point valid, llama.cpp's
/// profile detected, and its prompt tokens (computed plus reused from a slot) and predicted
/// tokens equal to what the client sent and received; a warm point then reuses prompt
/// tokens from the slots' caches. (Each of llama.cpp's slots keeps only the prompt it last
/// served, so the warm point reuses less than the workload implies, and says so.)
#[test]
fn a_llama_cpp_point_is_counted_alike_by_the_client_and_the_engine() {
    let _machine = crate::machine();
    let Some(engine) = engine_fixture::llama_cpp("a_llama_cpp_point_is_counted_alike") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = manifest_file(dir.path());
    let mut hit_rates = Vec::new();
    for (cache, extra) in [
        ("cold", &[][..]),
        (
            "warm",
            &["--prefix-pool", "4", "--prefix-tokens", "256"][..],
        ),
    ] {
        let out = dir.path().join(cache);
        let mut args = vec!["--cache", cache, "--requests", "100", "--max-blocks", "1"];
        args.extend_from_slice(extra);
        loadgen(&engine, &manifest, 2.0, &out, &args);
        let s = read_summary(&out);
        let v = s.vocabulary.as_ref().expect("the vocabulary was read");
        assert_eq!(v.size, Some(8192), "{v:?}");
        assert!(v.source.contains("n_vocab"), "{v:?}");
        assert_eq!(s.report.failed, 0, "{cache}: {:?}", s.client.errors);
        assert!(s.validity.valid, "{cache}: {:?}", s.validity.reasons);
        let t = s.engine_truth.as_ref().expect("truth checks");
        eprintln!("{cache}: {t:?}");
        let prompt = t.prompt_tokens.as_ref().expect("prompt tokens counted");
        assert_eq!(prompt.client_source, "token ids sent");
        assert!(prompt.counted.equal(), "{cache}: {prompt:?}");
        assert!(t.output_tokens.expect("output tokens").equal());
        if cache == "cold" {
            assert!(t.flags.is_empty(), "{:?}", t.flags);
        }
        hit_rates.push(
            t.prefix_cache
                .expect("prompt tokens reused")
                .engine_hit_rate,
        );
    }
    assert!(hit_rates[1] > hit_rates[0] + 0.2, "{hit_rates:?}");
}
