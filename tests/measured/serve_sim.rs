//! The live simulated engine over loopback HTTP: wire format, errors, metrics, fidelity to
//! the offline model, overload behaviour, disconnects, kill/restore and injected faults.
//!
//! Every test starts its own replica on a port-0 listener on 127.0.0.1, is bounded by a
//! timeout, and holds a global lock so the timing-sensitive ones do not share the CPU.

use crate::live;
use live::{bounded, client, config, predict, qwen, start};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use goodput::sim::live::{
    CutMode, FaultConfig, MetricsFlavor, ReplicaConfig, ReplicaServer, StreamCut,
};
use serde_json::{Value, json};

/// One SSE event: when its bytes arrived and its `data:` payload.
#[derive(Debug, Clone)]
struct Frame {
    at: Instant,
    data: String,
}

/// Reads a whole SSE body; the frames, and the error that ended it early, if any.
async fn read_sse(mut resp: reqwest::Response) -> (Vec<Frame>, Option<reqwest::Error>) {
    let mut buf: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let at = Instant::now();
                buf.extend_from_slice(&chunk);
                while let Some(pos) = buf.windows(2).position(|w| w == b"\n\n") {
                    let event: Vec<u8> = buf.drain(..pos + 2).collect();
                    let text = String::from_utf8(event[..pos].to_vec()).expect("UTF-8 event");
                    let data = text
                        .strip_prefix("data: ")
                        .expect("a data: line")
                        .to_string();
                    out.push(Frame { at, data });
                }
            }
            Ok(None) => {
                assert!(
                    buf.is_empty(),
                    "trailing bytes after the last event: {buf:?}"
                );
                return (out, None);
            }
            Err(e) => return (out, Some(e)),
        }
    }
}

fn json_of(f: &Frame) -> Value {
    serde_json::from_str(&f.data).unwrap_or_else(|e| panic!("frame is not JSON ({e}): {}", f.data))
}

/// Frames with a non-empty `choices` array (token frames).
fn token_frames(frames: &[Frame]) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| f.data != "[DONE]")
        .map(json_of)
        .filter(|v| v["choices"].as_array().is_some_and(|c| !c.is_empty()))
        .collect()
}

fn words(s: &str) -> usize {
    s.split_whitespace().count()
}

async fn post(
    c: &reqwest::Client,
    server: &ReplicaServer,
    path: &str,
    body: Value,
) -> reqwest::Response {
    c.post(format!("{}{path}", server.url()))
        .json(&body)
        .send()
        .await
        .expect("request sent")
}

async fn metrics_text(c: &reqwest::Client, url: &str) -> String {
    let r = c
        .get(format!("{url}/metrics"))
        .send()
        .await
        .expect("scrape");
    assert_eq!(r.status(), 200);
    r.text().await.expect("metrics body")
}

