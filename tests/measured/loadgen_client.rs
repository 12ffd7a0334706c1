//! The load generator's streaming client against the simulated engine and against small
//! hand-written servers, all on 127.0.0.1: token counting and timing on the wire, and every
//! failure mode mapped to its `ErrorKind` within its timeout.
//!
//! Every test is bounded by a time limit and holds a global lock, so the timing-sensitive
//! ones do not share the CPU.

use crate::live;
use live::{bounded, client, config, predict, qwen, start};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use goodput::loadgen::client::{send, send_or_abort};
use goodput::loadgen::{Api, ErrorKind, Prompt, RequestOutcome, RequestSpec, Timeouts};
use goodput::sim::live::{CutMode, FaultConfig, ReplicaConfig, StreamCut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const MODEL: &str = "Qwen/Qwen2.5-7B-Instruct";

fn timeouts() -> Timeouts {
    Timeouts {
        request: Duration::from_secs(10),
        stall: Duration::from_secs(5),
        connect: Duration::from_secs(2),
    }
}

fn token_prompt(n: u32, salt: u32) -> Vec<u32> {
    (0..n).map(|i| 1000 + (i * 7 + salt) % 50_000).collect()
}

fn completion(prompt: Vec<u32>, max_tokens: u32) -> RequestSpec {
    RequestSpec {
        model: MODEL.into(),
        api: Api::Completions,
        prompt: Prompt::Tokens(prompt),
        max_tokens,
        min_tokens: None,
        ignore_eos: true,
        temperature: None,
        close_connection: false,
    }
}

fn chat(text: &str, max_tokens: u32) -> RequestSpec {
    RequestSpec {
        api: Api::Chat,
        prompt: Prompt::Text(text.into()),
        ..completion(Vec::new(), max_tokens)
    }
}

/// Asserts a success and the invariants every success satisfies.
fn assert_success(o: &RequestOutcome) {
    assert_eq!(o.error, None, "{o:?}");
    assert_eq!(o.error_message, None);
    assert_eq!(o.http_status, Some(200));
    let (first, last) = (o.first_token.expect("first"), o.last_token.expect("last"));
    assert!(o.sent <= first && first <= last && last <= o.ended, "{o:?}");
    assert_eq!(o.itl_ms.len() as u32, o.content_chunks - 1);
    let span = (last - first).as_secs_f64() * 1e3;
    let sum: f64 = o.itl_ms.iter().sum();
    assert!((sum - span).abs() < 1e-6 * span.max(1.0), "{sum} vs {span}");
}

fn assert_failed(o: &RequestOutcome, kind: ErrorKind) {
    assert_eq!(o.error, Some(kind), "{o:?}");
    assert!(
        o.error_message.as_deref().is_some_and(|m| !m.is_empty()),
        "{o:?}"
    );
    assert!(o.sent <= o.ended);
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

// ---------------------------------------------------------------------------------------
// Against the simulated engine

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_with_token_ids_counts_and_times_every_token() {
    bounded(30, async {
        let setup = qwen();
        let (input, output) = (1024u32, 32u32);
        let (ttft, tpot) = predict(&setup, input, output);
        assert!((ttft - 0.032).abs() < 0.001 && (tpot - 0.005).abs() < 0.0005);
        let server = start(config(1.0)).await;
        let c = client();
        // Warm the connection pool.
        let warm = send(
            &c,
            &server.url(),
            &completion(token_prompt(16, 0), 2),
            &timeouts(),
        )
        .await;
        assert_success(&warm);
        let (mut ttfts, mut tpots, mut itls) = (Vec::new(), Vec::new(), Vec::new());
        for salt in 1..=5 {
            // Give the client a moment to put the previous connection (the warm-up's too)
            // back in its pool; without it a second connection opens now and then.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let spec = completion(token_prompt(input, salt), output);
            let o = send(&c, &server.url(), &spec, &timeouts()).await;
            assert_success(&o);
            assert_eq!(o.content_chunks, output);
            assert_eq!(o.usage_completion_tokens, Some(output));
            assert_eq!(o.usage_prompt_tokens, Some(input));
            assert_eq!(o.output_tokens(), output);
            assert!(!o.tokens_mismatch());
            assert_eq!(o.finish_reason.as_deref(), Some("length"));
            let first = o.first_token.expect("first token");
            let last = o.last_token.expect("last token");
            ttfts.push((first - o.sent).as_secs_f64());
            tpots.push((last - first).as_secs_f64() / f64::from(output - 1));
            itls.extend(o.itl_ms.iter().map(|ms| ms / 1e3));
        }
        // Each stream was read to its end, so one pooled connection carried them all.
        assert_eq!(server.open_connections().await, 1);
        let (m_ttft, m_tpot, m_itl) = (median(&mut ttfts), median(&mut tpots), median(&mut itls));
        // The client cannot see a token before the model makes it; after it, request
        // handling adds a little (an unoptimized build spends a few ms of CPU on the
        // request path before the engine sees the request, more on a busy machine).
        let slack = if cfg!(debug_assertions) { 0.005 } else { 0.0 };
        assert!(
            m_ttft >= ttft - 0.001 && m_ttft <= ttft + 0.002 + slack,
            "TTFT {m_ttft:.4}s vs model {ttft:.4}s ({ttfts:?})"
        );
        assert!(
            (m_tpot - tpot).abs() <= 0.001,
            "TPOT {m_tpot:.5}s vs model {tpot:.5}s ({tpots:?})"
        );
        assert!(
            (m_itl - tpot).abs() <= 0.001,
            "median ITL {m_itl:.5}s vs model {tpot:.5}s"
        );
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_prompts_and_sampled_lengths() {
    bounded(20, async {
        let server = start(config(20.0)).await;
        let c = client();
        // Without ignore_eos the length is drawn in [min_tokens, max_tokens].
        let spec = RequestSpec {
            prompt: Prompt::Text("hello there, simulated engine".into()),
            ignore_eos: false,
            min_tokens: Some(5),
            temperature: Some(0.0),
            ..completion(Vec::new(), 40)
        };
        for _ in 0..3 {
            let o = send(&c, &server.url(), &spec, &timeouts()).await;
            assert_success(&o);
            let n = o.content_chunks;
            assert!((5..=40).contains(&n), "{n}");
            assert_eq!(o.usage_completion_tokens, Some(n));
            let want = if n == 40 { "length" } else { "stop" };
            assert_eq!(o.finish_reason.as_deref(), Some(want));
        }
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_streams_count_content_chunks() {
    bounded(20, async {
        let server = start(config(20.0)).await;
        let c = client();
        let o = send(
            &c,
            &server.url(),
            &chat("Write a haiku about queues.", 12),
            &timeouts(),
        )
        .await;
        assert_success(&o);
        assert_eq!(o.content_chunks, 12);
        assert_eq!(o.usage_completion_tokens, Some(12));
        assert!(o.usage_prompt_tokens.is_some_and(|p| p > 8), "{o:?}");
        assert_eq!(o.finish_reason.as_deref(), Some("length"));
        // A token prompt on chat goes as space-separated ids.
        let spec = RequestSpec {
            api: Api::Chat,
            ..completion(vec![11, 22, 33], 3)
        };
        let o = send(&c, &server.url(), &spec, &timeouts()).await;
        assert_success(&o);
        assert_eq!(o.content_chunks, 3);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_token_chunks_show_as_a_usage_mismatch() {
    bounded(20, async {
        let server = start(ReplicaConfig {
            stream_interval: 4,
            ..config(20.0)
        })
        .await;
        let c = client();
        let o = send(
            &c,
            &server.url(),
            &completion(token_prompt(64, 1), 10),
            &timeouts(),
        )
        .await;
        assert_success(&o);
        // Frames of 1, 4, 4 and 1 tokens.
        assert_eq!(o.content_chunks, 4);
        assert_eq!(o.itl_ms.len(), 3);
        assert_eq!(o.usage_completion_tokens, Some(10));
        assert_eq!(o.output_tokens(), 10);
        assert!(o.tokens_mismatch());
        server.shutdown().await;
    })
    .await;
}

/// A client that goes away on purpose (a failure test's request cancellation): the
/// outcome is `Aborted` with exactly the chunks asked for, and closing the connection makes
/// the engine abort the request and free its slot. `Some(0)` goes away at the headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_is_aborted_and_the_engine_frees_the_slot() {
    bounded(30, async {
        let server = start(config(10.0)).await;
        let c = client();
        let spec = completion(token_prompt(256, 9), 3000);
        let o = send_or_abort(&c, &server.url(), &spec, &timeouts(), Some(5)).await;
        assert_failed(&o, ErrorKind::Aborted);
        assert_eq!(o.content_chunks, 5, "{o:?}");
        assert_eq!(o.itl_ms.len(), 4);
        assert!(o.first_token.is_some());
        let replica = server.replica().clone();
        let t0 = Instant::now();
        while replica.stats().is_none_or(|s| s.running > 0) && t0.elapsed() < Duration::from_secs(3)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let stats = replica.stats().expect("the engine runs");
        assert_eq!((stats.running, stats.waiting), (0, 0), "{stats:?}");
        assert_eq!(stats.kv_usage, 0.0);

        let o = send_or_abort(&c, &server.url(), &spec, &timeouts(), Some(0)).await;
        assert_failed(&o, ErrorKind::Aborted);
        assert_eq!((o.content_chunks, o.first_token), (0, None));
        assert_eq!(o.http_status, Some(200));

        // A stream that ends before its cancel point is recorded as it ended.
        let short = completion(token_prompt(16, 10), 3);
        let o = send_or_abort(&c, &server.url(), &short, &timeouts(), Some(5)).await;
        assert_success(&o);
        assert_eq!(o.content_chunks, 3);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_errors_carry_status_and_message() {
    bounded(20, async {
        let server = start(config(20.0)).await;
        let c = client();
        let mut spec = completion(token_prompt(16, 2), 4);
        spec.model = "no-such-model".into();
        let o = send(&c, &server.url(), &spec, &timeouts()).await;
        assert_failed(&o, ErrorKind::HttpStatus);
        assert_eq!(o.http_status, Some(404));
        let msg = o.error_message.as_deref().unwrap_or_default();
        assert!(msg.contains("does not exist"), "{msg}");
        assert_eq!((o.first_token, o.content_chunks), (None, 0));

        server.replica().set_faults(FaultConfig {
            error_fraction: 1.0,
            error_status: 503,
            ..FaultConfig::default()
        });
        let o = send(
            &c,
            &server.url(),
            &completion(token_prompt(16, 3), 4),
            &timeouts(),
        )
        .await;
        assert_failed(&o, ErrorKind::HttpStatus);
        assert_eq!(o.http_status, Some(503));
        assert!(
            o.error_message
                .as_deref()
                .unwrap_or_default()
                .starts_with("503"),
            "{o:?}"
        );
        // The pool still works after errors.
        server.replica().set_faults(FaultConfig::default());
        let o = send(
            &c,
            &server.url(),
            &completion(token_prompt(16, 4), 4),
            &timeouts(),
        )
        .await;
        assert_success(&o);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_cuts_are_stream_errors_or_disconnects() {
    bounded(20, async {
        let server = start(config(20.0)).await;
        let replica = server.replica().clone();
        let c = client();
        let cut = |after_tokens, mode| FaultConfig {
            stream_cut: Some(StreamCut {
                fraction: 1.0,
                after_tokens,
                mode,
            }),
            ..FaultConfig::default()
        };
        replica.set_faults(cut(3, CutMode::ErrorFrame));
        let o = send(
            &c,
            &server.url(),
            &completion(token_prompt(64, 5), 10),
            &timeouts(),
        )
        .await;
        assert_failed(&o, ErrorKind::StreamError);
        assert_eq!(o.http_status, Some(200));
        assert_eq!(o.content_chunks, 3);
        let msg = o.error_message.as_deref().unwrap_or_default();
        assert!(msg.contains("simulated mid-stream failure"), "{msg}");

        replica.set_faults(cut(2, CutMode::Disconnect));
        let o = send(
            &c,
            &server.url(),
            &completion(token_prompt(64, 6), 10),
            &timeouts(),
        )
        .await;
        assert_failed(&o, ErrorKind::Disconnected);
        assert_eq!(o.http_status, Some(200));
        assert_eq!(o.content_chunks, 2);
        assert!(o.first_token.is_some());
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_replica_disconnects_then_refuses() {
    bounded(20, async {
        let server = start(config(1.0)).await;
        let c = client();
        let url = server.url();
        let running = tokio::spawn({
            let (c, url) = (c.clone(), url.clone());
            async move {
                send(
                    &c,
                    &url,
                    &completion(token_prompt(64, 7), 2000),
                    &timeouts(),
                )
                .await
            }
        });
        let replica = server.replica().clone();
        let t0 = Instant::now();
        while replica.stats().is_none_or(|s| s.running == 0) {
            assert!(
                t0.elapsed() < Duration::from_secs(3),
                "the request never ran"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        server.kill().await;
        let o = running.await.expect("send does not panic");
        assert_failed(&o, ErrorKind::Disconnected);
        assert!(o.content_chunks > 0 && o.content_chunks < 2000, "{o:?}");
        // The port now refuses connections.
        let t0 = Instant::now();
        let o = send(&c, &url, &completion(token_prompt(8, 8), 2), &timeouts()).await;
        assert_failed(&o, ErrorKind::Connect);
        assert!(t0.elapsed() < Duration::from_secs(1));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_future_aborts_the_request() {
    bounded(20, async {
        let server = start(config(10.0)).await;
        let replica = server.replica().clone();
        let c = client();
        let spec = completion(token_prompt(1024, 9), 5000);
        let (url, t) = (server.url(), timeouts());
        let fut = send(&c, &url, &spec, &t);
        // Cut it off mid-stream, as the runner's cancellation would.
        let r = tokio::time::timeout(Duration::from_millis(300), fut).await;
        assert!(r.is_err(), "the request should still be streaming");
        let t0 = Instant::now();
        loop {
            let s = replica.stats().expect("engine running");
            if s.running == 0 && s.waiting == 0 && s.kv_usage == 0.0 {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(3), "not freed: {s:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_port_is_a_quick_connect_error() {
    bounded(10, async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let c = client();
        let t0 = Instant::now();
        let o = send(
            &c,
            &format!("http://{addr}"),
            &completion(vec![1, 2], 2),
            &timeouts(),
        )
        .await;
        assert_failed(&o, ErrorKind::Connect);
        assert_eq!(o.http_status, None);
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        // An unparseable base URL is a connect error too, not a panic.
        let o = send(&c, "not a url", &completion(vec![1, 2], 2), &timeouts()).await;
        assert_failed(&o, ErrorKind::Connect);
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Hand-written servers

/// One step of a scripted HTTP/1.1 response.
#[derive(Clone, Debug)]
enum Step {
    /// Raw bytes (status line, headers, or a hand-made body).
    Raw(Vec<u8>),
    /// One chunk of a chunked body.
    Chunk(Vec<u8>),
    /// The chunked body's terminator.
    End,
    Sleep(Duration),
}

fn sse_head() -> Step {
    Step::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec(),
    )
}

fn chunk(s: &str) -> Step {
    Step::Chunk(s.as_bytes().to_vec())
}

fn ms(n: u64) -> Step {
    Step::Sleep(Duration::from_millis(n))
}

/// Reads one request (headers and a `content-length` body); false on EOF.
async fn read_request(s: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        match s.read(&mut tmp).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match s.read(&mut tmp).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
    true
}

/// A server on 127.0.0.1 that answers every request on every connection with `script`
/// and closes the connection after it.
async fn scripted(script: Vec<Step>) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    let script = Arc::new(script);
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let _ = s.set_nodelay(true);
            let script = script.clone();
            tokio::spawn(async move {
                if !read_request(&mut s).await {
                    return;
                }
                for step in script.iter() {
                    let r = match step {
                        Step::Raw(b) => s.write_all(b).await,
                        Step::Chunk(b) => {
                            let mut out = format!("{:x}\r\n", b.len()).into_bytes();
                            out.extend_from_slice(b);
                            out.extend_from_slice(b"\r\n");
                            s.write_all(&out).await
                        }
                        Step::End => s.write_all(b"0\r\n\r\n").await,
                        Step::Sleep(d) => {
                            tokio::time::sleep(*d).await;
                            Ok(())
                        }
                    };
                    if r.is_err() {
                        return;
                    }
                    let _ = s.flush().await;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    (format!("http://{addr}"), task)
}

fn short_timeouts() -> Timeouts {
    Timeouts {
        request: Duration::from_secs(5),
        stall: Duration::from_millis(300),
        connect: Duration::from_secs(1),
    }
}

async fn run_script(script: Vec<Step>, spec: &RequestSpec, t: &Timeouts) -> RequestOutcome {
    let (url, task) = scripted(script).await;
    let o = send(&client(), &url, spec, t).await;
    task.abort();
    o
}

const C1: &str = r#"data: {"choices":[{"index":0,"text":" a","finish_reason":null}]}"#;
const C_LAST: &str = r#"data: {"choices":[{"index":0,"text":" z","finish_reason":"length"}]}"#;
const USAGE3: &str =
    r#"data: {"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_chunk_is_not_a_token() {
    bounded(10, async {
        let script = vec![
            sse_head(),
            chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}\n\n"),
            ms(100),
            chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1}}\n\n"),
            ms(20),
            chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hmm\"}}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n"),
            chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"!\"}}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}\n\n"),
            chunk("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n"),
            Step::End,
        ];
        let o = run_script(script, &chat("hi", 8), &short_timeouts()).await;
        assert_success(&o);
        assert_eq!(o.content_chunks, 3);
        // The first token is the first content, not the role chunk 100 ms earlier.
        let ttft = o.first_token.expect("first") - o.sent;
        assert!(ttft >= Duration::from_millis(100), "{ttft:?}");
        assert_eq!(o.itl_ms.len(), 2);
        assert!(o.itl_ms[0] >= 19.0, "{:?}", o.itl_ms);
        assert_eq!(o.usage_completion_tokens, Some(3));
        assert_eq!(o.usage_prompt_tokens, Some(9));
        assert_eq!(o.finish_reason.as_deref(), Some("stop"));
        assert!(!o.tokens_mismatch());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_split_anywhere_on_the_wire() {
    bounded(10, async {
        // CRLF separators, comments, a multi-byte character; cut into 7-byte pieces sent
        // separately, so reads split frames inside `\r\n` and inside UTF-8 sequences.
        let body = format!(
            ": keep-alive\r\n\r\n{}\r\n\r\n{}\r\n\r\n{}\r\n\r\n{}\r\n\r\ndata: [DONE]\r\n\r\n",
            C1,
            r#"data: {"choices":[{"index":0,"text":" é世🎉","finish_reason":null}]}"#,
            C_LAST,
            USAGE3,
        );
        let mut script = vec![sse_head()];
        for piece in body.as_bytes().chunks(7) {
            script.push(Step::Chunk(piece.to_vec()));
            script.push(ms(1));
        }
        script.push(Step::End);
        let o = run_script(script, &completion(vec![1, 2], 3), &short_timeouts()).await;
        assert_success(&o);
        assert_eq!(o.content_chunks, 3);
        assert_eq!(o.usage_completion_tokens, Some(3));
        assert_eq!(o.finish_reason.as_deref(), Some("length"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_of_body_without_done() {
    bounded(10, async {
        // Finished generation, clean end, no [DONE]: a success.
        let script = vec![
            sse_head(),
            chunk(&format!("{C1}\n\n{C1}\n\n{C_LAST}\n\n{USAGE3}\n\n")),
            Step::End,
        ];
        let o = run_script(script, &completion(vec![1], 3), &short_timeouts()).await;
        assert_success(&o);
        assert_eq!(o.content_chunks, 3);
        // The same with the last event missing its blank line.
        let script = vec![
            sse_head(),
            chunk(&format!("{C1}\n\n{C_LAST}\n\ndata: [DONE]")),
            Step::End,
        ];
        let o = run_script(script, &completion(vec![1], 2), &short_timeouts()).await;
        assert_success(&o);
        // No finish_reason, no [DONE]: the stream was cut.
        let script = vec![sse_head(), chunk(&format!("{C1}\n\n{C1}\n\n")), Step::End];
        let o = run_script(script, &completion(vec![1], 3), &short_timeouts()).await;
        assert_failed(&o, ErrorKind::Disconnected);
        assert_eq!(o.content_chunks, 2);
        // A truncated last event at a clean end is a cut, not a malformed frame.
        let script = vec![
            sse_head(),
            chunk(&format!("{C1}\n\n{}", &C1[..30])),
            Step::End,
        ];
        let o = run_script(script, &completion(vec![1], 3), &short_timeouts()).await;
        assert_failed(&o, ErrorKind::Disconnected);
        assert_eq!(o.content_chunks, 1);
        // The connection closes inside a chunk of the chunked body.
        let script = vec![
            sse_head(),
            chunk(&format!("{C1}\n\n")),
            Step::Raw(b"100\r\ndata: {\"cho".to_vec()),
        ];
        let o = run_script(script, &completion(vec![1], 3), &short_timeouts()).await;
        assert_failed(&o, ErrorKind::Disconnected);
        assert_eq!(o.content_chunks, 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_stream_and_failed_finish_reasons() {
    bounded(10, async {
        let script = vec![
            sse_head(),
            chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"),
            chunk("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"),
            Step::End,
        ];
        let o = run_script(script, &chat("hi", 8), &short_timeouts()).await;
        assert_failed(&o, ErrorKind::Empty);
        assert_eq!((o.content_chunks, o.first_token), (0, None));
        assert_eq!(o.http_status, Some(200));

        let script = vec![
            sse_head(),
            chunk(&format!(
                "{C1}\n\ndata: {{\"choices\":[{{\"index\":0,\"text\":\"\",\"finish_reason\":\"abort\"}}]}}\n\ndata: [DONE]\n\n"
            )),
            Step::End,
        ];
        let o = run_script(script, &completion(vec![1], 3), &short_timeouts()).await;
        assert_failed(&o, ErrorKind::StreamError);
        assert_eq!(o.finish_reason.as_deref(), Some("abort"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames() {
    bounded(10, async {
        for bad in [
            "data: {not json}\n\n",
            "data: {\"id\":\"x\",\"object\":\"text_completion\"}\n\n",
            "data: {\"choices\":[{\"text\":17}]}\n\n",
        ] {
            let script = vec![
                sse_head(),
                chunk(&format!("{C1}\n\n{bad}")),
                // Never sent: the client stops at the bad frame.
                ms(3000),
                chunk("data: [DONE]\n\n"),
                Step::End,
            ];
            let t0 = Instant::now();
            let o = run_script(script, &completion(vec![1], 3), &short_timeouts()).await;
            assert_failed(&o, ErrorKind::Malformed);
            assert_eq!(o.content_chunks, 1, "{bad}");
            assert!(t0.elapsed() < Duration::from_secs(1), "{bad}");
        }
        // A JSON answer to a streaming request.
        let body = r#"{"id":"x","object":"text_completion","choices":[{"text":"hi"}]}"#;
        let script = vec![Step::Raw(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )];
        let o = run_script(script, &completion(vec![1], 3), &short_timeouts()).await;
        assert_failed(&o, ErrorKind::Malformed);
        // An endless line is cut off at the parser's limit (1 MiB), not buffered forever.
        let mut script = vec![sse_head(), chunk("data: ")];
        let junk = "x".repeat(64 * 1024);
        for _ in 0..20 {
            script.push(Step::Chunk(junk.clone().into_bytes()));
        }
        let o = run_script(script, &completion(vec![1], 3), &short_timeouts()).await;
        assert_failed(&o, ErrorKind::Malformed);
        assert!(
            o.error_message.as_deref().unwrap_or_default().contains("limit"),
            "{o:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalls_are_detected_within_the_stall_timeout() {
    bounded(15, async {
        // Headers and one frame, then silence.
        let script = vec![sse_head(), chunk(&format!("{C1}\n\n")), ms(10_000)];
        let t0 = Instant::now();
        let o = run_script(script, &completion(vec![1], 3), &short_timeouts()).await;
        let took = t0.elapsed();
        assert_failed(&o, ErrorKind::Stalled);
        assert_eq!(o.content_chunks, 1);
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_millis(900),
            "{took:?}"
        );
        // Keep-alive comments are bytes: a slow stream that keeps talking is not stalled.
        let mut script = vec![sse_head(), chunk(&format!("{C1}\n\n"))];
        for _ in 0..4 {
            script.push(ms(150));
            script.push(chunk(": keep-alive\n\n"));
        }
        script.push(chunk(&format!("{C_LAST}\n\ndata: [DONE]\n\n")));
        script.push(Step::End);
        let o = run_script(script, &completion(vec![1], 2), &short_timeouts()).await;
        assert_success(&o);
        assert!(o.itl_ms[0] >= 500.0, "{:?}", o.itl_ms);
        // No answer at all after the request: stalled waiting for the headers.
        let t0 = Instant::now();
        let o = run_script(vec![ms(10_000)], &completion(vec![1], 3), &short_timeouts()).await;
        assert_failed(&o, ErrorKind::Stalled);
        assert_eq!(o.http_status, None);
        assert!(
            t0.elapsed() < Duration::from_millis(900),
            "{:?}",
            t0.elapsed()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overall_timeout() {
    bounded(15, async {
        // A token every 100 ms for ever: never stalled (300 ms), but over 1 s in all.
        let mut script = vec![sse_head()];
        for _ in 0..100 {
            script.push(chunk(&format!("{C1}\n\n")));
            script.push(ms(100));
        }
        let t = Timeouts {
            request: Duration::from_secs(1),
            ..short_timeouts()
        };
        let t0 = Instant::now();
        let o = run_script(script, &completion(vec![1], 3), &t).await;
        let took = t0.elapsed();
        assert_failed(&o, ErrorKind::Timeout);
        assert!((8..=11).contains(&o.content_chunks), "{o:?}");
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_millis(1500),
            "{took:?}"
        );
        assert!(o.ended - o.sent >= Duration::from_secs(1));
        // The request timeout applies while waiting for headers too.
        let t = Timeouts {
            request: Duration::from_millis(200),
            ..short_timeouts()
        };
        let o = run_script(vec![ms(10_000)], &completion(vec![1], 3), &t).await;
        assert_failed(&o, ErrorKind::Timeout);
        // And against the simulated engine: a long generation, a short budget.
        let server = start(config(1.0)).await;
        let t0 = Instant::now();
        let o = send(
            &client(),
            &server.url(),
            &completion(token_prompt(64, 10), 2000),
            &t,
        )
        .await;
        assert_failed(&o, ErrorKind::Timeout);
        assert!(o.content_chunks > 0);
        assert!(
            t0.elapsed() < Duration::from_millis(700),
            "{:?}",
            t0.elapsed()
        );
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_error_bodies_are_read_in_part() {
    bounded(10, async {
        let message = "x".repeat(100_000);
        let body = format!(r#"{{"error":{{"message":"{message}","type":"InternalServerError","code":500}}}}"#);
        let script = vec![Step::Raw(
            format!(
                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )];
        let o = run_script(script, &completion(vec![1], 3), &short_timeouts()).await;
        assert_failed(&o, ErrorKind::HttpStatus);
        assert_eq!(o.http_status, Some(500));
        let msg = o.error_message.as_deref().unwrap_or_default();
        // Cut JSON: the message is the start of the raw text, bounded.
        assert!(msg.starts_with("500 Internal Server Error: {\"error\""), "{msg:.80}");
        assert!(msg.len() < 2 * 4096, "{}", msg.len());
        // A stream error frame from a hand-written server, vLLM's shape.
        let script = vec![
            sse_head(),
            chunk(&format!(
                "{C1}\n\ndata: {{\"error\":{{\"message\":\"boom\",\"type\":\"InternalServerError\",\"param\":null,\"code\":500}}}}\n\ndata: [DONE]\n\n"
            )),
            Step::End,
        ];
        let o = run_script(script, &completion(vec![1], 3), &short_timeouts()).await;
        assert_failed(&o, ErrorKind::StreamError);
        assert_eq!(o.error_message.as_deref(), Some("boom (InternalServerError, code 500)"));
    })
    .await;
}
