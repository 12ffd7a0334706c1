//! Prompt synthesis. By default a prompt is an array of token ids of exactly the scheduled
//! length (the OpenAI completions API accepts them, and the engine then sees exactly that
//! many input tokens; no tokenizer is involved). Chat needs text: words are generated and
//! their count calibrated once per point (CLI, bench and Job alike) against the server's
//! `/tokenize` when it has one, else estimated at 0.75 words per token; the method is
//! reported with the results.
//!
//! Cache state is part of the experiment:
//! - `cold`: every prompt starts with tokens unique to the request (seeded by the schedule
//!   seed and the request index), so no prefix is shared and the prefix-cache hit rate
//!   should stay near zero;
//! - `warm`: prompts start with one of a pinned pool of shared prefixes (the schedule draws
//!   which, with a fixed popularity), followed by unique tokens; a prewarm phase sends every
//!   prefix once before measurement starts.

use serde::{Deserialize, Serialize};

use super::Prompt;
use goodput_core::workload::hashing::{GOLDEN_GAMMA, mix64};

/// The token ids a prompt is drawn from: `lo..hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRange {
    /// Lowest id drawn.
    pub lo: u32,
    /// One past the highest id drawn.
    pub hi: u32,
}

impl TokenRange {
    /// Away from the special tokens most vocabularies put at the start and the end, and
    /// inside every vocabulary of 30,000 ids or more.
    pub const DEFAULT: TokenRange = TokenRange {
        lo: 1000,
        hi: 30_000,
    };

    /// The default range cut to a vocabulary of `size` ids: ids at or past `size` are
    /// refused by the engine ("out of vocabulary"); the low end keeps clear of the first
    /// eighth, where the special tokens usually are.
    pub fn within(size: u32) -> TokenRange {
        let hi = size.min(Self::DEFAULT.hi);
        let lo = Self::DEFAULT.lo.min(hi / 8);
        TokenRange {
            lo,
            hi: hi.max(lo + 1),
        }
    }

    /// Whether the default range fits inside a vocabulary of `size` ids.
    pub fn fits(self, size: u32) -> bool {
        self.hi <= size
    }
}

impl Default for TokenRange {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl std::fmt::Display for TokenRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}–{}", self.lo, self.hi - 1)
    }
}

/// How prompts were made, as reported in the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptMethod {
    /// Token-id arrays of exact length.
    TokenIds,
    /// Text whose length was calibrated with the server's `/tokenize`.
    TextCalibrated,
    /// Text at an assumed 0.75 words per token (no tokenizer available).
    TextEstimated,
}

/// One well-mixed 64-bit value per (seed, stream, position); prompt tokens need no more
/// than that and must be cheap to regenerate on the hot path.
fn mix(seed: u64, stream: u64, position: u64) -> u64 {
    mix64(seed ^ stream.wrapping_mul(GOLDEN_GAMMA) ^ position.wrapping_mul(0xD1B5_4A32_D192_ED03))
}

fn token(range: TokenRange, seed: u64, stream: u64, position: u64) -> u32 {
    range.lo + (mix(seed, stream, position) % u64::from(range.hi - range.lo)) as u32
}

/// Streams: shared prefix `p` uses `p`, request `i`'s unique part uses `2^63 + i`.
const UNIQUE: u64 = 1 << 63;

/// Token ids of one prompt, drawn from `range`: `input_tokens` long; in warm mode it starts
/// with shared prefix `prefix` (`prefix_tokens` long, capped one below the prompt length).
pub fn prompt_tokens(
    range: TokenRange,
    seed: u64,
    index: u64,
    input_tokens: u32,
    prefix: Option<(u32, u32)>,
) -> Vec<u32> {
    let n = input_tokens.max(1);
    let shared = prefix.map_or(0, |(_, len)| len.min(n - 1));
    let mut out = Vec::with_capacity(n as usize);
    if let Some((p, _)) = prefix {
        out.extend((0..shared).map(|k| token(range, seed, u64::from(p), u64::from(k))));
    }
    out.extend((shared..n).map(|k| token(range, seed, UNIQUE | index, u64::from(k))));
    out
}