/// The value of the first sample of `name` whose label set contains `labels`.
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn token_prompt(n: u32, salt: u32) -> Vec<u32> {
    (0..n).map(|i| 1000 + (i * 7 + salt) % 50_000).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_completion_with_token_ids_and_usage() {
    bounded(20, async {
        let server = start(config(20.0)).await;
        let c = client();
        let resp = post(
            &c,
            &server,
            "/v1/completions",
            json!({
                "model": qwen().model, "prompt": token_prompt(100, 0), "max_tokens": 12,
                "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true},
            }),
        )
        .await;
        assert_eq!(resp.status(), 200);
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream"),
            "{:?}",
            resp.headers()
        );
        let (frames, err) = read_sse(resp).await;
        assert!(err.is_none(), "{err:?}");
        assert_eq!(frames.last().unwrap().data, "[DONE]");
        let tokens = token_frames(&frames);
        assert_eq!(tokens.len(), 12, "one frame per token: {frames:?}");
        for (i, v) in tokens.iter().enumerate() {
            assert_eq!(v["object"], "text_completion");
            assert_eq!(v["model"], qwen().model);
            let text = v["choices"][0]["text"].as_str().unwrap();
            assert_eq!(words(text), 1, "frame {i}: {text:?}");
            let fr = &v["choices"][0]["finish_reason"];
            if i == 11 {
                assert_eq!(fr, "length");
            } else {
                assert!(fr.is_null(), "frame {i}: {v}");
            }
        }
        // The usage chunk comes after the last token and right before [DONE].
        let usage = json_of(&frames[frames.len() - 2]);
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(
            usage["usage"],
            json!({"prompt_tokens": 100, "completion_tokens": 12, "total_tokens": 112})
        );
        assert_eq!(frames.len(), 12 + 2);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_stream_sends_role_with_first_content() {
    bounded(20, async {
        let server = start(config(20.0)).await;
        let c = client();
        let resp = post(
            &c,
            &server,
            "/v1/chat/completions",
            json!({
                "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}],
                "max_completion_tokens": 6, "ignore_eos": true, "stream": true,
                "stream_options": {"continuous_usage_stats": true},
            }),
        )
        .await;
        assert_eq!(resp.status(), 200);
        let (frames, err) = read_sse(resp).await;
        assert!(err.is_none(), "{err:?}");
        assert_eq!(frames.last().unwrap().data, "[DONE]");
        let chunks: Vec<Value> = frames[..frames.len() - 1].iter().map(json_of).collect();
        assert_eq!(chunks.len(), 6, "no usage chunk unless include_usage: {frames:?}");
        let first = &chunks[0]["choices"][0]["delta"];
        assert_eq!(first["role"], "assistant");
        assert!(!first["content"].as_str().unwrap().is_empty(), "role rides with content: {first}");
        let prompt_tokens = chunks[0]["usage"]["prompt_tokens"].as_u64().unwrap();
        for (i, ch) in chunks.iter().enumerate() {
            assert_eq!(ch["object"], "chat.completion.chunk");
            let delta = &ch["choices"][0]["delta"];
            assert!(!delta["content"].as_str().unwrap().is_empty());
            if i > 0 {
                assert!(delta.get("role").is_none(), "role only on the first chunk: {ch}");
            }
            assert_eq!(ch["usage"]["completion_tokens"], i as u64 + 1);
            assert_eq!(ch["usage"]["prompt_tokens"], prompt_tokens);
            let fr = &ch["choices"][0]["finish_reason"];
            assert_eq!(fr.is_null(), i < 5, "finish_reason on the last token chunk only: {ch}");
        }
        let tok: Value = post(
            &c,
            &server,
            "/tokenize",
            json!({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]}),
        )
        .await
        .json()
        .await
        .unwrap();
        assert_eq!(tok["count"].as_u64(), Some(prompt_tokens));
        // "be" "brie" "f", "hell" "o" "ther" "e", 5 template tokens per message, 3 to
        // prompt the assistant.
        assert_eq!(prompt_tokens, 3 + 4 + 2 * 5 + 3);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_streaming_responses_carry_usage() {
    bounded(20, async {
        let server = start(config(20.0)).await;
        let c = client();
        let r = post(
            &c,
            &server,
            "/v1/completions",
            json!({"prompt": "the quick brown fox", "max_tokens": 9, "ignore_eos": true}),
        )
        .await;
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["object"], "text_completion");
        assert_eq!(words(v["choices"][0]["text"].as_str().unwrap()), 9);
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        // "the" "quic" "k" "brow" "n" "fox"
        assert_eq!(v["usage"], json!({"prompt_tokens": 6, "completion_tokens": 9, "total_tokens": 15}));

        let r = post(
            &c,
            &server,
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": 3, "ignore_eos": true}),
        )
        .await;
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["message"]["role"], "assistant");
        assert_eq!(words(v["choices"][0]["message"]["content"].as_str().unwrap()), 3);
        assert_eq!(v["usage"]["prompt_tokens"], 1 + 5 + 3);
        assert_eq!(v["usage"]["completion_tokens"], 3);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_interval_chunks_tokens_after_the_first() {
    bounded(20, async {
        let server = start(ReplicaConfig {
            stream_interval: 4,
            ..config(20.0)
        })
        .await;
        let c = client();
        let resp = post(
            &c,
            &server,
            "/v1/completions",
            json!({"prompt": token_prompt(64, 1), "max_tokens": 10, "ignore_eos": true, "stream": true}),
        )
        .await;
        let (frames, err) = read_sse(resp).await;
        assert!(err.is_none(), "{err:?}");
        let sizes: Vec<usize> = token_frames(&frames)
            .iter()
            .map(|v| words(v["choices"][0]["text"].as_str().unwrap()))
            .collect();
        assert_eq!(sizes, vec![1, 4, 4, 1]);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_lengths_are_deterministic_and_bounded() {
    bounded(30, async {
        let server = start(config(50.0)).await;
        let c = client();
        let mut lengths = Vec::new();
        for seed in 0..12 {
            let body =
                json!({"prompt": "count me", "max_tokens": 40, "min_tokens": 5, "seed": seed});
            let a: Value = post(&c, &server, "/v1/completions", body.clone())
                .await
                .json()
                .await
                .unwrap();
            let b: Value = post(&c, &server, "/v1/completions", body)
                .await
                .json()
                .await
                .unwrap();
            let n = a["usage"]["completion_tokens"].as_u64().unwrap();
            assert_eq!(
                n,
                b["usage"]["completion_tokens"].as_u64().unwrap(),
                "same seed, same length"
            );
            assert!((5..=40).contains(&n), "{n}");
            let fr = a["choices"][0]["finish_reason"].as_str().unwrap();
            assert_eq!(fr, if n == 40 { "length" } else { "stop" });
            lengths.push(n);
        }
        assert!(lengths.iter().any(|&n| n < 40), "{lengths:?}");
        lengths.dedup();
        assert!(lengths.len() > 3, "lengths vary with the seed: {lengths:?}");
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_health_and_tokenize() {
    bounded(20, async {
        let server = start(config(20.0)).await;
        let c = client();
        let url = server.url();
        let r = c.get(format!("{url}/health")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = c
            .get(format!("{url}/v1/models"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["data"][0]["id"], qwen().model);
        assert_eq!(v["data"][0]["max_model_len"], qwen().max_model_len);
        let v: Value = post(
            &c,
            &server,
            "/tokenize",
            json!({"prompt": "hello world again"}),
        )
        .await
        .json()
        .await
        .unwrap();
        // hell o worl d agai n
        assert_eq!(v["count"], 6);
        assert_eq!(v["tokens"].as_array().unwrap().len(), 6);
        assert_eq!(v["max_model_len"], qwen().max_model_len);
        let v: Value = post(&c, &server, "/tokenize", json!({"prompt": [5, 6, 7]}))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(v["tokens"], json!([5, 6, 7]));
        server.shutdown().await;
    })
    .await;
}

async fn expect_error(resp: reqwest::Response, status: u16) -> Value {
    assert_eq!(resp.status().as_u16(), status);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .contains("application/json")
    );
    let v: Value = resp.json().await.expect("JSON error body");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    assert_eq!(v["error"]["code"], status, "{v}");
    assert!(v["error"]["type"].is_string(), "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_get_openai_style_errors() {
    bounded(20, async {
        let server = start(ReplicaConfig {
            max_body_bytes: 1 << 20,
            ..config(20.0)
        })
        .await;
        let c = client();
        let url = server.url();
        let raw = |path: &str, body: &'static str| {
            c.post(format!("{url}{path}"))
                .header("content-type", "application/json")
                .body(body)
                .send()
        };
        let v = expect_error(raw("/v1/completions", "{\"prompt\": ").await.unwrap(), 400).await;
        assert_eq!(v["error"]["type"], "BadRequestError");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("JSON"),
            "{v}"
        );
        expect_error(raw("/v1/completions", "[1, 2]").await.unwrap(), 400).await;
        expect_error(raw("/v1/chat/completions", "{}").await.unwrap(), 400).await;
        let v = expect_error(
            raw("/v1/completions", "{\"max_tokens\": 3}").await.unwrap(),
            400,
        )
        .await;
        assert_eq!(v["error"]["param"], "prompt");
        let v = expect_error(
            post(
                &c,
                &server,
                "/v1/completions",
                json!({"prompt": "x", "n": 2}),
            )
            .await,
            400,
        )
        .await;
        assert_eq!(v["error"]["param"], "n");
        expect_error(
            post(
                &c,
                &server,
                "/v1/completions",
                json!({"prompt": "x", "max_tokens": 0}),
            )
            .await,
            400,
        )
        .await;
        expect_error(
            post(
                &c,
                &server,
                "/v1/completions",
                json!({"prompt": "x", "max_tokens": "many"}),
            )
            .await,
            400,
        )
        .await;
        expect_error(
            post(&c, &server, "/v1/completions", json!({"prompt": ""})).await,
            400,
        )
        .await;
        let v = expect_error(
            post(
                &c,
                &server,
                "/v1/completions",
                json!({"prompt": "x", "stream_options": {"include_usage": true}}),
            )
            .await,
            400,
        )
        .await;
        assert_eq!(v["error"]["param"], "stream_options");
        expect_error(
            post(&c, &server, "/v1/completions", json!({"prompt": [-1]})).await,
            400,
        )
        .await;
        expect_error(
            post(
                &c,
                &server,
                "/v1/completions",
                json!({"prompt": ["a", "b"]}),
            )
            .await,
            400,
        )
        .await;
        expect_error(
            post(
                &c,
                &server,
                "/v1/completions",
                json!({"prompt": "x", "min_tokens": 9, "max_tokens": 3}),
            )
            .await,
            400,
        )
        .await;
        // 32,000 prompt tokens + 1,000 > max_model_len 32,768.
        let long = token_prompt(32_000, 2);
        let v = expect_error(
            post(
                &c,
                &server,
                "/v1/completions",
                json!({"prompt": long, "max_tokens": 1000}),
            )
            .await,
            400,
        )
        .await;
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("maximum context length"),
            "{v}"
        );
        let v = expect_error(
            post(
                &c,
                &server,
                "/v1/completions",
                json!({"prompt": "x", "model": "gpt-9"}),
            )
            .await,
            404,
        )
        .await;
        assert_eq!(v["error"]["type"], "NotFoundError");
        // Over the body limit (1 MiB here).
        let big = "word ".repeat(300_000);
        expect_error(
            post(&c, &server, "/v1/completions", json!({"prompt": big})).await,
            413,
        )
        .await;
        expect_error(c.get(format!("{url}/nope")).send().await.unwrap(), 404).await;
        // Still serving after all that.
        let r = post(
            &c,
            &server,
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": 2}),
        )
        .await;
        assert_eq!(r.status(), 200);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_request_latency_matches_the_model() {
    bounded(30, async {
        let setup = qwen();
        let (input, output) = (1024u32, 32u32);
        let (ttft, tpot) = predict(&setup, input, output);
        assert!((ttft - 0.032).abs() < 0.001 && (tpot - 0.005).abs() < 0.0005, "{ttft} {tpot}");
        let server = start(config(1.0)).await;
        let c = client();
        // A text prompt of 1,024 one-piece words, serialized once: request handling stays
        // cheap even in a debug build, so the client sees the model's latency.
        let body = serde_json::to_vec(&json!({
            "prompt": "abcd ".repeat(input as usize), "max_tokens": output, "ignore_eos": true, "stream": true,
        }))
        .unwrap();
        let send = || {
            c.post(format!("{}/v1/completions", server.url()))
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
        };
        // Warm the connection pool.
        let (_, err) = read_sse(send().await.unwrap()).await;
        assert!(err.is_none());
        let mut ttfts = Vec::new();
        let mut tpots = Vec::new();
        for _ in 0..3 {
            let t0 = Instant::now();
            let resp = send().await.unwrap();
            let (frames, err) = read_sse(resp).await;
            assert!(err.is_none());
            let toks: Vec<&Frame> = frames
                .iter()
                .filter(|f| f.data.contains("\"text\""))
                .collect();
            assert_eq!(toks.len(), output as usize);
            let first = toks[0].at;
            let last = toks[toks.len() - 1].at;
            ttfts.push((first - t0).as_secs_f64());
            tpots.push((last - first).as_secs_f64() / f64::from(output - 1));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (m_ttft, m_tpot) = (median(&mut ttfts), median(&mut tpots));
        let tolerance = |predicted: f64| (0.002f64).max(0.05 * predicted);
        // An unoptimized build spends about 2 ms of CPU on the request path (client and
        // server JSON, hyper, tokenizing) before the engine sees the request; the bar
        // itself holds in an optimized build (`cargo test --release`). TPOT is measured
        // between frames, so request handling does not enter it.
        let slack = if cfg!(debug_assertions) { 0.003 } else { 0.0 };
        assert!(
            (m_ttft - ttft).abs() <= tolerance(ttft) + slack,
            "TTFT measured {m_ttft:.4}s vs model {ttft:.4}s ({ttfts:?})"
        );
        assert!(
            (m_tpot - tpot).abs() <= tolerance(tpot),
            "TPOT measured {m_tpot:.5}s vs model {tpot:.5}s ({tpots:?})"
        );
        // The server's own TTFT histogram agrees too.
        let text = metrics_text(&c, &server.url()).await;
        let sum = sample(&text, "vllm:time_to_first_token_seconds_sum", "").unwrap();
        let count = sample(&text, "vllm:time_to_first_token_seconds_count", "").unwrap();
        assert_eq!(count, 4.0);
        assert!((sum / count - ttft).abs() < 0.003, "server mean TTFT {}", sum / count);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_grows_the_queue_and_ttft() {
    bounded(60, async {
        // Capacity for 1,024-token prompts is ~31 req/s of model time; at time scale 10
        // that is ~310 req/s of wall time. Offer 1,000 req/s (3x) for 300 requests.
        let scale = 10.0;
        let server = start(config(scale)).await;
        let url = server.url();
        let c = client();
        let n = 300usize;
        let gap = Duration::from_micros(1000);
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The scraper has a thread and runtime of its own so the request tasks cannot
        // starve it.
        let scraper = {
            let (url, done) = (url.clone(), done.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                rt.block_on(async move {
                    let c = client();
                    let t0 = Instant::now();
                    let mut samples = Vec::new();
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        let text = metrics_text(&c, &url).await;
                        let w = sample(&text, "vllm:num_requests_waiting", "").unwrap();
                        samples.push((t0.elapsed().as_secs_f64(), w));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    samples
                })
            })
        };
        let start_at = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..n {
            let due = start_at + gap * i as u32;
            tokio::time::sleep_until(due.into()).await;
            let (c, url) = (c.clone(), url.clone());
            tasks.push(tokio::spawn(async move {
                let sent = Instant::now();
                let resp = c
                    .post(format!("{url}/v1/completions"))
                    .json(&json!({"prompt": token_prompt(1024, i as u32), "max_tokens": 8, "ignore_eos": true, "stream": true}))
                    .send()
                    .await
                    .expect("sent");
                let (frames, err) = read_sse(resp).await;
                assert!(err.is_none());
                assert_eq!(token_frames(&frames).len(), 8);
                (frames[0].at - sent).as_secs_f64()
            }));
        }
        let mut ttft = Vec::new();
        for t in tasks {
            ttft.push(t.await.expect("request task"));
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let samples = scraper.join().expect("scraper thread");
        // The queue starts empty, climbs through several scrapes to a peak of dozens of
        // requests while arrivals last, and drains after.
        let waiting: Vec<f64> = samples.iter().map(|s| s.1).collect();
        let peak_at = waiting
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
            .unwrap();
        let peak = waiting[peak_at];
        let climbing = waiting[..peak_at].iter().filter(|&&w| w > waiting[0] && w < peak).count();
        assert!(
            waiting[0] <= 10.0 && peak >= 50.0 && climbing >= 1,
            "waiting queue did not grow: {samples:?}"
        );
        assert!(waiting[waiting.len() - 1] < peak / 4.0, "the queue did not drain: {samples:?}");
        let head: f64 = ttft[..20].iter().sum::<f64>() / 20.0;
        let tail: f64 = ttft[n - 50..].iter().sum::<f64>() / 50.0;
        assert!(tail > 5.0 * head, "TTFT did not grow with the queue: first {head:.4}s, last {tail:.4}s");
        // Every request finished; the queue drained.
        let text = metrics_text(&c, &url).await;
        assert_eq!(sample(&text, "vllm:request_success_total", "finished_reason=\"length\""), Some(n as f64));
        assert_eq!(sample(&text, "vllm:num_requests_waiting", ""), Some(0.0));
        server.shutdown().await;
    })
    .await;
}

async fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cond()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_frees_kv() {
    bounded(20, async {
        let server = start(config(10.0)).await;
        let c = client();
        let resp = post(
            &c,
            &server,
            "/v1/completions",
            json!({"prompt": token_prompt(1024, 4), "max_tokens": 5000, "ignore_eos": true, "stream": true}),
        )
        .await;
        let mut resp = resp;
        let mut got = 0;
        while got < 5 {
            let chunk = resp.chunk().await.unwrap().expect("more frames");
            got += chunk.windows(2).filter(|w| *w == b"\n\n").count();
        }
        let stats = server.replica().stats().unwrap();
        assert_eq!(stats.running, 1);
        assert!(stats.kv_usage > 0.0);
        drop(resp);
        let replica = server.replica().clone();
        let freed = wait_until(Duration::from_secs(3), || {
            replica.stats().is_some_and(|s| s.kv_usage == 0.0 && s.running == 0 && s.waiting == 0)
        })
        .await;
        assert!(freed, "{:?}", replica.stats());
        assert!(wait_until(Duration::from_secs(1), || replica.outstanding() == 0).await);
        let text = metrics_text(&c, &server.url()).await;
        assert_eq!(sample(&text, "vllm:request_success_total", "finished_reason=\"abort\""), Some(1.0));
        assert_eq!(sample(&text, "vllm:kv_cache_usage_perc", ""), Some(0.0));
        let generated = sample(&text, "vllm:generation_tokens_total", "").unwrap();
        assert!(generated < 1000.0, "generation stopped: {generated}");
        server.shutdown().await;
    })
    .await;
}

/// The leak a request-cancellation failure test must catch: with `abort_on_disconnect`
/// off, the engine keeps generating for a client that went away, and counts no abort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_ignores_disconnects_keeps_the_slot() {
    bounded(20, async {
        let server = start(ReplicaConfig {
            abort_on_disconnect: false,
            ..config(10.0)
        })
        .await;
        let c = client();
        let mut resp = post(
            &c,
            &server,
            "/v1/completions",
            json!({"prompt": token_prompt(1024, 5), "max_tokens": 5000, "ignore_eos": true, "stream": true}),
        )
        .await;
        let mut got = 0;
        while got < 5 {
            let chunk = resp.chunk().await.unwrap().expect("more frames");
            got += chunk.windows(2).filter(|w| *w == b"\n\n").count();
        }
        drop(resp);
        let replica = server.replica().clone();
        // The healthy engine frees the slot within milliseconds (the test above); this one
        // still holds it a second later and is still generating.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let stats = replica.stats().unwrap();
        assert_eq!(stats.running, 1, "{stats:?}");
        assert!(stats.kv_usage > 0.0);
        let text = metrics_text(&c, &server.url()).await;
        assert_eq!(sample(&text, "vllm:request_success_total", "finished_reason=\"abort\""), Some(0.0));
        let generated = sample(&text, "vllm:generation_tokens_total", "").unwrap();
        assert!(generated > 100.0, "generation went on: {generated}");
        server.shutdown().await;
    })
    .await;
}

/// Checks the text exposition by hand (names may contain colons, which prometheus-parse's
/// name pattern does not accept) and returns it with colons mapped to underscores, for
/// prometheus-parse.
fn check_exposition(text: &str) -> String {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, ch)| {
                ch.is_ascii_alphabetic() || ch == '_' || ch == ':' || (i > 0 && ch.is_ascii_digit())
            })
    };
    let mut typed = std::collections::HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            let (name, kind) = (it.next().unwrap(), it.next().unwrap());
            assert!(name_ok(name), "{line}");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            typed.insert(name.to_string(), kind.to_string());
        } else if line.starts_with("# HELP ") {
        } else {
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {line:?}"));
            value
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("bad value in {line:?}"));
            let name = series.split('{').next().unwrap();
            assert!(name_ok(name), "{line}");
            let family = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| typed.get(*f).is_some_and(|k| k == "histogram"))
                })
                .unwrap_or(name);
            assert!(
                typed.contains_key(family),
                "sample before its TYPE line: {line}"
            );
            if series.contains('{') {
                assert!(series.ends_with('}'), "{line}");
            }
        }
    }
    text.replace("vllm:", "vllm_").replace("sglang:", "sglang_")
}

fn parse(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parses")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_count_requests() {
    bounded(20, async {
        let server = start(config(20.0)).await;
        let c = client();
        for stream in [false, true] {
            let r = post(
                &c,
                &server,
                "/v1/completions",
                json!({"prompt": token_prompt(200, 5), "max_tokens": 7, "ignore_eos": true, "stream": stream}),
            )
            .await;
            assert_eq!(r.status(), 200);
            let _ = r.bytes().await.unwrap();
        }
        let text = metrics_text(&c, &server.url()).await;
        let scrape = parse(&check_exposition(&text));
        let get = |name: &str| {
            scrape
                .samples
                .iter()
                .find(|s| s.metric == name)
                .unwrap_or_else(|| panic!("no {name}"))
        };
        for name in ["vllm_num_requests_running", "vllm_num_requests_waiting", "vllm_kv_cache_usage_perc"] {
            let s = get(name);
            assert!(matches!(s.value, prometheus_parse::Value::Gauge(_)), "{name}");
            assert_eq!(s.labels.get("model_name"), Some(qwen().model.as_str()));
            assert_eq!(s.labels.get("engine"), Some("0"));
        }
        let counter = |name: &str| match get(name).value {
            prometheus_parse::Value::Counter(v) => v,
            ref v => panic!("{name} is {v:?}"),
        };
        assert_eq!(counter("vllm_prompt_tokens_total"), 400.0);
        assert_eq!(counter("vllm_generation_tokens_total"), 14.0);
        assert_eq!(counter("vllm_num_preemptions_total"), 0.0);
        assert_eq!(counter("vllm_prefix_cache_queries_total"), 0.0);
        assert_eq!(counter("vllm_prefix_cache_hits_total"), 0.0);
        let success: f64 = scrape
            .samples
            .iter()
            .filter(|s| s.metric == "vllm_request_success_total")
            .filter(|s| s.labels.get("finished_reason") == Some("length"))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) => v,
                _ => panic!("not a counter"),
            })
            .sum();
        assert_eq!(success, 2.0);
        for (name, count) in [
            ("vllm_time_to_first_token_seconds", 2.0),
            ("vllm_inter_token_latency_seconds", 12.0),
            ("vllm_e2e_request_latency_seconds", 2.0),
            ("vllm_request_queue_time_seconds", 2.0),
        ] {
            let prometheus_parse::Value::Histogram(buckets) = &get(name).value else {
                panic!("{name} is not a histogram");
            };
            assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count && w[0].less_than < w[1].less_than), "{name}");
            let inf = buckets.last().unwrap();
            assert!(inf.less_than.is_infinite());
            assert_eq!(inf.count, count, "{name}");
            assert_eq!(sample(&text, &format!("{}_count", name.replacen('_', ":", 1)), ""), Some(count));
        }
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_flavour_renders_sglang_names() {
    bounded(20, async {
        let server = start(ReplicaConfig {
            metrics_flavor: MetricsFlavor::Sglang,
            ..config(20.0)
        })
        .await;
        let c = client();
        let r = post(
            &c,
            &server,
            "/v1/completions",
            json!({"prompt": "a b c", "max_tokens": 4, "ignore_eos": true}),
        )
        .await;
        assert_eq!(r.status(), 200);
        let text = metrics_text(&c, &server.url()).await;
        assert!(!text.contains("vllm:"), "{text}");
        let scrape = parse(&check_exposition(&text));
        for name in [
            "sglang:num_running_reqs",
            "sglang:num_queue_reqs",
            "sglang:token_usage",
            "sglang:cache_hit_rate",
            "sglang:prompt_tokens_total",
            "sglang:generation_tokens_total",
            "sglang:num_requests_total",
            "sglang:time_to_first_token_seconds",
            "sglang:inter_token_latency_seconds",
            "sglang:e2e_request_latency_seconds",
            "sglang:queue_time_seconds",
        ] {
            assert!(text.contains(&format!("# TYPE {name} ")), "no {name}");
            let parsed = name.replace(':', "_");
            let s = scrape
                .samples
                .iter()
                .find(|s| s.metric == parsed)
                .unwrap_or_else(|| panic!("{parsed}"));
            assert_eq!(s.labels.get("model_name"), Some(qwen().model.as_str()));
            assert_eq!(s.labels.get("engine_type"), Some("unified"));
        }
        assert_eq!(sample(&text, "sglang:num_requests_total", ""), Some(1.0));
        assert_eq!(
            sample(&text, "sglang:generation_tokens_total", ""),
            Some(4.0)
        );
        assert_eq!(sample(&text, "sglang:prompt_tokens_total", ""), Some(3.0));
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_prefixes_hit_the_prefix_cache() {
    bounded(20, async {
        let mut setup = qwen();
        setup.prefix_caching = true;
        let server = start(ReplicaConfig {
            time_scale: 20.0,
            ..ReplicaConfig::new(setup)
        })
        .await;
        let c = client();
        let shared = token_prompt(512, 6);
        for tail in [1u32, 2] {
            let mut prompt = shared.clone();
            prompt.extend((0..88).map(|i| 60_000 + tail * 100 + i));
            let r = post(
                &c,
                &server,
                "/v1/completions",
                json!({"prompt": prompt, "max_tokens": 2, "ignore_eos": true}),
            )
            .await;
            assert_eq!(r.status(), 200);
            let _ = r.bytes().await;
        }
        // Text prompts hash their stand-in token ids the same way.
        let text = "lorem ipsum dolor ".repeat(60);
        for _ in 0..2 {
            let r = post(
                &c,
                &server,
                "/v1/completions",
                json!({"prompt": text, "max_tokens": 2}),
            )
            .await;
            let _ = r.bytes().await;
        }
        let m = metrics_text(&c, &server.url()).await;
        let queries = sample(&m, "vllm:prefix_cache_queries_total", "").unwrap();
        let hits = sample(&m, "vllm:prefix_cache_hits_total", "").unwrap();
        let text_tokens = goodput::sim::live::tokenizer::count_tokens(&text) as f64;
        assert_eq!(queries, 2.0 * 600.0 + 2.0 * text_tokens);
        // 32 shared blocks, then a whole text prompt's blocks (at least one token is always
        // computed).
        let text_hits = ((text_tokens / 16.0).floor() * 16.0).min(text_tokens - 1.0);
        assert_eq!(hits, 512.0 + text_hits, "{m}");
        server.shutdown().await;
    })
    .await;
}

async fn refused(addr: SocketAddr) -> bool {
    tokio::net::TcpStream::connect(addr).await.is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_breaks_streams_and_restore_cold_starts() {
    bounded(30, async {
        let server = start(config(10.0)).await;
        let addr = server.local_addr();
        let c = client();
        let body = json!({"prompt": token_prompt(256, 7), "max_tokens": 3000, "ignore_eos": true, "stream": true});
        let mut resp = post(&c, &server, "/v1/completions", body).await;
        let first = resp.chunk().await.unwrap().expect("a frame");
        assert!(first.starts_with(b"data: {"));
        server.kill().await;
        assert!(!server.is_serving().await);
        // The stream breaks mid-body: an error, never [DONE].
        let mut rest = Vec::new();
        let broke = loop {
            match tokio::time::timeout(Duration::from_secs(3), resp.chunk()).await {
                Ok(Ok(Some(c))) => rest.extend_from_slice(&c),
                Ok(Ok(None)) => break false,
                Ok(Err(_)) => break true,
                Err(_) => panic!("the stream neither broke nor ended"),
            }
        };
        assert!(broke, "stream ended cleanly after a kill");
        assert!(!String::from_utf8_lossy(&rest).contains("[DONE]"));
        assert!(refused(addr).await, "port still accepts connections");
        assert!(server.replica().stats().is_none());

        server.restore().await.expect("restore");
        assert_eq!(server.local_addr(), addr);
        let c = client();
        let r = c.get(format!("{}/health", server.url())).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let r = post(&c, &server, "/v1/completions", json!({"prompt": "again", "max_tokens": 3, "ignore_eos": true})).await;
        assert_eq!(r.status(), 200);
        let _ = r.bytes().await;
        // A cold start: counters begin from zero.
        let text = metrics_text(&c, &server.url()).await;
        assert_eq!(sample(&text, "vllm:generation_tokens_total", ""), Some(3.0));
        server.shutdown().await;
        assert!(refused(addr).await);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_faults() {
    bounded(30, async {
        let server = start(config(20.0)).await;
        let replica = server.replica().clone();
        let c = client();
        let req = json!({"prompt": token_prompt(64, 8), "max_tokens": 10, "ignore_eos": true, "stream": true});

        replica.set_faults(FaultConfig {
            error_fraction: 1.0,
            error_status: 503,
            ..FaultConfig::default()
        });
        let v = expect_error(post(&c, &server, "/v1/completions", req.clone()).await, 503).await;
        assert_eq!(v["error"]["type"], "ServiceUnavailableError");

        replica.set_faults(FaultConfig {
            stream_cut: Some(StreamCut {
                fraction: 1.0,
                after_tokens: 3,
                mode: CutMode::ErrorFrame,
            }),
            ..FaultConfig::default()
        });
        let (frames, err) = read_sse(post(&c, &server, "/v1/completions", req.clone()).await).await;
        assert!(err.is_none());
        assert_eq!(token_frames(&frames).len(), 3);
        assert!(json_of(&frames[3])["error"]["message"].is_string(), "{frames:?}");
        assert_eq!(frames[4].data, "[DONE]");
        assert_eq!(frames.len(), 5);

        replica.set_faults(FaultConfig {
            stream_cut: Some(StreamCut {
                fraction: 1.0,
                after_tokens: 2,
                mode: CutMode::Disconnect,
            }),
            ..FaultConfig::default()
        });
        let (frames, err) = read_sse(post(&c, &server, "/v1/completions", req.clone()).await).await;
        assert!(err.is_some(), "the connection should break: {frames:?}");
        assert_eq!(token_frames(&frames).len(), 2);

        replica.set_faults(FaultConfig {
            added_latency: Duration::from_millis(100),
            ..FaultConfig::default()
        });
        let t0 = Instant::now();
        let (frames, _) = read_sse(post(&c, &server, "/v1/completions", req.clone()).await).await;
        assert!(frames[0].at - t0 >= Duration::from_millis(100));
        replica.set_faults(FaultConfig::default());

        // No KV at all: the request waits; KV back: it runs.
        replica.set_kv_capacity_factor(0.0);
        let pending = tokio::spawn({
            let (c, url) = (c.clone(), server.url());
            async move {
                let r = c.post(format!("{url}/v1/completions")).json(&req).send().await.unwrap();
                read_sse(r).await
            }
        });
        assert!(wait_until(Duration::from_secs(2), || replica.stats().is_some_and(|s| s.waiting == 1)).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(replica.stats().unwrap().running, 0);
        replica.set_kv_capacity_factor(1.0);
        let (frames, err) = pending.await.unwrap();
        assert!(err.is_none());
        assert_eq!(token_frames(&frames).len(), 10);
        // Every cut or finished request has left the engine.
        assert!(wait_until(Duration::from_secs(2), || replica.stats().is_some_and(|s| s.kv_usage == 0.0)).await);
        server.shutdown().await;
    })
    .await;
}
