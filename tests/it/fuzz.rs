//! The fuzz targets on the stable toolchain, briefly: every file of a target's committed
//! corpus (`fuzz/corpus/<target>/`), then thousands of inputs mutated from them with a
//! fixed-seed generator (bit flips, byte changes, insertions, deletions, repeats, cuts and
//! splices of two files), each through the target's body in `goodput::fuzzing`. The long
//! runs are libFuzzer's (`fuzz/README.md`); this is how CI runs every target on each change.
//!
//! An input that fails is written to `$CARGO_TARGET_TMPDIR/fuzz-failures/<target>-*` and
//! named in the failure, ready to be added to the corpus as a regression input.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

/// Longest mutated input.
const MAX_LEN: usize = 16 * 1024;

/// Bytes the parsers treat specially, favoured when a byte is written.
const SPECIAL: &[u8] = b"\n\r\t ,;:#\"'{}[]()=&*!|>-+.0123456789eEnN\\\xef\xbb\xbf\xff\x00";

/// The files of `fuzz/corpus/<target>/`, by name.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("a directory entry").path();
            let data = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let name = path.file_name().expect("a file name").to_string_lossy();
            (name.into_owned(), data)
        })
        .collect();
    files.sort();
    files
}

/// A range of `len` bytes: `(start, end)`, possibly empty.
fn range(rng: &mut Pcg64, len: usize) -> (usize, usize) {
    let a = rng.random_range(0..=len);
    let b = rng.random_range(0..=len);
    (a.min(b), a.max(b))
}

fn byte(rng: &mut Pcg64) -> u8 {
    if rng.random_bool(0.5) {
        SPECIAL[rng.random_range(0..SPECIAL.len())]
    } else {
        rng.random()
    }
}

/// One input mutated from the corpus by one to four edits.
fn mutate(rng: &mut Pcg64, files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut data = files[rng.random_range(0..files.len())].1.clone();
    for _ in 0..rng.random_range(1..=4) {
        let len = data.len();
        match rng.random_range(0..8) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                data[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.random_range(0..len);
                data[i] = byte(rng);
            }
            2 => {
                let at = rng.random_range(0..=len);
                let n = rng.random_range(1..=8);
                let bytes: Vec<u8> = (0..n).map(|_| byte(rng)).collect();
                data.splice(at..at, bytes);
            }
            3 => {
                let (a, b) = range(rng, len);
                data.drain(a..b);
            }
            4 => {
                // Repeat a piece (deep nesting, long lines, many rows).
                let (a, b) = range(rng, len.min(64));
                let piece = data[a..b].to_vec();
                let at = rng.random_range(0..=len);
                for _ in 0..rng.random_range(1..=32) {
                    data.splice(at..at, piece.iter().copied());
                }
            }
            5 => data.truncate(rng.random_range(0..=len)),
            6 => {
                // Splice: this file up to a point, another from a point.
                let other = &files[rng.random_range(0..files.len())].1;
                let from = rng.random_range(0..=other.len());
                data.truncate(rng.random_range(0..=len));
                data.extend_from_slice(&other[from..]);
            }
            _ => {
                // A piece of another file inserted anywhere.
                let other = &files[rng.random_range(0..files.len())].1;
                let (a, b) = range(rng, other.len());
                let at = rng.random_range(0..=len);
                data.splice(at..at, other[a..b].iter().copied());
            }
        }
        data.truncate(MAX_LEN);
    }
    data
}

/// Runs `body` on `input`; on a panic, saves the input and fails naming it.
fn run_one(target: &str, body: fn(&[u8]), origin: &str, input: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| body(input))).is_ok() {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
    let saved = std::fs::create_dir_all(&dir)
        .and_then(|()| {
            let path = dir.join(format!("{target}-{}", origin.replace('/', "_")));
            std::fs::write(&path, input).map(|()| path)
        })
        .map_or_else(|e| format!("(not saved: {e})"), |p| p.display().to_string());
    let shown = String::from_utf8_lossy(&input[..input.len().min(2000)]);
    panic!("fuzz target `{target}` failed on {origin}, saved as {saved}:\n{shown:?}");
}

/// The corpus of `target`, then `mutations` mutated inputs (about a second's worth in a
/// debug build); the seed is fixed per target.
fn replay(target: &str, mutations: usize) {
    let (_, body) = goodput::fuzzing::TARGETS
        .iter()
        .copied()
        .find(|(name, _)| *name == target)
        .expect("a target of that name");
    let started = Instant::now();
    let files = corpus(target);
    assert!(!files.is_empty(), "fuzz/corpus/{target} is empty");
    for (name, data) in &files {
        run_one(target, body, &format!("corpus file {name}"), data);
    }
    let seed = target.bytes().fold(0x9e37_79b9_7f4a_7c15_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut rng = Pcg64::seed_from_u64(seed);
    for i in 0..mutations {
        let input = mutate(&mut rng, &files);
        run_one(target, body, &format!("mutation-{i}"), &input);
    }
    eprintln!(
        "fuzz {target}: {} corpus files and {mutations} mutations in {:.2?}",
        files.len(),
        started.elapsed()
    );
}

#[test]
fn every_target_has_a_corpus_and_a_fuzz_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    for (target, _) in goodput::fuzzing::TARGETS {
        let source = root.join("fuzz_targets").join(format!("{target}.rs"));
        let text = std::fs::read_to_string(&source)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", source.display()));
        assert!(
            text.contains(&format!("goodput::fuzzing::{target}(data)")),
            "{} does not call goodput::fuzzing::{target}",
            source.display()
        );
        assert!(!corpus(target).is_empty(), "fuzz/corpus/{target} is empty");
    }
}

#[test]
fn sse() {
    replay("sse", 30_000);
}

#[test]
fn requests_csv() {
    replay("requests_csv", 20_000);
}

#[test]
fn prometheus_text() {
    replay("prometheus_text", 20_000);
}

#[test]
fn manifest_yaml() {
    replay("manifest_yaml", 10_000);
}

#[test]
fn benchmark_yaml() {
    replay("benchmark_yaml", 1_500);
}

#[test]
fn trace_csv() {
    replay("trace_csv", 50_000);
}