/// Words used for text prompts (short, common, one or two tokens each in most tokenizers).
const WORDS: [&str; 16] = [
    "the", "model", "serves", "tokens", "under", "load", "while", "every", "class", "meets", "its",
    "latency", "target", "with", "spare", "capacity",
];

/// A text prompt of `words` words, unique to the request unless it shares a prefix.
pub fn prompt_text(seed: u64, index: u64, words: u32, prefix: Option<(u32, u32)>) -> String {
    let tokens = prompt_tokens(TokenRange::DEFAULT, seed, index, words, prefix);
    let mut s = String::with_capacity(tokens.len() * 7);
    for (i, t) in tokens.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[(*t as usize) % WORDS.len()]);
    }
    s
}

/// Builds the prompt of one request: token ids from `range`, or text of as many words as the
/// scheduled length less the chat template's tokens.
#[allow(clippy::too_many_arguments)]
pub fn build_prompt(
    text: bool,
    words_per_token: f64,
    range: TokenRange,
    template_tokens: u32,
    seed: u64,
    index: u64,
    input_tokens: u32,
    prefix: Option<(u32, u32)>,
) -> Prompt {
    if text {
        // The chat template's own tokens are part of what the server counts.
        let body = input_tokens.saturating_sub(template_tokens).max(1);
        let words = ((f64::from(body) * words_per_token).round() as u32).max(1);
        let prefix_words =
            prefix.map(|(p, len)| (p, ((f64::from(len) * words_per_token) as u32).max(1)));
        Prompt::Text(prompt_text(seed, index, words, prefix_words))
    } else {
        Prompt::Tokens(prompt_tokens(range, seed, index, input_tokens, prefix))
    }
}

/// Words per token when the server has no tokenizer endpoint (about 0.75 for English text
/// and the common BPE vocabularies).
pub const ESTIMATED_WORDS_PER_TOKEN: f64 = 0.75;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_length_unique_unless_shared() {
        let a = prompt_tokens(TokenRange::DEFAULT, 7, 1, 1024, None);
        let b = prompt_tokens(TokenRange::DEFAULT, 7, 2, 1024, None);
        assert_eq!(a.len(), 1024);
        assert_ne!(a[..16], b[..16]);
        assert_eq!(a, prompt_tokens(TokenRange::DEFAULT, 7, 1, 1024, None));
        assert!(a.iter().all(|t| (1000..30_000).contains(t)));
        // Inside a small vocabulary, every id is one the engine knows.
        let small = TokenRange::within(8192);
        assert_eq!(small, TokenRange { lo: 1000, hi: 8192 });
        assert!(!TokenRange::DEFAULT.fits(8192) && TokenRange::DEFAULT.fits(32_000));
        let s = prompt_tokens(small, 7, 1, 4096, None);
        assert!(s.iter().all(|t| (1000..8192).contains(t)), "{s:?}");
        assert_eq!(TokenRange::within(100), TokenRange { lo: 12, hi: 100 });
        assert!(TokenRange::within(1).hi > TokenRange::within(1).lo);

        let w1 = prompt_tokens(TokenRange::DEFAULT, 7, 1, 1024, Some((3, 512)));
        let w2 = prompt_tokens(TokenRange::DEFAULT, 7, 2, 1024, Some((3, 512)));
        assert_eq!(w1[..512], w2[..512]);
        assert_ne!(w1[512..528], w2[512..528]);
        // A prefix never covers the whole prompt.
        assert_eq!(
            prompt_tokens(TokenRange::DEFAULT, 7, 1, 100, Some((3, 512)))[..99],
            prompt_tokens(TokenRange::DEFAULT, 7, 9, 100, Some((3, 512)))[..99]
        );
    }

    #[test]
    fn text_prompts_have_the_asked_words() {
        let t = prompt_text(1, 1, 50, None);
        assert_eq!(t.split(' ').count(), 50);
        assert!(
            matches!(build_prompt(true, 0.75, TokenRange::DEFAULT, 0, 1, 1, 100, None), Prompt::Text(s) if s.split(' ').count() == 75)
        );
    }
}
