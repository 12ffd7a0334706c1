//! `goodput loadgen` against a fixed-latency streaming server: can the load generator offer
//! the load it is asked to, time it exactly, and do so cheaply?
//!
//! The server runs in a child process (this binary re-executed with
//! `GOODPUT_LOADGEN_BENCH_ROLE=server`): a raw tokio HTTP/1.1 server on one thread that
//! answers `POST /v1/completions` with an OpenAI-style SSE stream, its first token a fixed
//! TTFT after the request arrived and then one token every ITL (`max_tokens` tokens, one
//! SSE frame per HTTP chunk, one write per token unless it fell behind), a
//! `finish_reason: "length"` on the last token, a usage chunk when
//! `stream_options.include_usage`, then `data: [DONE]`. `GET /stats` returns what it saw
//! (requests, their arrival span, tokens, open streams, first-token lateness).
//!
//! Each scenario then runs the real CLI (`goodput loadgen`, release build) as another child
//! process against a fresh server, with a one-class manifest written to a temporary
//! directory, reads its `summary.json` and `requests.csv`, and measures the loadgen process:
//! CPU (utime + stime) from `wait4`'s rusage, peak RSS (`VmHWM`) and RSS over time from
//! `/proc`.
//!
//! Scenarios and bars:
//! 1. open loop, 1,000 req/s, 10,000 requests, 128 in / 32 out, TTFT 20 ms, ITL 5 ms: the
//!    server sees >= 99% of the offered rate, every request succeeds, TTFT P99 within 1 ms
//!    of 20 ms, schedule lag P99 < 1 ms;
//! 2. closed loop, concurrency 2,000, 256 out, ITL 5 ms, 10 s (ideal 400,000 tok/s):
//!    >= 265,000 output tok/s over the steady window, peak in flight = 2,000;
//! 3. 10,000 open streams at 10 tok/s (ITL 100 ms, 100 tokens, so 10 s each; open loop at
//!    2,500 req/s, so all are open from about 4 s to 10 s): tokens/s while all are open
//!    (from a second after the last stream's first token to the first stream's last token)
//!    within 2% of 100,000, client memory < 32 KiB per open stream (peak RSS minus the peak
//!    RSS of a one-request run, over 10,000). A faster ramp (5,000/s) leaves both processes,
//!    and with them the server's token schedule, up to hundreds of ms behind on two cores,
//!    and the catch-up afterwards inflates the window's rate by 1–2%;
//! 4. open loop, 100 req/s for 20 s: the client uses < 0.1 core.
//!
//! The server takes the TTFT from the kernel's arrival stamp of the request
//! (`SO_TIMESTAMPNS`) and its first token is written by a timer thread with 1 ns timer slack
//! and, where allowed, real-time priority, so what the bench reports over 20 ms is the
//! client's (and the machine's) doing, not the stand-in server's; `GET /stats` reports what
//! is left of the server's share (first-token lateness).
//!
//! Token rates are counted exactly: the runs write every inter-token gap (`--record-itl`),
//! so each token's arrival time is known and only tokens inside the window count.
//!
//! Knobs (environment): `LOADGEN_BENCH_ONLY` (comma-separated scenario numbers, e.g. `2,3`),
//! `LOADGEN_BENCH_KEEP` (keep the temporary directory and print its path).
//!
//! Run: `cargo bench --bench loadgen`. Linux only (reads `/proc`, uses `wait4`).

#[path = "support/process.rs"]
mod process;
use process::{env_or, proc_cpu_s, proc_rss, raise_nofile, spawn_self_server};

use std::collections::BinaryHeap;
use std::future::Future;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

const ROLE_ENV: &str = "GOODPUT_LOADGEN_BENCH_ROLE";
const TTFT_ENV: &str = "LOADGEN_BENCH_TTFT_MS";
const ITL_ENV: &str = "LOADGEN_BENCH_ITL_MS";

// ---------------------------------------------------------------------------------------
// Server (child process)

/// A timer thread for the first token. tokio's timer rounds every deadline up to the next
/// millisecond tick (0–1 ms late, 0.5 ms on average), which would eat most of the 1 ms TTFT
/// budget by itself, and waking the runtime thread from another thread costs a context
/// switch more. So this thread sleeps on a condvar (a futex, with the timer slack set to
/// 1 ns) until the earliest deadline and, for each request due, writes its first token to
/// the socket itself, then wakes the request's task for the rest. One wake-up per request;
/// later tokens use tokio's timer, whose rounding does not add up because every token is
/// scheduled from the first one (`first + k·ITL`).
struct PreciseTimer {
    heap: Mutex<BinaryHeap<TimerEntry>>,
    cv: Condvar,
    /// Whether the thread got real-time priority.
    realtime: AtomicBool,
}

/// A write the timer thread makes at the deadline, on the raw socket of a task that is
/// parked on that deadline (so nothing else writes to the socket meanwhile).
struct DueWrite {
    fd: std::os::fd::RawFd,
    bytes: &'static [u8],
    /// `None` until the timer thread wrote (bytes written, or -1) or the sleep was dropped
    /// (-2: the task, and maybe its socket, is gone, so the thread must not write).
    result: Mutex<Option<isize>>,
}

struct TimerEntry {
    due: Instant,
    waker: Waker,
    write: Option<Arc<DueWrite>>,
}

// Ordered by deadline, earliest first (BinaryHeap is a max-heap).
impl PartialEq for TimerEntry {
    fn eq(&self, other: &Self) -> bool {
        self.due == other.due
    }
}
impl Eq for TimerEntry {}
impl PartialOrd for TimerEntry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TimerEntry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.due.cmp(&self.due)
    }
}

impl PreciseTimer {
    fn start(late: Arc<Mutex<hdrhistogram::Histogram<u64>>>) -> Arc<Self> {
        let t = Arc::new(PreciseTimer {
            heap: Mutex::new(BinaryHeap::new()),
            cv: Condvar::new(),
            realtime: AtomicBool::new(false),
        });
        let me = t.clone();
        std::thread::spawn(move || me.run(&late));
        t
    }

