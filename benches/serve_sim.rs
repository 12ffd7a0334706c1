//! serve-sim under 2,000 concurrent streams: one simulated replica whose model decodes every
//! running request at about 50 tokens/s (a 19.9 ms step, whatever the batch), 2,000
//! streaming clients, one token per SSE frame, so about 100,500 frames/s.
//!
//! The server runs in a child process (this binary re-executed with
//! `GOODPUT_SERVE_SIM_ROLE=server`) so its CPU time and memory are its own; the clients run
//! here on a single-threaded tokio runtime with a minimal HTTP/1.1 reader (the load of a
//! real client library would only steal CPU from the server on a small machine).
//!
//! Reported over a steady window once every stream is open and streaming:
//! - frames/s, counted by the clients and by the server;
//! - the server's lateness: when a token frame is handed to the HTTP layer minus the step
//!   end the model scheduled it for (`record_lateness`, read from `/debug/lateness`), and
//!   the engine thread's own wake-up lateness;
//! - the server's CPU use in cores (utime + stime from `/proc/PID/stat`);
//! - the server's resident memory per open stream (VmRSS with the streams open minus
//!   before, over the number of streams).
//!
//! - the machine's floor for the same burst: before the server starts, one frame written
//!   to each of as many loopback TCP connections, back to back on one thread (no HTTP, no
//!   runtime, nothing but `write(2)`). Every step hands a frame to every stream at once, so
//!   the last stream's frame can be no earlier than this burst allows.
//!
//! Knobs (environment): `SERVE_SIM_STREAMS` (2000), `SERVE_SIM_WINDOW_S` (10),
//! `SERVE_SIM_STEP_MS` (19.9), `SERVE_SIM_SERVER_WORKERS` (tokio workers in the server, 0 for
//! a current-thread runtime; default 1), `SERVE_SIM_STREAM_INTERVAL` (1).
//!
//! Run: `cargo bench --bench serve_sim`. Linux only (reads `/proc`).

#[path = "support/process.rs"]
mod process;
use process::{env_or, proc_cpu_s, proc_rss, raise_nofile, spawn_self_server};

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use goodput::sim::live::{ReplicaConfig, ReplicaServer};
use goodput::sim::preset;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ---------------------------------------------------------------------------------------
// Server (child process)

fn run_server() {
    raise_nofile();
    let streams: u32 = env_or("SERVE_SIM_STREAMS", 2000);
    let step_ms: f64 = env_or("SERVE_SIM_STEP_MS", 19.9);
    let workers: usize = env_or("SERVE_SIM_SERVER_WORKERS", 1);
    let interval: u32 = env_or("SERVE_SIM_STREAM_INTERVAL", 1);
    let mut setup = preset("qwen2.5-7b-h100").expect("preset");
    // A step costs its fixed overhead and (almost) nothing else, whatever the batch: tiny
    // weights and KV make the memory term vanish, tiny params the compute term.
    setup.params = 1e6;
    setup.weight_bytes = 1e3;
    setup.kv_bytes_per_token = 1e-3;
    setup.step_overhead_s = step_ms / 1e3;
    setup.max_num_seqs = streams.max(1) * 2;
    setup.max_num_batched_tokens = 65_536;
    setup.kv_capacity_tokens = 1 << 30;
    let config = ReplicaConfig {
        stream_interval: interval,
        record_lateness: true,
        ..ReplicaConfig::new(setup)
    };
    let mut rt = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    let rt = rt.enable_all().build().expect("runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let server = ReplicaServer::start(listener, config).expect("server");
        println!("PORT {}", server.local_addr().port());
        let _ = std::io::stdout().flush();
        // Serve until the parent closes our stdin.
        let _ = tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await;
        server.shutdown().await;
    });
}

// ---------------------------------------------------------------------------------------
// Parent: clients and measurement

struct Proc {
    pid: u32,
}

impl Proc {
    /// CPU seconds (user + system) used so far.
    fn cpu_s(&self) -> f64 {
        proc_cpu_s(self.pid)
    }

    /// Resident memory in bytes.
    fn rss(&self) -> f64 {
        proc_rss(self.pid).0
    }
}

/// A one-shot HTTP/1.1 request with `Connection: close`; the response body.
async fn http(addr: SocketAddr, method: &str, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read");
    let text = String::from_utf8_lossy(&out).into_owned();
    text.split_once("\r\n\r\n")
        .map(|x| x.1.to_string())
        .unwrap_or_default()
}

