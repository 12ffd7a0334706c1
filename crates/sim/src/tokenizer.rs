//! The simulated server's stand-in tokenizer and chat template.
//!
//! There is no real vocabulary: a prompt is split on whitespace and every word is cut into
//! pieces of at most [`PIECE_CHARS`] characters; each piece is one token whose id is a hash
//! of the piece (FNV-1a, folded into `[RESERVED_IDS, VOCAB_SIZE)`). So `"hello world"` is
//! `hell`, `o`, `worl`, `d`: 4 tokens, and the same text always gives the same ids, which
//! is what the prefix cache keys on. Roughly four characters per token, like real BPE
//! vocabularies on English text.
//!
//! Chat messages go through a ChatML-like template (Qwen's): every message costs
//! `<|im_start|>`, the role, a newline, its content, `<|im_end|>` and a newline
//! ([`MESSAGE_OVERHEAD`] = 5 tokens besides the content), and the generation prompt
//! `<|im_start|>assistant\n` adds [`GENERATION_PROMPT`] = 3 tokens.

/// Characters per token piece.
pub const PIECE_CHARS: usize = 4;
/// Size of the simulated vocabulary (Qwen2.5's base vocabulary).
pub const VOCAB_SIZE: u32 = 151_643;
/// Ids below this are never produced for text pieces.
pub const RESERVED_IDS: u32 = 256;
/// `<|im_start|>`.
pub const IM_START: u32 = 151_644;
/// `<|im_end|>`.
pub const IM_END: u32 = 151_645;
/// The newline token.
pub const NEWLINE: u32 = 198;
/// Template tokens per chat message besides its content.
pub const MESSAGE_OVERHEAD: usize = 5;
/// Tokens of the generation prompt that ends every chat prompt.
pub const GENERATION_PROMPT: usize = 3;

fn piece_id(piece: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in piece.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    RESERVED_IDS + h % (VOCAB_SIZE - RESERVED_IDS)
}

/// Calls `f` with each token piece of `text`.
fn for_each_piece(text: &str, mut f: impl FnMut(&str)) {
    for word in text.split_whitespace() {
        let mut start = 0;
        let mut chars = 0;
        for (i, _) in word.char_indices() {
            if chars == PIECE_CHARS {
                f(&word[start..i]);
                start = i;
                chars = 0;
            }
            chars += 1;
        }
        if chars > 0 {
            f(&word[start..]);
        }
    }
}

/// Token ids of `text`, appended to `out`.
pub fn tokenize_into(text: &str, out: &mut Vec<u32>) {
    for_each_piece(text, |p| out.push(piece_id(p)));
}

/// Token ids of `text`.
pub fn tokenize(text: &str) -> Vec<u32> {
    let mut out = Vec::with_capacity(text.len() / PIECE_CHARS + 1);
    tokenize_into(text, &mut out);
    out
}

/// Number of tokens of `text` (the length of [`tokenize`]'s result, without building it).
pub fn count_tokens(text: &str) -> usize {
    let mut n = 0;
    for_each_piece(text, |_| n += 1);
    n
}

/// Token ids of a chat conversation under the template: each `(role, content)` message,
/// then the generation prompt.
pub fn chat_tokens<'a>(messages: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<u32> {
    let mut out = Vec::new();
    for (role, content) in messages {
        out.extend([IM_START, piece_id(role), NEWLINE]);
        tokenize_into(content, &mut out);
        out.extend([IM_END, NEWLINE]);
    }
    out.extend([IM_START, piece_id("assistant"), NEWLINE]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_cut_into_four_character_pieces() {
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("   \n"), 0);
        assert_eq!(count_tokens("hello world"), 4); // hell o worl d
        assert_eq!(count_tokens("abcd efgh"), 2);
        assert_eq!(count_tokens("abcde"), 2);
        // Characters, not bytes: four 2-byte characters are one piece.
        assert_eq!(count_tokens("éééé"), 1);
        let ids = tokenize("hello world hello");
        assert_eq!(ids.len(), 6);
        assert_eq!(ids[0..2], ids[4..6]);
        assert!(ids.iter().all(|&t| (RESERVED_IDS..VOCAB_SIZE).contains(&t)));
        assert_eq!(
            count_tokens("the quick brown fox"),
            tokenize("the quick brown fox").len()
        );
    }

    #[test]
    fn chat_template_adds_fixed_overhead() {
        let t = chat_tokens([("system", "be brief"), ("user", "hello world")]);
        let content = count_tokens("be brief") + count_tokens("hello world");
        assert_eq!(t.len(), content + 2 * MESSAGE_OVERHEAD + GENERATION_PROMPT);
        assert_eq!(t[0], IM_START);
        assert_eq!(t[t.len() - 1], NEWLINE);
        assert_eq!(chat_tokens([]).len(), GENERATION_PROMPT);
    }
}