    fn run(&self, late: &Mutex<hdrhistogram::Histogram<u64>>) {
        // SAFETY: prctl(PR_SET_TIMERSLACK) on the calling thread; no pointers involved.
        // Without it the kernel may fire our timeouts up to 50 µs late to batch wake-ups.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
        // Real-time priority where allowed (root, or CAP_SYS_NICE), so a woken timer thread
        // runs at once instead of queueing behind the load generator on a busy machine;
        // it only ever runs for a few microseconds at a time. Best effort.
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: sched_setscheduler on the calling thread with a valid param.
        let rt = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0;
        self.realtime.store(rt, Ordering::Relaxed);
        let mut due_now = Vec::new();
        let mut heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            while heap.peek().is_some_and(|e| e.due <= now) {
                if let Some(e) = heap.pop() {
                    due_now.push(e);
                }
            }
            if !due_now.is_empty() {
                drop(heap);
                for e in due_now.drain(..) {
                    if let Some(w) = &e.write {
                        let mut result = w.result.lock().unwrap_or_else(|x| x.into_inner());
                        if result.is_none() {
                            // SAFETY: the fd belongs to a live TcpStream: its task is parked
                            // on this entry and cannot close it without dropping the sleep,
                            // which takes this lock first and marks the entry cancelled.
                            let n = unsafe {
                                libc::write(w.fd, w.bytes.as_ptr().cast(), w.bytes.len())
                            };
                            *result = Some(n);
                            let us = e.due.elapsed().as_micros() as u64;
                            let _ = late.lock().unwrap_or_else(|x| x.into_inner()).record(us);
                        }
                    }
                    e.waker.wake();
                }
                heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
                continue;
            }
            heap = match heap.peek().map(|e| e.due - now) {
                Some(wait) => {
                    self.cv
                        .wait_timeout(heap, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.cv.wait(heap).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }

    /// Resolves once `bytes` were written to `fd` at `due`; the output is what `write`
    /// returned (bytes written, or -1).
    fn write_at(
        &self,
        due: Instant,
        fd: std::os::fd::RawFd,
        bytes: &'static [u8],
    ) -> PreciseWrite<'_> {
        PreciseWrite {
            timer: self,
            due,
            write: Arc::new(DueWrite {
                fd,
                bytes,
                result: Mutex::new(None),
            }),
            registered: false,
        }
    }
}

/// See [`PreciseTimer::write_at`]. Registers the waker once: it is awaited directly by one
/// task, whose waker does not change.
struct PreciseWrite<'a> {
    timer: &'a PreciseTimer,
    due: Instant,
    write: Arc<DueWrite>,
    registered: bool,
}

impl Future for PreciseWrite<'_> {
    type Output = isize;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<isize> {
        if let Some(n) = *self.write.result.lock().unwrap_or_else(|e| e.into_inner()) {
            return Poll::Ready(n);
        }
        if !self.registered {
            self.registered = true;
            let mut heap = self.timer.heap.lock().unwrap_or_else(|e| e.into_inner());
            let earliest = heap.peek().is_none_or(|e| self.due < e.due);
            heap.push(TimerEntry {
                due: self.due,
                waker: cx.waker().clone(),
                write: Some(self.write.clone()),
            });
            drop(heap);
            if earliest {
                self.timer.cv.notify_one();
            }
        }
        Poll::Pending
    }
}

impl Drop for PreciseWrite<'_> {
    fn drop(&mut self) {
        let mut result = self.write.result.lock().unwrap_or_else(|e| e.into_inner());
        if result.is_none() {
            *result = Some(-2);
        }
    }
}

/// What the server saw.
struct Stats {
    started: Instant,
    requests: AtomicU64,
    /// Arrival of the first and last completion request (µs since `started`).
    first_us: AtomicU64,
    last_us: AtomicU64,
    tokens: AtomicU64,
    /// Socket writes that carried tokens (more tokens than writes: it fell behind).
    writes: AtomicU64,
    open: AtomicU64,
    peak_open: AtomicU64,
    /// From a request's arrival at the socket to its parsing here (µs).
    read_delay: Mutex<hdrhistogram::Histogram<u64>>,
    /// Later tokens: write time minus the due time of the first token written (µs).
    token_late: Mutex<hdrhistogram::Histogram<u64>>,
    /// First-token write minus its due time (µs), recorded by the timer thread.
    ttft_late: Arc<Mutex<hdrhistogram::Histogram<u64>>>,
}

impl Stats {
    fn json(&self) -> String {
        let h = self.ttft_late.lock().unwrap_or_else(|e| e.into_inner());
        let r = self.read_delay.lock().unwrap_or_else(|e| e.into_inner());
        let t = self.token_late.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.requests.load(Ordering::Relaxed);
        json!({
            "requests": n,
            "first_s": if n > 0 { self.first_us.load(Ordering::Relaxed) as f64 / 1e6 } else { 0.0 },
            "last_s": self.last_us.load(Ordering::Relaxed) as f64 / 1e6,
            "tokens": self.tokens.load(Ordering::Relaxed),
            "writes": self.writes.load(Ordering::Relaxed),
            "open": self.open.load(Ordering::Relaxed),
            "peak_open": self.peak_open.load(Ordering::Relaxed),
            "first_token_late_us": {
                "p50": h.value_at_quantile(0.5),
                "p99": h.value_at_quantile(0.99),
                "max": h.max(),
            },
            "read_delay_us": {
                "p50": r.value_at_quantile(0.5),
                "p99": r.value_at_quantile(0.99),
                "max": r.max(),
            },
            "token_late_us": {
                "p50": t.value_at_quantile(0.5),
                "p99": t.value_at_quantile(0.99),
                "max": t.max(),
            },
        })
        .to_string()
    }
}

struct Server {
    /// A token's frame as an HTTP chunk (built once: formatting the chunk size for every
    /// token was a few percent of the server's time).
    token_chunk: &'static [u8],
    /// The last token's frame (`finish_reason: "length"`) as an HTTP chunk.
    last_chunk: &'static [u8],
    ttft: Duration,
    itl: Duration,
    timer: Arc<PreciseTimer>,
    stats: Stats,
}

/// One SSE event as one HTTP/1.1 chunk.
fn chunk(out: &mut Vec<u8>, event: &[u8]) {
    let _ = write!(out, "{:x}\r\n", event.len());
    out.extend_from_slice(event);
    out.extend_from_slice(b"\r\n");
}

const TOKEN_EVENT: &[u8] =
    b"data: {\"choices\":[{\"text\":\" tok\",\"index\":0,\"finish_reason\":null}]}\n\n";
const LAST_EVENT: &[u8] =
    b"data: {\"choices\":[{\"text\":\" tok\",\"index\":0,\"finish_reason\":\"length\"}]}\n\n";

#[derive(serde::Deserialize)]
struct CompletionRequest {
    max_tokens: Option<u32>,
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    prompt: Value,
}

#[derive(serde::Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

async fn respond(s: &mut tokio::net::TcpStream, status: &str, ctype: &str, body: &str) -> bool {
    let msg = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(msg.as_bytes()).await.is_ok()
}

