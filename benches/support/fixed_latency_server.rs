//! The fixed-latency streaming server of the load generator's benches, shared by
//! `benches/loadgen.rs` and `benches/loadgen_pod.rs` (included with `#[path]`; the including
//! bench declares `mod process` for `support/process.rs`).
//!
//! The server runs in a child process: the bench binary re-executed with [`ROLE_ENV`] set to
//! `server` ([`ServerProc::spawn`]), whose `main` then calls [`run_server`]. It answers
//! `POST /v1/completions` with an OpenAI-style SSE stream, its first token a fixed TTFT
//! after the request arrived and then one token every ITL; `GET /stats` returns what it
//! saw. `benches/loadgen.rs` says at its top how it keeps its own share of the timing out
//! of what the client is measured on.

#![allow(dead_code)]

use std::collections::BinaryHeap;
use std::future::Future;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::process::{env_or, proc_cpu_s, raise_nofile, spawn_self_server};

pub const ROLE_ENV: &str = "GOODPUT_LOADGEN_BENCH_ROLE";
pub const TTFT_ENV: &str = "LOADGEN_BENCH_TTFT_MS";
pub const ITL_ENV: &str = "LOADGEN_BENCH_ITL_MS";

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

pub fn run_server() {
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
// Parent side

/// The fixed-latency server, in a child process.
pub struct ServerProc {
    pub child: Child,
    pub addr: SocketAddr,
}

impl ServerProc {
    pub fn spawn(ttft_ms: f64, itl_ms: f64) -> Self {
        let (child, addr) = spawn_self_server(&[
            (ROLE_ENV, "server".to_owned()),
            (TTFT_ENV, ttft_ms.to_string()),
            (ITL_ENV, itl_ms.to_string()),
        ]);
        ServerProc { child, addr }
    }

    pub fn cpu_s(&self) -> f64 {
        proc_cpu_s(self.child.id())
    }

    pub fn stats(&self) -> Value {
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

    pub fn stop(mut self) {
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

/// The workload manifest of a point against this server: one class (128 input tokens,
/// `output_tokens` out), `requests` scheduled, cutoffs it meets; it passes validation.
pub fn manifest(output_tokens: u32, requests: u64) -> String {
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