#[derive(Default)]
struct Counters {
    opened: AtomicU64,
    streaming: AtomicU64,
    frames: AtomicU64,
    failed: AtomicU64,
    finished: AtomicU64,
}

/// One streaming client: sends the request and counts SSE events (`\n\n`) until the
/// stream ends.
async fn client(addr: SocketAddr, body: Arc<String>, c: Arc<Counters>) {
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        c.failed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let _ = s.set_nodelay(true);
    c.opened.fetch_add(1, Ordering::Relaxed);
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    if s.write_all(head.as_bytes()).await.is_err() || s.write_all(body.as_bytes()).await.is_err() {
        c.failed.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let mut buf = vec![0u8; 4096];
    let mut prev = 0u8;
    let mut first = true;
    let mut seen = 0u64;
    loop {
        let n = match s.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let data = &buf[..n];
        if first {
            if !data.starts_with(b"HTTP/1.1 200") {
                c.failed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            first = false;
        }
        let mut k = u64::from(prev == b'\n' && data[0] == b'\n');
        k += data.windows(2).filter(|w| w == b"\n\n").count() as u64;
        prev = data[n - 1];
        if k > 0 {
            if seen == 0 {
                c.streaming.fetch_add(1, Ordering::Relaxed);
            }
            seen += k;
            c.frames.fetch_add(k, Ordering::Relaxed);
        }
        if data.ends_with(b"data: [DONE]\n\n\r\n") || data.ends_with(b"0\r\n\r\n") {
            break;
        }
    }
    c.finished.fetch_add(1, Ordering::Relaxed);
}

fn spawn_server() -> (Child, SocketAddr) {
    spawn_self_server(&[("GOODPUT_SERVE_SIM_ROLE", "server".to_owned())])
}

fn field(v: &serde_json::Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64().unwrap_or(f64::NAN)
}

// ---------------------------------------------------------------------------------------
// The write floor (this process, before the server starts)

/// A token frame's size on the wire: SSE event plus HTTP chunk header.
const FRAME_BYTES: usize = 180;

/// The time one thread takes to write one `FRAME_BYTES` frame to each of `streams`
/// loopback TCP connections, over `bursts` bursts (the receivers drained between them,
/// unmeasured): (median, best) in microseconds.
fn write_floor(streams: usize, bursts: usize) -> (f64, f64) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    let mut pairs = Vec::with_capacity(streams);
    for _ in 0..streams {
        let tx = std::net::TcpStream::connect(addr).expect("connect");
        let (rx, _) = listener.accept().expect("accept");
        tx.set_nodelay(true).expect("nodelay");
        rx.set_nonblocking(true).expect("nonblocking");
        pairs.push((tx, rx));
    }
    let frame = [b'x'; FRAME_BYTES];
    let mut sink = vec![0u8; 64 * 1024];
    let mut times = Vec::with_capacity(bursts);
    for _ in 0..bursts {
        let t = Instant::now();
        for (tx, _) in &mut pairs {
            tx.write_all(&frame).expect("write");
        }
        times.push(t.elapsed().as_secs_f64() * 1e6);
        for (_, rx) in &mut pairs {
            while let Ok(n) = rx.read(&mut sink) {
                if n == 0 {
                    break;
                }
            }
        }
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[0])
}

fn run_parent() {
    raise_nofile();
    let streams: u64 = env_or("SERVE_SIM_STREAMS", 2000);
    let window_s: f64 = env_or("SERVE_SIM_WINDOW_S", 10.0);
    let step_ms: f64 = env_or("SERVE_SIM_STEP_MS", 19.9);
    let workers: usize = env_or("SERVE_SIM_SERVER_WORKERS", 1);
    let interval: u32 = env_or("SERVE_SIM_STREAM_INTERVAL", 1);
    let (floor_p50, floor_best) = write_floor(streams as usize, 50);
    let (mut child, addr) = spawn_server();
    let server = Proc { pid: child.id() };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    rt.block_on(async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let rss_idle = server.rss();
        // Long enough to outlast ramp-up, warm-up and the window.
        let tokens_per_s = 1000.0 / step_ms;
        let max_tokens = (tokens_per_s * (window_s + 30.0)) as u64;
        let prompt: Vec<u32> = (0..64).map(|i| 1000 + i).collect();
        let body = Arc::new(
            serde_json::json!({
                "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": true, "stream": true,
            })
            .to_string(),
        );
        let counters = Arc::new(Counters::default());
        let ramp = Instant::now();
        for i in 0..streams {
            tokio::spawn(client(addr, body.clone(), counters.clone()));
            // About 1,000 new connections per second: well inside the accept backlog.
            if i % 50 == 49 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        loop {
            let s = counters.streaming.load(Ordering::Relaxed);
            let f = counters.failed.load(Ordering::Relaxed);
            if s + f >= streams {
                break;
            }
            assert!(ramp.elapsed() < Duration::from_secs(60), "streams did not open: {s} streaming, {f} failed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ramp_s = ramp.elapsed().as_secs_f64();
        // Settle, then measure a steady window.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let _ = http(addr, "POST", "/debug/lateness/reset").await;
        let frames0 = counters.frames.load(Ordering::Relaxed);
        let cpu0 = server.cpu_s();
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs_f64(window_s / 2.0)).await;
        let rss_open = server.rss();
        tokio::time::sleep(Duration::from_secs_f64(window_s / 2.0)).await;
        let elapsed = t0.elapsed().as_secs_f64();
        let cpu1 = server.cpu_s();
        let frames1 = counters.frames.load(Ordering::Relaxed);
        let lateness: serde_json::Value =
            serde_json::from_str(&http(addr, "GET", "/debug/lateness").await).expect("lateness JSON");
        let open = counters.opened.load(Ordering::Relaxed);
        let failed = counters.failed.load(Ordering::Relaxed);

        let client_fps = (frames1 - frames0) as f64 / elapsed;
        let server_fps = field(&lateness, &["frames", "count"]) / elapsed;
        let cores = (cpu1 - cpu0) / elapsed;
        let mem_per_stream = (rss_open - rss_idle) / open.max(1) as f64;
        let p50 = field(&lateness, &["frames", "p50_us"]);
        let p99 = field(&lateness, &["frames", "p99_us"]);
        let p999 = field(&lateness, &["frames", "p999_us"]);
        let max = field(&lateness, &["frames", "max_us"]);
        let step_p50 = field(&lateness, &["steps", "p50_us"]);
        let step_p99 = field(&lateness, &["steps", "p99_us"]);
        let step_max = field(&lateness, &["steps", "max_us"]);

        println!("serve-sim bench: {streams} streams, step {step_ms} ms, stream_interval {interval}, server tokio workers {workers}");
        println!("  streams open            {open} ({failed} failed), ramp {ramp_s:.1} s, window {elapsed:.1} s");
        println!("  frames/s (clients)      {client_fps:.0}");
        println!("  frames/s (server)       {server_fps:.0}");
        println!("  frame lateness (us)     p50 {p50:.0}  p99 {p99:.0}  p99.9 {p999:.0}  max {max:.0}");
        println!("  engine wake-up (us)     p50 {step_p50:.0}  p99 {step_p99:.0}  max {step_max:.0}");
        println!("  server CPU              {cores:.2} cores");
        println!("  server memory           {:.1} MiB idle, {:.1} MiB open, {:.1} KiB per stream", rss_idle / 1048576.0, rss_open / 1048576.0, mem_per_stream / 1024.0);
        println!(
            "  write floor (us)        one thread, one {FRAME_BYTES} B frame to each of {streams} connections: median burst {floor_p50:.0} ({:.1} per write), best {floor_best:.0}",
            floor_p50 / streams as f64
        );
        println!("  frame lateness p99 / median write burst: {:.2}", p99 / floor_p50);
        let bar = client_fps >= 100_000.0 && p99 < 2000.0 && cores <= 1.0;
        println!(
            "  bar (>= 100,000 frames/s, p99 < 2 ms, <= 1 core): {}",
            if bar { "met" } else { "NOT met" }
        );
        println!(
            "{}",
            serde_json::json!({
                "streams": streams, "open": open, "failed": failed, "step_ms": step_ms,
                "stream_interval": interval, "server_workers": workers, "window_s": elapsed,
                "client_frames_per_s": client_fps, "server_frames_per_s": server_fps,
                "lateness_us": lateness["frames"], "engine_wakeup_us": lateness["steps"],
                "server_cores": cores, "rss_idle_bytes": rss_idle, "rss_open_bytes": rss_open,
                "bytes_per_stream": mem_per_stream, "bar_met": bar,
                "write_floor_us": {"median_burst": floor_p50, "best_burst": floor_best},
            })
        );
    });
    drop(rt);
    // Closing the server's stdin stops it.
    drop(child.stdin.take());
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn main() {
    if std::env::var("GOODPUT_SERVE_SIM_ROLE").as_deref() == Ok("server") {
        run_server();
    } else {
        run_parent();
    }
}