/// Streams one completion; false when the client went away.
async fn stream(
    s: &mut tokio::net::TcpStream,
    srv: &Server,
    body: &[u8],
    received: Instant,
) -> bool {
    let _ = srv
        .stats
        .read_delay
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .record(received.elapsed().as_micros() as u64);
    let Ok(req) = serde_json::from_slice::<CompletionRequest>(body) else {
        return respond(
            s,
            "400 Bad Request",
            "application/json",
            r#"{"error":"bad body"}"#,
        )
        .await;
    };
    let st = &srv.stats;
    let at = received.duration_since(st.started).as_micros() as u64;
    st.first_us.fetch_min(at, Ordering::Relaxed);
    st.last_us.fetch_max(at, Ordering::Relaxed);
    st.requests.fetch_add(1, Ordering::Relaxed);
    let open = st.open.fetch_add(1, Ordering::Relaxed) + 1;
    st.peak_open.fetch_max(open, Ordering::Relaxed);
    let n = u64::from(req.max_tokens.unwrap_or(16).max(1));
    let usage = req.stream_options.is_some_and(|o| o.include_usage);
    let prompt_tokens = match &req.prompt {
        Value::Array(a) => a.len(),
        Value::String(t) => t.split_whitespace().count(),
        _ => 0,
    };
    let ok = async {
        s.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
              transfer-encoding: chunked\r\n\r\n",
        )
        .await?;
        let first = received + srv.ttft;
        let mut sent = 0u64;
        if n > 1 {
            // The first token, written by the timer thread at its due time (see
            // `PreciseTimer`); whatever it could not write goes out here.
            let fd = std::os::fd::AsRawFd::as_raw_fd(&*s);
            let written = srv.timer.write_at(first, fd, srv.token_chunk).await;
            let written = usize::try_from(written).unwrap_or(0);
            s.write_all(&srv.token_chunk[written..]).await?;
            st.writes.fetch_add(1, Ordering::Relaxed);
            st.tokens.fetch_add(1, Ordering::Relaxed);
            sent = 1;
            tokio::time::sleep_until((first + srv.itl).into()).await;
        } else {
            tokio::time::sleep_until(first.into()).await;
        }
        let itl_ns = srv.itl.as_nanos().max(1);
        let mut out = Vec::with_capacity(512);
        loop {
            // Every token due by now: one when on time, several when the server fell
            // behind, so its token rate stays ideal and only the client is measured.
            let due = 1 + (first.elapsed().as_nanos() / itl_ns) as u64;
            let upto = due.clamp(sent + 1, n);
            out.clear();
            for i in sent..upto {
                out.extend_from_slice(if i + 1 == n {
                    srv.last_chunk
                } else {
                    srv.token_chunk
                });
            }
            if upto == n {
                if usage {
                    let u = format!(
                        "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt_tokens},\
                         \"completion_tokens\":{n},\"total_tokens\":{}}}}}\n\n",
                        prompt_tokens as u64 + n
                    );
                    chunk(&mut out, u.as_bytes());
                }
                chunk(&mut out, b"data: [DONE]\n\n");
                out.extend_from_slice(b"0\r\n\r\n");
            }
            let due_at = first + srv.itl * (sent as u32);
            let _ = st
                .token_late
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(due_at.elapsed().as_micros() as u64);
            s.write_all(&out).await?;
            st.writes.fetch_add(1, Ordering::Relaxed);
            st.tokens.fetch_add(upto - sent, Ordering::Relaxed);
            sent = upto;
            if sent == n {
                break;
            }
            let next = first + srv.itl * (sent as u32);
            tokio::time::sleep_until(next.into()).await;
        }
        std::io::Result::Ok(())
    }
    .await
    .is_ok();
    st.open.fetch_sub(1, Ordering::Relaxed);
    ok
}

/// Reads what is there into `buf`; with it the kernel's arrival time of the last bytes read
/// (`SO_TIMESTAMPNS`), as an `Instant`, so the TTFT is counted from when the request
/// reached this machine's socket, not from when this thread got round to reading it (on a
/// busy two-core machine that wake-up alone is 0.1 ms on average).
async fn read_stamped(
    s: &tokio::net::TcpStream,
    buf: &mut Vec<u8>,
) -> std::io::Result<(usize, Option<Instant>)> {
    use std::os::fd::AsRawFd;
    buf.reserve(4096);
    loop {
        s.readable().await?;
        let r = s.try_io(tokio::io::Interest::READABLE, || {
            let spare = buf.spare_capacity_mut();
            let mut iov = libc::iovec {
                iov_base: spare.as_mut_ptr().cast(),
                iov_len: spare.len(),
            };
            // Room for one cmsg with a timespec, 8-byte aligned.
            let mut control = [0u64; 8];
            // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&control) as _;
            // SAFETY: recvmsg on an open socket into buffers we own.
            let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut stamp = None;
            // SAFETY: the CMSG_* walk stays inside `control`, as the kernel filled it.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_SOCKET
                        && (*c).cmsg_type == libc::SCM_TIMESTAMPNS
                    {
                        let ts =
                            std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                        stamp = Some(ts);
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
            Ok((n as usize, stamp))
        });
        match r {
            Ok((n, stamp)) => {
                // SAFETY: recvmsg initialised `n` bytes of the spare capacity.
                unsafe { buf.set_len(buf.len() + n) };
                // Realtime stamp to Instant: its age now, taken back from now.
                let at = stamp.and_then(|ts| {
                    let wall =
                        std::time::UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
                    let age = std::time::SystemTime::now()
                        .duration_since(wall)
                        .unwrap_or_default();
                    Instant::now().checked_sub(age)
                });
                return Ok((n, at));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// One keep-alive HTTP/1.1 connection.
async fn connection(mut s: tokio::net::TcpStream, srv: Arc<Server>) {
    let _ = s.set_nodelay(true);
    {
        use std::os::fd::AsRawFd;
        let on: libc::c_int = 1;
        // SAFETY: setsockopt with a valid int option value.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&raw const on).cast(),
                std::mem::size_of_val(&on) as libc::socklen_t,
            );
        }
    }
    let mut buf: Vec<u8> = Vec::new();
    let mut arrived = None;
    loop {
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > 64 * 1024 {
                return;
            }
            match read_stamped(&s, &mut buf).await {
                Ok((0, _)) | Err(_) => return,
                Ok((_, at)) => arrived = at.or(arrived),
            }
        };
        let Ok(head) = std::str::from_utf8(&buf[..head_end]) else {
            return;
        };
        let mut lines = head.split("\r\n");
        let mut first = lines.next().unwrap_or("").split(' ');
        let method = first.next().unwrap_or("").to_owned();
        let path = first.next().unwrap_or("").to_owned();
        let mut length = 0usize;
        let mut close = false;
        for line in lines {
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                } else if k.eq_ignore_ascii_case("connection") {
                    close = v.trim().eq_ignore_ascii_case("close");
                }
            }
        }
        while buf.len() < head_end + length {
            match read_stamped(&s, &mut buf).await {
                Ok((0, _)) | Err(_) => return,
                Ok((_, at)) => arrived = at.or(arrived),
            }
        }
        // When the request's last bytes reached the socket (or, without a stamp, now).
        let received = arrived.take().unwrap_or_else(Instant::now);
        let body = buf[head_end..head_end + length].to_vec();
        buf.drain(..head_end + length);
        let path = path.split('?').next().unwrap_or("");
        let ok = match (method.as_str(), path) {
            ("POST", "/v1/completions") => stream(&mut s, &srv, &body, received).await,
            ("GET", "/stats") => {
                let mut v: Value = serde_json::from_str(&srv.stats.json()).unwrap_or_default();
                v["timer_realtime"] = srv.timer.realtime.load(Ordering::Relaxed).into();
                respond(&mut s, "200 OK", "application/json", &v.to_string()).await
            }
            ("GET", "/metrics") => {
                let text = format!(
                    "# TYPE bench_requests_total counter\nbench_requests_total {}\n",
                    srv.stats.requests.load(Ordering::Relaxed)
                );
                respond(&mut s, "200 OK", "text/plain; version=0.0.4", &text).await
            }
            _ => respond(&mut s, "404 Not Found", "text/plain", "not found").await,
        };
        if !ok || close {
            return;
        }
    }
}

fn run_server() {
    raise_nofile();
    let late = Arc::new(Mutex::new(
        hdrhistogram::Histogram::new(3).expect("histogram"),
    ));
    let (mut token_chunk, mut last_chunk) = (Vec::new(), Vec::new());
    chunk(&mut token_chunk, TOKEN_EVENT);
    chunk(&mut last_chunk, LAST_EVENT);
    let srv = Arc::new(Server {
        token_chunk: token_chunk.leak(),
        last_chunk: last_chunk.leak(),
        ttft: Duration::from_secs_f64(env_or(TTFT_ENV, 20.0) / 1e3),
        itl: Duration::from_secs_f64(env_or(ITL_ENV, 5.0) / 1e3),
        timer: PreciseTimer::start(late.clone()),
        stats: Stats {
            started: Instant::now(),
            requests: AtomicU64::new(0),
            first_us: AtomicU64::new(u64::MAX),
            last_us: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            open: AtomicU64::new(0),
            peak_open: AtomicU64::new(0),
            ttft_late: late,
            read_delay: Mutex::new(hdrhistogram::Histogram::new(3).expect("histogram")),
            token_late: Mutex::new(hdrhistogram::Histogram::new(3).expect("histogram")),
        },
    });
    // One thread serves every connection: the server should cost about what a single
    // engine front end would, and leave the other core to the load generator.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_reuseaddr(true).expect("reuseaddr");
        socket
            .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .expect("bind");
        // A deep accept queue (capped by net.core.somaxconn) so bursts of new
        // connections are not dropped and retried a second later.
        let listener = socket.listen(65_535).expect("listen");
        println!("PORT {}", listener.local_addr().expect("addr").port());
        let _ = std::io::stdout().flush();
        let accept = async {
            loop {
                if let Ok((s, _)) = listener.accept().await {
                    tokio::spawn(connection(s, srv.clone()));
                }
            }
        };
        // Serve until the parent closes our stdin.
        let stdin_closed = tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        });
        tokio::select! {
            () = accept => {}
            _ = stdin_closed => {}
        }
    });
    // Open streams are dropped with the runtime.
    rt.shutdown_background();
}

// ---------------------------------------------------------------------------------------
// Parent: scenarios and measurement

/// The fixed-latency server, in a child process.
struct ServerProc {
    child: Child,
    addr: SocketAddr,
}

impl ServerProc {
    fn spawn(ttft_ms: f64, itl_ms: f64) -> Self {
        let (child, addr) = spawn_self_server(&[
            (ROLE_ENV, "server".to_owned()),
            (TTFT_ENV, ttft_ms.to_string()),
            (ITL_ENV, itl_ms.to_string()),
        ]);
        ServerProc { child, addr }
    }

    fn cpu_s(&self) -> f64 {
        proc_cpu_s(self.child.id())
    }

    fn stats(&self) -> Value {
        let mut s = std::net::TcpStream::connect(self.addr).expect("connect to server");
        let req = format!(
            "GET /stats HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        );
        s.write_all(req.as_bytes()).expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        let body = out.split_once("\r\n\r\n").map_or("", |x| x.1);
        serde_json::from_str(body).expect("stats JSON")
    }

    fn stop(mut self) {
        // Closing the server's stdin stops it.
        drop(self.child.stdin.take());
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A one-class manifest (128 input tokens) that passes validation.
fn manifest(output_tokens: u32, requests: u64) -> String {
    format!(
        "cutoff: 2026-08-29
model:
  id: bench-model
  revision: bench-model-r1
  tokenizer_revision: bench-tokenizer-r1
  precision: bf16
engine:
  name: fixed-latency-bench-server
  version: \"1.0\"
  placement: {{tp: 1, pp: 1, dp: 1, replicas: 1, gpus: 1}}
  prefix_cache: disabled
  speculative_decoding: disabled
  disaggregated_prefill: disabled
client:
  location: bench/loopback
  streaming: true
  arrival_pattern: poisson
  minimum_duration_seconds: 1
  initial_scheduled_requests: {requests}
  request_schedule_seed: 20260829
  class_schedule_counts: {{bench: {requests}}}
  warmup_seconds: 1
workload:
  - {{name: bench, mix: 1.0, input_tokens: 128, output_tokens: {output_tokens},
     request_ttft_cutoff_ms: 500, request_tpot_cutoff_ms: 40}}
acceptance:
  class_slo_attainment_min: 0.95
  min_successful_samples_per_class: 1
  error_rate_max: 0.01
  queue_trend_required: flat
  target_utilization: 0.75
"
    )
}

/// What one loadgen process did and cost.
struct LoadgenRun {
    ok: bool,
    wall_s: f64,
    /// utime + stime from rusage.
    cpu_s: f64,
    /// Peak RSS (bytes): the last `VmHWM` read before the process ended. Not rusage's
    /// `ru_maxrss`: Linux carries the parent's high-water mark over into the child at
    /// `exec` (std spawns with vfork semantics), so after the bench has read a large CSV a
    /// small loadgen would appear to use what the bench does.
    maxrss: f64,
    /// `(s since start, cumulative CPU s, RSS bytes)` every 20 ms, from /proc.
    samples: Vec<(f64, f64, f64)>,
    summary: Value,
    rows: Vec<Row>,
}

/// The columns of `requests.csv` used here.
struct Row {
    ok: bool,
    ttft_ms: f64,
    output_tokens: u64,
    scheduled_s: f64,
    sent_s: f64,
    first_token_s: Option<f64>,
    last_token_s: Option<f64>,
    itl_ms: Vec<f64>,
}

impl Row {
    /// Arrival time (s) of every token counted by the client: the first token, then the
    /// recorded gaps.
    fn token_times(&self) -> impl Iterator<Item = f64> + '_ {
        let mut t = self.first_token_s.unwrap_or(f64::NAN);
        std::iter::once(t).chain(self.itl_ms.iter().map(move |g| {
            t += g / 1e3;
            t
        }))
    }
}

fn read_rows(path: &Path) -> Vec<Row> {
    let mut r = csv::Reader::from_path(path).expect("requests.csv");
    let header = r.headers().expect("header").clone();
    let col = |name: &str| header.iter().position(|h| h == name);
    let need = |name: &str| col(name).unwrap_or_else(|| panic!("no column {name}"));
    let (status, ttft, out, sched, sent, first, last) = (
        need("status"),
        need("ttft_ms"),
        need("output_tokens"),
        need("scheduled_s"),
        need("sent_s"),
        need("first_token_s"),
        need("last_token_s"),
    );
    let itl = col("itl_ms");
    let num = |rec: &csv::StringRecord, i: usize| rec.get(i).and_then(|v| v.parse::<f64>().ok());
    r.records()
        .map(|rec| {
            let rec = rec.expect("CSV row");
            Row {
                ok: rec.get(status) == Some("ok"),
                ttft_ms: num(&rec, ttft).unwrap_or(0.0),
                output_tokens: num(&rec, out).unwrap_or(0.0) as u64,
                scheduled_s: num(&rec, sched).unwrap_or(0.0),
                sent_s: num(&rec, sent).unwrap_or(0.0),
                first_token_s: num(&rec, first),
                last_token_s: num(&rec, last),
                itl_ms: itl
                    .and_then(|i| rec.get(i))
                    .map(|v| v.split(';').filter_map(|g| g.parse().ok()).collect())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// Runs `goodput loadgen` with `args` (whitespace-separated; target, manifest, model and
/// output directory are added) and measures it; it is killed after `limit`.
fn run_loadgen(
    dir: &Path,
    name: &str,
    server: &ServerProc,
    manifest_text: &str,
    args: &str,
    limit: Duration,
) -> LoadgenRun {
    let out = dir.join(name);
    std::fs::create_dir_all(&out).expect("output directory");
    let manifest_path = dir.join(format!("{name}.yaml"));
    std::fs::write(&manifest_path, manifest_text).expect("manifest");
    let log_path = dir.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path).expect("log file");
    let target = format!("http://{}", server.addr);
    let t0 = Instant::now();
    // Reaped by the wait4 loop below (for its rusage), not by `Child::wait`.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new(env!("CARGO_BIN_EXE_goodput"))
        .arg("loadgen")
        .args(["--target", &target, "--model", "bench-model", "--quiet"])
        .arg("--manifest")
        .arg(&manifest_path)
        .arg("--out")
        .arg(&out)
        .args(args.split_whitespace())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("goodput loadgen starts");
    let pid = child.id();
    let mut samples = Vec::new();
    let mut maxrss = 0.0f64;
    let mut killed = false;
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 on our own child with valid out-pointers; after it reaps the
        // child, `child` is never waited on or signalled again.
        let r = unsafe { libc::wait4(pid as i32, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid as i32 {
            break (status, usage);
        }
        assert!(r == 0, "wait4 failed: {}", std::io::Error::last_os_error());
        if !killed && t0.elapsed() > limit {
            eprintln!("loadgen {name}: still running after {limit:?}; killing it");
            let _ = child.kill();
            killed = true;
        }
        let (rss, hwm) = proc_rss(pid);
        // The high-water mark only grows: the last reading before exit is the peak, short
        // of whatever was allocated in the last 20 ms (the run's files, written at the end).
        maxrss = maxrss.max(hwm);
        samples.push((t0.elapsed().as_secs_f64(), proc_cpu_s(pid), rss));
        std::thread::sleep(Duration::from_millis(20));
    };
    let wall_s = t0.elapsed().as_secs_f64();
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if !ok {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        eprintln!("loadgen {name} failed (wait status {status}); its log:\n{log}");
    }
    let summary = std::fs::read_to_string(out.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let rows = if out.join("requests.csv").exists() {
        read_rows(&out.join("requests.csv"))
    } else {
        Vec::new()
    };
    LoadgenRun {
        ok,
        wall_s,
        cpu_s: tv(usage.ru_utime) + tv(usage.ru_stime),
        maxrss,
        samples,
        summary,
        rows,
    }
}

/// Nearest-rank percentile of `v` (sorted in place); NaN when empty.
fn pct(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn num(v: &Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(v, |x, p| &x[*p])
        .as_f64()
        .unwrap_or(f64::NAN)
}

/// Tokens the client received inside `[a, b]` (s since the run's start).
fn tokens_in(rows: &[Row], a: f64, b: f64) -> u64 {
    rows.iter()
        .filter(|r| r.ok)
        .map(|r| r.token_times().filter(|t| *t >= a && *t <= b).count() as u64)
        .sum()
}

/// One printed figure with its bar.
struct Figure {
    scenario: &'static str,
    name: &'static str,
    value: String,
    bar: String,
    met: Option<bool>,
}

struct Report {
    figures: Vec<Figure>,
    json: serde_json::Map<String, Value>,
}

impl Report {
    fn fig(&mut self, scenario: &'static str, name: &'static str, value: String) {
        self.figures.push(Figure {
            scenario,
            name,
            value,
            bar: String::new(),
            met: None,
        });
    }

    fn bar(
        &mut self,
        scenario: &'static str,
        name: &'static str,
        value: String,
        bar: &str,
        met: bool,
    ) {
        self.figures.push(Figure {
            scenario,
            name,
            value,
            bar: bar.to_owned(),
            met: Some(met),
        });
    }
}

/// The server's lateness on tokens after the first, and tokens per socket write, as
/// printed: when the machine is saturated the server falls behind and sends the tokens
/// due in one write (several SSE frames), which keeps its token rate.
fn token_lateness(st: &Value) -> String {
    let t = &st["token_late_us"];
    format!(
        "p50 {} / p99 {} / max {} us; {:.2} tokens per write",
        t["p50"],
        t["p99"],
        t["max"],
        num(st, &["tokens"]) / num(st, &["writes"])
    )
}

fn server_cpu_cores(server: &ServerProc, cpu0: f64, run: &LoadgenRun) -> f64 {
    (server.cpu_s() - cpu0) / run.wall_s
}

fn scenario_open_1000(dir: &Path, rep: &mut Report) {
    const S: &str = "1 open 1000/s";
    let rate = 1000.0;
    let requests = 10_000u64;
    let server = ServerProc::spawn(20.0, 5.0);
    let cpu0 = server.cpu_s();
    let run = run_loadgen(
        dir,
        "open-1000",
        &server,
        &manifest(32, requests),
        "--mode rate --rate 1000 --requests 10000 --warmup-s 0 --min-duration-s 1 --max-blocks 1",
        Duration::from_secs(60),
    );
    let server_cores = server_cpu_cores(&server, cpu0, &run);
    let st = server.stats();
    server.stop();

    let attempted = run.rows.len() as u64;
    let ok = run.rows.iter().filter(|r| r.ok).count() as u64;
    let mut ttft: Vec<f64> = run
        .rows
        .iter()
        .filter(|r| r.ok)
        .map(|r| r.ttft_ms)
        .collect();
    let ttft_p50 = pct(&mut ttft, 0.5);
    let ttft_p99 = pct(&mut ttft, 0.99);
    let ttft_max = pct(&mut ttft, 1.0);
    let mut lag: Vec<f64> = run
        .rows
        .iter()
        .map(|r| ((r.sent_s - r.scheduled_s) * 1e3).max(0.0))
        .collect();
    // TTFT less the schedule lag: from the actual send to the first token.
    let mut from_send: Vec<f64> = run
        .rows
        .iter()
        .filter(|r| r.ok)
        .map(|r| r.ttft_ms - ((r.sent_s - r.scheduled_s) * 1e3).max(0.0))
        .collect();
    let send_p50 = pct(&mut from_send, 0.5);
    let send_p99 = pct(&mut from_send, 0.99);
    let lag_p50 = pct(&mut lag, 0.5);
    let lag_p99 = pct(&mut lag, 0.99);
    let lag_max = pct(&mut lag, 1.0);
    // The rate the schedule offered (its own Poisson draw, not the nominal 1,000/s, which a
    // 10,000-request sample misses by about 1% either way) against the rate at which
    // requests reached the server, both as (n - 1) gaps over the span.
    let sched_min = run
        .rows
        .iter()
        .map(|r| r.scheduled_s)
        .fold(f64::INFINITY, f64::min);
    let sched_max = run.rows.iter().map(|r| r.scheduled_s).fold(0.0, f64::max);
    let offered = (attempted as f64 - 1.0) / (sched_max - sched_min);
    let seen_n = num(&st, &["requests"]);
    let seen = (seen_n - 1.0) / (num(&st, &["last_s"]) - num(&st, &["first_s"]));
    let ratio = seen / offered;

    rep.fig(
        S,
        "offered (schedule) / nominal",
        format!("{offered:.1} / {rate:.0} req/s"),
    );
    rep.bar(
        S,
        "server-seen rate",
        format!(
            "{seen:.1} req/s ({:.2}% of offered; {seen_n} requests)",
            ratio * 100.0
        ),
        ">= 99% of offered",
        ratio >= 0.99 && seen_n as u64 == requests,
    );
    rep.bar(
        S,
        "successes",
        format!("{ok} / {attempted} (of {requests})"),
        "all succeed",
        run.ok && ok == requests && attempted == requests,
    );
    rep.bar(
        S,
        "TTFT p50 / p99 / max",
        format!("{ttft_p50:.3} / {ttft_p99:.3} / {ttft_max:.3} ms"),
        "p99 within 1 ms of 20 ms",
        (ttft_p99 - 20.0).abs() <= 1.0,
    );
    rep.bar(
        S,
        "schedule lag p50 / p99 / max",
        format!("{lag_p50:.3} / {lag_p99:.3} / {lag_max:.3} ms"),
        "p99 < 1 ms",
        lag_p99 < 1.0,
    );
    rep.fig(
        S,
        "send-to-first-token p50 / p99",
        format!("{send_p50:.3} / {send_p99:.3} ms (TTFT less the lag)"),
    );
    let late = &st["first_token_late_us"];
    rep.fig(
        S,
        "server first-token lateness",
        format!(
            "p50 {} / p99 {} / max {} us (real-time timer: {})",
            late["p50"], late["p99"], late["max"], st["timer_realtime"]
        ),
    );
    let rd = &st["read_delay_us"];
    rep.fig(
        S,
        "server arrival-to-read delay",
        format!(
            "p50 {} / p99 {} / max {} us (not in the TTFT)",
            rd["p50"], rd["p99"], rd["max"]
        ),
    );
    rep.fig(
        S,
        "client CPU / peak RSS",
        format!(
            "{:.3} cores ({:.2} s over {:.1} s) / {:.1} MiB",
            run.cpu_s / run.wall_s,
            run.cpu_s,
            run.wall_s,
            run.maxrss / 1048576.0
        ),
    );
    rep.fig(S, "server CPU", format!("{server_cores:.3} cores"));
    rep.json.insert(
        "open_1000".into(),
        json!({
            "requests": requests, "attempted": attempted, "successful": ok,
            "nominal_rps": rate, "offered_rps": offered, "server_seen_rps": seen,
            "server_seen_ratio": ratio, "server_requests": seen_n,
            "ttft_ms": {"p50": ttft_p50, "p99": ttft_p99, "max": ttft_max},
            "schedule_lag_ms": {"p50": lag_p50, "p99": lag_p99, "max": lag_max},
            "send_to_first_token_ms": {"p50": send_p50, "p99": send_p99},
            "summary_schedule_lag_ms": run.summary["client"]["schedule_lag_ms"],
            "server_first_token_late_us": late, "server_read_delay_us": rd,
            "server_timer_realtime": st["timer_realtime"],
            "client_cpu_s": run.cpu_s, "client_wall_s": run.wall_s,
            "client_cores": run.cpu_s / run.wall_s, "client_peak_rss_bytes": run.maxrss,
            "server_cores": server_cores,
        }),
    );
}

fn scenario_closed_2000(dir: &Path, rep: &mut Report) {
    const S: &str = "2 closed 2000";
    let concurrency = 2000.0;
    let duration = 10.0;
    let server = ServerProc::spawn(20.0, 5.0);
    let cpu0 = server.cpu_s();
    let run = run_loadgen(
        dir,
        "closed-2000",
        &server,
        &manifest(256, 2000),
        "--mode concurrency --concurrency 2000 --duration-s 10 --warmup-s 0 --requests 2000 \
         --record-itl",
        Duration::from_secs(90),
    );
    let server_cores = server_cpu_cores(&server, cpu0, &run);
    let st = server.stats();
    server.stop();

    let attempted = run.rows.len() as u64;
    let ok = run.rows.iter().filter(|r| r.ok).count() as u64;
    // Steady window: every worker has a request in flight from the first send until the
    // end of the duration; the first second is left out as ramp-up.
    let (a, b) = (1.0, duration);
    let tps = tokens_in(&run.rows, a, b) as f64 / (b - a);
    // The summary's own figure: every success's tokens over the window (counts the tail of
    // requests still running after the duration, so a little above the steady rate).
    let all_tokens: u64 = run
        .rows
        .iter()
        .filter(|r| r.ok)
        .map(|r| r.output_tokens)
        .sum();
    let window_s = num(&run.summary, &["client", "window_s"]);
    let peak = num(&run.summary, &["client", "peak_in_flight"]);
    let ideal = concurrency * 1000.0 / 5.0;
    rep.bar(
        S,
        "output tok/s, steady [1 s, 10 s]",
        format!("{tps:.0} ({:.1}% of ideal {ideal:.0})", tps / ideal * 100.0),
        ">= 265,000",
        tps >= 265_000.0,
    );
    rep.fig(
        S,
        "tokens of successes / window_s",
        format!("{:.0} tok/s", all_tokens as f64 / window_s),
    );
    rep.bar(
        S,
        "peak in flight",
        format!("{peak:.0}"),
        "= 2,000",
        peak == concurrency,
    );
    rep.fig(S, "requests ok / attempted", format!("{ok} / {attempted}"));
    rep.fig(
        S,
        "client CPU / peak RSS",
        format!(
            "{:.2} cores / {:.1} MiB",
            run.cpu_s / run.wall_s,
            run.maxrss / 1048576.0
        ),
    );
    rep.fig(S, "server CPU", format!("{server_cores:.2} cores"));
    rep.fig(S, "server token lateness", token_lateness(&st));
    rep.json.insert(
        "closed_2000".into(),
        json!({
            "concurrency": concurrency, "duration_s": duration, "ideal_tps": ideal,
            "steady_window_s": [a, b], "steady_tps": tps,
            "tokens_over_window_tps": all_tokens as f64 / window_s,
            "peak_in_flight": peak, "attempted": attempted, "successful": ok,
            "server_tokens": st["tokens"], "server_requests": st["requests"],
            "server_token_late_us": st["token_late_us"],
            "server_tokens_per_write": num(&st, &["tokens"]) / num(&st, &["writes"]),
            "client_cpu_s": run.cpu_s, "client_wall_s": run.wall_s,
            "client_cores": run.cpu_s / run.wall_s, "client_peak_rss_bytes": run.maxrss,
            "server_cores": server_cores,
        }),
    );
}

fn scenario_open_streams(dir: &Path, rep: &mut Report) {
    const S: &str = "3 10k streams";
    let streams = 10_000u64;
    let server = ServerProc::spawn(20.0, 100.0);
    // The baseline: the same process with a single one-token request.
    let base = run_loadgen(
        dir,
        "streams-baseline",
        &server,
        &manifest(1, 1),
        "--mode rate --rate 10 --requests 1 --warmup-s 0 --min-duration-s 0.001 --max-blocks 1",
        Duration::from_secs(30),
    );
    let cpu0 = server.cpu_s();
    let run = run_loadgen(
        dir,
        "streams-10k",
        &server,
        // 100 tokens: the client keeps every inter-token gap (8 bytes each, allocated up
        // front for max_tokens - 1 of them, up to 1,024), so its memory per stream grows
        // with the output length (about +0.4 KiB at 150 tokens, +7 KiB at 1,024).
        &manifest(100, streams),
        "--mode rate --rate 2500 --requests 10000 --warmup-s 0 --min-duration-s 1 --max-blocks 1 \
         --record-itl",
        Duration::from_secs(90),
    );
    let server_cores = server_cpu_cores(&server, cpu0, &run);
    let st = server.stats();
    server.stop();

    let ok = run.rows.iter().filter(|r| r.ok).count() as u64;
    let succ = || run.rows.iter().filter(|r| r.ok);
    // While every stream is open: from the last first token to the first last token,
    // less a first second in which the client may still be delivering frames it fell
    // behind on while opening streams (counting those would flatter the rate).
    let all_open = succ()
        .filter_map(|r| r.first_token_s)
        .fold(f64::NEG_INFINITY, f64::max);
    let a = all_open + 1.0;
    let b = succ()
        .filter_map(|r| r.last_token_s)
        .fold(f64::INFINITY, f64::min);
    let tps = if b > a {
        tokens_in(&run.rows, a, b) as f64 / (b - a)
    } else {
        f64::NAN
    };
    let ideal = streams as f64 * 10.0;
    let dev = (tps - ideal).abs() / ideal;
    let peak = num(&run.summary, &["client", "peak_in_flight"]);
    let per_stream = (run.maxrss - base.maxrss) / streams as f64;
    // RSS sampled while every stream was open, for comparison with the peak.
    let rss_open = run
        .samples
        .iter()
        .filter(|s| s.0 >= a && s.0 <= b)
        .map(|s| s.2)
        .fold(0.0, f64::max);
    rep.bar(
        S,
        "tokens/s while all open",
        format!(
            "{tps:.0} over [{a:.2} s, {b:.2} s] ({:+.2}% of ideal {ideal:.0})",
            (tps / ideal - 1.0) * 100.0
        ),
        "within 2% of 100,000",
        dev <= 0.02,
    );
    rep.bar(
        S,
        "client memory per open stream",
        format!(
            "{:.1} KiB (peak RSS {:.1} MiB, {:.1} MiB while all open; baseline {:.1} MiB)",
            per_stream / 1024.0,
            run.maxrss / 1048576.0,
            rss_open / 1048576.0,
            base.maxrss / 1048576.0
        ),
        "< 32 KiB",
        per_stream < 32.0 * 1024.0 && run.ok && base.ok,
    );
    let mut lag: Vec<f64> = run
        .rows
        .iter()
        .map(|r| ((r.sent_s - r.scheduled_s) * 1e3).max(0.0))
        .collect();
    let mut ttft: Vec<f64> = succ().map(|r| r.ttft_ms).collect();
    let (lag_p50, lag_p99) = (pct(&mut lag, 0.5), pct(&mut lag, 0.99));
    let (ttft_p50, ttft_p99) = (pct(&mut ttft, 0.5), pct(&mut ttft, 0.99));
    rep.fig(
        S,
        "ramp at 2,500 new streams/s",
        format!(
            "lag p50 {lag_p50:.2} / p99 {lag_p99:.1} ms, \
             TTFT p50 {ttft_p50:.1} / p99 {ttft_p99:.1} ms"
        ),
    );
    rep.fig(
        S,
        "streams ok / peak in flight",
        format!("{ok} / {peak:.0} (server peak open {})", st["peak_open"]),
    );
    rep.fig(
        S,
        "client CPU / server CPU",
        format!("{:.2} / {server_cores:.2} cores", run.cpu_s / run.wall_s),
    );
    rep.fig(S, "server token lateness", token_lateness(&st));
    rep.json.insert(
        "streams_10k".into(),
        json!({
            "streams": streams, "successful": ok, "peak_in_flight": peak,
            "server_peak_open": st["peak_open"], "all_open_s": all_open,
            "window_s": [a, b], "tps": tps,
            "schedule_lag_ms": {"p50": lag_p50, "p99": lag_p99},
            "ttft_ms": {"p50": ttft_p50, "p99": ttft_p99},
            "ideal_tps": ideal, "deviation": dev,
            "client_peak_rss_bytes": run.maxrss, "baseline_peak_rss_bytes": base.maxrss,
            "rss_sampled_while_open_bytes": rss_open, "bytes_per_stream": per_stream,
            "client_cpu_s": run.cpu_s, "client_wall_s": run.wall_s,
            "client_cores": run.cpu_s / run.wall_s, "server_cores": server_cores,
            "server_token_late_us": st["token_late_us"],
            "server_tokens_per_write": num(&st, &["tokens"]) / num(&st, &["writes"]),
        }),
    );
}

fn scenario_open_100(dir: &Path, rep: &mut Report) {
    const S: &str = "4 open 100/s";
    let server = ServerProc::spawn(20.0, 5.0);
    let cpu0 = server.cpu_s();
    let run = run_loadgen(
        dir,
        "open-100",
        &server,
        &manifest(32, 2000),
        "--mode rate --rate 100 --requests 2000 --warmup-s 0 --min-duration-s 1 --max-blocks 1",
        Duration::from_secs(60),
    );
    let server_cores = server_cpu_cores(&server, cpu0, &run);
    server.stop();
    let ok = run.rows.iter().filter(|r| r.ok).count();
    let cores = run.cpu_s / run.wall_s;
    // The same over the middle of the run only (no start-up, no CSV writing).
    let mid: Vec<_> = run
        .samples
        .iter()
        .filter(|s| s.0 >= 2.0 && s.0 <= run.wall_s - 2.0)
        .collect();
    let steady = match (mid.first(), mid.last()) {
        (Some(x), Some(y)) if y.0 > x.0 => (y.1 - x.1) / (y.0 - x.0),
        _ => f64::NAN,
    };
    rep.bar(
        S,
        "client CPU, whole process",
        format!(
            "{cores:.4} cores ({:.3} s over {:.1} s)",
            run.cpu_s, run.wall_s
        ),
        "< 0.1 core",
        cores < 0.1 && run.ok,
    );
    rep.fig(
        S,
        "client CPU, steady (/proc)",
        format!("{steady:.4} cores"),
    );
    rep.fig(
        S,
        "successes / peak RSS",
        format!("{ok} / 2000, {:.1} MiB", run.maxrss / 1048576.0),
    );
    rep.fig(S, "server CPU", format!("{server_cores:.3} cores"));
    rep.json.insert(
        "open_100".into(),
        json!({
            "requests": 2000, "successful": ok, "client_cpu_s": run.cpu_s,
            "client_wall_s": run.wall_s, "client_cores": cores, "client_steady_cores": steady,
            "client_peak_rss_bytes": run.maxrss, "server_cores": server_cores,
        }),
    );
}

type Scenario = fn(&Path, &mut Report);

fn run_parent() {
    raise_nofile();
    let only: Option<Vec<u32>> = std::env::var("LOADGEN_BENCH_ONLY")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect());
    let want = |n: u32| only.as_ref().is_none_or(|o| o.contains(&n));
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = tmp.path().to_path_buf();
    let mut rep = Report {
        figures: Vec::new(),
        json: serde_json::Map::new(),
    };
    let t0 = Instant::now();
    let scenarios: [(u32, Scenario); 4] = [
        (1, scenario_open_1000),
        (2, scenario_closed_2000),
        (3, scenario_open_streams),
        (4, scenario_open_100),
    ];
    for (n, f) in scenarios {
        if want(n) {
            eprintln!(
                "loadgen bench: scenario {n} ({:.0} s so far)",
                t0.elapsed().as_secs_f64()
            );
            f(&dir, &mut rep);
        }
    }

    println!(
        "loadgen bench: goodput loadgen vs a fixed-latency server on 127.0.0.1 ({:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    let w0 = rep
        .figures
        .iter()
        .map(|f| f.scenario.len())
        .max()
        .unwrap_or(0);
    let w1 = rep.figures.iter().map(|f| f.name.len()).max().unwrap_or(0);
    let w2 = rep.figures.iter().map(|f| f.value.len()).max().unwrap_or(0);
    for f in &rep.figures {
        let verdict = match f.met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "",
        };
        println!(
            "  {:w0$}  {:w1$}  {:w2$}  {:26}  {verdict}",
            f.scenario, f.name, f.value, f.bar
        );
    }
    let bars: Vec<Value> = rep
        .figures
        .iter()
        .filter_map(|f| {
            f.met.map(|m| {
                json!({"scenario": f.scenario, "figure": f.name, "value": f.value,
                       "bar": f.bar, "met": m})
            })
        })
        .collect();
    let all_met = rep.figures.iter().all(|f| f.met != Some(false));
    println!("  all bars: {}", if all_met { "met" } else { "NOT met" });
    rep.json.insert("bars".into(), Value::Array(bars));
    rep.json.insert("all_bars_met".into(), Value::Bool(all_met));
    println!("{}", Value::Object(rep.json));
    if std::env::var_os("LOADGEN_BENCH_KEEP").is_some() {
        let kept = tmp.keep();
        eprintln!("loadgen bench: files kept in {}", kept.display());
    }
}

fn main() {
    if std::env::var(ROLE_ENV).as_deref() == Ok("server") {
        run_server();
    } else {
        run_parent();
    }
}
