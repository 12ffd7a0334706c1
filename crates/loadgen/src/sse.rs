//! Server-sent events as OpenAI-compatible servers stream them, parsed incrementally and
//! without IO.
//!
//! Two layers:
//! - [`SseParser`] turns the bytes of a response body, fed in whatever pieces the network
//!   delivers, into the `data` payloads of events (the WHATWG event-stream rules, restricted
//!   to what a client of `/v1/completions` and `/v1/chat/completions` needs).
//! - [`parse_event`] reads one payload as `[DONE]`, a completion or chat chunk ([`Chunk`]),
//!   or a mid-stream error frame.
//!
//! Line rules: lines end with `\n`, `\r\n` or a lone `\r` (a `\r\n` split between two reads
//! is one line end); a blank line ends an event; `data:` lines (with or without one space
//! after the colon) are joined with `\n`; comment lines (`: keep-alive`) and every other
//! field (`event:`, `id:`, `retry:`) are ignored; an event with no `data` line is not
//! dispatched; a UTF-8 byte order mark at the very start is skipped. Splitting happens only
//! at ASCII bytes, so a read boundary inside a UTF-8 sequence is harmless: payloads are
//! handed on as bytes and validated when they are parsed as JSON.
//!
//! Memory: the parser keeps only an unterminated line and the `data` of an event not yet
//! ended, and fails with [`SseError::EventTooLarge`] once those exceed its limit
//! ([`DEFAULT_MAX_EVENT_BYTES`] by default), so a garbage stream cannot grow it without
//! bound. A payload that arrives whole in one read is handed on without being copied.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};

/// Default cap on one event (its `data` plus an unterminated line): 1 MiB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1 << 20;

/// Longest server error message kept, in bytes (longer ones are cut at a char boundary).
pub const MAX_ERROR_MESSAGE_BYTES: usize = 1024;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Why the event stream cannot be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// One event (or one line) grew past the parser's limit.
    #[error("an SSE event exceeds the limit of {limit} bytes")]
    EventTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
}

/// Where the `data` of the event being read is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Data {
    /// No `data` line yet.
    None,
    /// One `data` line, at this byte range of the input being fed (not copied yet).
    Input(usize, usize),
    /// In [`EventState::buf`].
    Owned,
}

/// The event being read.
#[derive(Debug)]
struct EventState {
    data: Data,
    buf: Vec<u8>,
    /// The next line is the first of the stream (a BOM may start it).
    first_line: bool,
}

/// An incremental parser of an SSE byte stream. Feed it each piece of the body as it
/// arrives ([`SseParser::feed`]) and call [`SseParser::finish`] at the end of the body; both
/// call back with the `data` payload of every complete event, in order.
#[derive(Debug)]
pub struct SseParser {
    /// An unterminated line carried over from the previous input.
    line: Vec<u8>,
    ev: EventState,
    /// The previous input ended with `\r`: a `\n` starting the next one is part of that
    /// line end.
    pending_cr: bool,
    max_event_bytes: usize,
    /// Set once an error was returned; every later call returns it again.
    failed: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser with the default event limit ([`DEFAULT_MAX_EVENT_BYTES`]). It allocates
    /// nothing until an event or line spans two inputs.
    pub fn new() -> Self {
        Self::with_limit(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A parser that fails once one event (its joined `data` plus an unterminated line)
    /// exceeds `max_event_bytes`.
    pub fn with_limit(max_event_bytes: usize) -> Self {
        SseParser {
            line: Vec::new(),
            ev: EventState {
                data: Data::None,
                buf: Vec::new(),
                first_line: true,
            },
            pending_cr: false,
            max_event_bytes,
            failed: false,
        }
    }

    /// Processes the buffered (carried-over) line and empties the buffer; false if the
    /// event grew past the limit.
    fn flush_line(&mut self, on_event: &mut impl FnMut(&[u8])) -> bool {
        let ok = process_line(
            &mut self.ev,
            &self.line,
            0,
            self.line.len(),
            false,
            self.max_event_bytes,
            on_event,
        );
        self.line.clear();
        ok
    }

    fn too_large(&mut self) -> SseError {
        self.failed = true;
        self.line = Vec::new();
        self.ev.buf = Vec::new();
        self.ev.data = Data::None;
        SseError::EventTooLarge {
            limit: self.max_event_bytes,
        }
    }

    /// Parses the next piece of the body, calling `on_event` with the `data` payload of
    /// each event it completes (the payload borrows `input` or the parser, so it is only
    /// valid during the call). After an error the parser is spent: every later call fails
    /// the same way.
    pub fn feed(&mut self, input: &[u8], on_event: &mut impl FnMut(&[u8])) -> Result<(), SseError> {
        if self.failed {
            return Err(SseError::EventTooLarge {
                limit: self.max_event_bytes,
            });
        }
        if input.is_empty() {
            return Ok(());
        }
        let mut i = 0;
        if std::mem::take(&mut self.pending_cr) && input.first() == Some(&b'\n') {
            i = 1;
        }
        while i < input.len() {
            let rest = &input[i..];
            let Some(j) = rest.iter().position(|&b| b == b'\n' || b == b'\r') else {
                if self.line.len() + rest.len() > self.max_event_bytes {
                    return Err(self.too_large());
                }
                self.line.extend_from_slice(rest);
                break;
            };
            let end = i + j;
            let mut next = end + 1;
            if input[end] == b'\r' {
                match input.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.pending_cr = true,
                }
            }
            let ok = if self.line.is_empty() {
                process_line(
                    &mut self.ev,
                    input,
                    i,
                    end,
                    true,
                    self.max_event_bytes,
                    on_event,
                )
            } else {
                if self.line.len() + (end - i) > self.max_event_bytes {
                    return Err(self.too_large());
                }
                self.line.extend_from_slice(&input[i..end]);
                self.flush_line(on_event)
            };
            if !ok {
                return Err(self.too_large());
            }
            i = next;
        }
        // An event still open may not point into `input` past this call.
        if let Data::Input(s, e) = self.ev.data {
            self.ev.buf.clear();
            self.ev.buf.extend_from_slice(&input[s..e]);
            self.ev.data = Data::Owned;
        }
        Ok(())
    }

    /// Ends the stream: an unterminated last line is taken as a line, and an event whose
    /// blank line never came is dispatched (lenient, where the WHATWG rules drop it; the
    /// caller decides whether a truncated last event counts). The parser is then reset and
    /// can read a new stream.
    pub fn finish(&mut self, on_event: &mut impl FnMut(&[u8])) -> Result<(), SseError> {
        if self.failed {
            return Err(SseError::EventTooLarge {
                limit: self.max_event_bytes,
            });
        }
        if !self.line.is_empty() && !self.flush_line(on_event) {
            return Err(self.too_large());
        }
        // Only `Owned` can remain between calls.
        if self.ev.data == Data::Owned {
            on_event(&self.ev.buf);
        }
        self.ev.data = Data::None;
        self.ev.buf.clear();
        self.ev.first_line = true;
        self.pending_cr = false;
        Ok(())
    }

    /// Whether the parser holds part of an event or line (bytes seen since the last event
    /// ended, other than comments and ignored fields already discarded).
    pub fn has_partial(&self) -> bool {
        !self.line.is_empty() || self.ev.data != Data::None
    }
}

/// Handles the line `src[s..e]`; `in_input` says whether `src` is the input being fed
/// (so a data range can point into it). Returns false when the event exceeds `max`.
fn process_line(
    ev: &mut EventState,
    src: &[u8],
    mut s: usize,
    e: usize,
    in_input: bool,
    max: usize,
    on_event: &mut impl FnMut(&[u8]),
) -> bool {
    if std::mem::take(&mut ev.first_line) && src[s..e].starts_with(BOM) {
        s += BOM.len();
    }
    let line = &src[s..e];
    if line.is_empty() {
        match ev.data {
            Data::None => {}
            Data::Input(a, b) => on_event(&src[a..b]),
            Data::Owned => on_event(&ev.buf),
        }
        ev.data = Data::None;
        ev.buf.clear();
        return true;
    }
    // Comments start with ':'; every field but `data` is ignored.
    let (field, value_start) = match line.iter().position(|&b| b == b':') {
        Some(0) => return true,
        Some(c) => {
            let v = s + c + 1;
            (
                &line[..c],
                if src.get(v) == Some(&b' ') && v < e {
                    v + 1
                } else {
                    v
                },
            )
        }
        None => (line, e),
    };
    if field != b"data" {
        return true;
    }
    let value = &src[value_start..e];
    match ev.data {
        Data::None if in_input => {
            if value.len() > max {
                return false;
            }
            ev.data = Data::Input(value_start, e);
        }
        Data::None => {
            if value.len() > max {
                return false;
            }
            ev.buf.clear();
            ev.buf.extend_from_slice(value);
            ev.data = Data::Owned;
        }
        Data::Input(a, b) => {
            if (b - a) + 1 + value.len() > max {
                return false;
            }
            ev.buf.clear();
            ev.buf.extend_from_slice(&src[a..b]);
            ev.buf.push(b'\n');
            ev.buf.extend_from_slice(value);
            ev.data = Data::Owned;
        }
        Data::Owned => {
            if ev.buf.len() + 1 + value.len() > max {
                return false;
            }
            ev.buf.push(b'\n');
            ev.buf.extend_from_slice(value);
        }
    }
    true
}

// ---------------------------------------------------------------------------------------
// Chunks

/// Token counts from a chunk's `usage`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    /// `usage.prompt_tokens`.
    #[serde(default)]
    pub prompt_tokens: Option<u32>,
    /// `usage.completion_tokens` (cumulative when the server streams usage on every chunk).
    #[serde(default)]
    pub completion_tokens: Option<u32>,
}

/// What one completion or chat chunk carried.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// Whether `choices` was non-empty.
    pub has_choices: bool,
    /// Bytes of generated text in `choices[0]`: completions `text`; chat `delta.content`
    /// plus the reasoning text (`delta.reasoning_content` or `delta.reasoning`, the longer
    /// of the two where a server sends both as aliases). A role-only delta has none.
    pub content_len: usize,
    /// `choices[0].finish_reason`, when set.
    pub finish_reason: Option<Cow<'a, str>>,
    /// `usage`, when present (a final `choices: []` chunk, or every chunk with
    /// `continuous_usage_stats`).
    pub usage: Option<Usage>,
}

impl Chunk<'_> {
    /// Whether the chunk carries generated content (counts as a token arrival).
    pub fn has_content(&self) -> bool {
        self.content_len > 0
    }
}

/// One interpreted event payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEvent<'a> {
    /// `[DONE]`: the end of the stream.
    Done,
    /// A completion or chat chunk.
    Chunk(Chunk<'a>),
    /// `{"error": {...}}` (vLLM's mid-stream error) or a flat `{"object": "error", ...}`:
    /// the server's message (with its type and code when given), cut to
    /// [`MAX_ERROR_MESSAGE_BYTES`].
    Error(String),
}

/// A payload that is neither `[DONE]`, nor JSON, nor a completion chunk or error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed stream frame: {reason}")]
pub struct MalformedEvent {
    /// What is wrong, with the start of the payload.
    pub reason: String,
}

/// Reads one event payload. `Ok(None)` for an empty (or all-whitespace) payload, which
/// carries nothing and is ignored.
pub fn parse_event(data: &[u8]) -> Result<Option<StreamEvent<'_>>, MalformedEvent> {
    let trimmed = data.trim_ascii();
    if trimmed.is_empty() {
        return Ok(None);
    }
    if trimmed == b"[DONE]" {
        return Ok(Some(StreamEvent::Done));
    }
    let raw: RawChunk<'_> = serde_json::from_slice(trimmed).map_err(|e| MalformedEvent {
        reason: format!("{e} in `{}`", snippet(trimmed)),
    })?;
    if let Some(err) = raw.error
        && !err.is_null()
    {
        return Ok(Some(StreamEvent::Error(error_message(&err))));
    }
    if raw.object.as_ref().is_some_and(|o| o.0 == "error") {
        let msg = raw.message.map_or(Cow::Borrowed("(no message)"), |m| m.0);
        return Ok(Some(StreamEvent::Error(truncate(&msg).to_string())));
    }
    if raw.choices.is_none() && raw.usage.is_none() {
        return Err(MalformedEvent {
            reason: format!(
                "neither `choices` nor `usage` nor `error` in `{}`",
                snippet(trimmed)
            ),
        });
    }
    let first = raw.choices.and_then(|c| c.0);
    let mut chunk = Chunk {
        has_choices: first.is_some(),
        usage: raw.usage,
        ..Chunk::default()
    };
    if let Some(c) = first {
        let len = |t: Option<TextLen>| t.map_or(0, |t| t.0);
        chunk.content_len = len(c.text);
        if let Some(d) = c.delta {
            chunk.content_len += len(d.content) + len(d.reasoning_content).max(len(d.reasoning));
        }
        chunk.finish_reason = c.finish_reason.map(|f| f.0);
    }
    Ok(Some(StreamEvent::Chunk(chunk)))
}

/// The start of a payload for a message, as text.
fn snippet(data: &[u8]) -> String {
    const MAX: usize = 120;
    let cut = &data[..data.len().min(MAX)];
    let mut s = String::from_utf8_lossy(cut).into_owned();
    if data.len() > MAX {
        s.push('…');
    }
    s
}

/// `s` cut to at most [`MAX_ERROR_MESSAGE_BYTES`] at a char boundary.
pub(crate) fn truncate(s: &str) -> &str {
    if s.len() <= MAX_ERROR_MESSAGE_BYTES {
        return s;
    }
    let mut end = MAX_ERROR_MESSAGE_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A readable message from an OpenAI-style `error` value: `message (type, code N)` for an
/// object, the string itself for a string, else the JSON.
pub(crate) fn error_message(err: &serde_json::Value) -> String {
    let msg = match err {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => {
            let mut m = match o.get("message") {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => err.to_string(),
            };
            let kind = o.get("type").and_then(|t| t.as_str());
            let code = o.get("code").filter(|c| !c.is_null());
            match (kind, code) {
                (Some(k), Some(c)) => m.push_str(&format!(" ({k}, code {c})")),
                (Some(k), None) => m.push_str(&format!(" ({k})")),
                (None, Some(c)) => m.push_str(&format!(" (code {c})")),
                (None, None) => {}
            }
            m
        }
        other => other.to_string(),
    };
    truncate(&msg).to_string()
}

// Borrowed views of a chunk. Unknown fields are skipped without allocating; strings are
// measured, not copied; of `choices` only the first element is kept, without a Vec.

#[derive(Deserialize)]
struct RawChunk<'a> {
    #[serde(default, borrow)]
    choices: Option<FirstChoice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default, borrow)]
    object: Option<Str<'a>>,
    #[serde(default, borrow)]
    message: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct RawChoice<'a> {
    #[serde(default)]
    text: Option<TextLen>,
    #[serde(default)]
    delta: Option<RawDelta>,
    #[serde(default, borrow)]
    finish_reason: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct RawDelta {
    #[serde(default)]
    content: Option<TextLen>,
    #[serde(default)]
    reasoning_content: Option<TextLen>,
    #[serde(default)]
    reasoning: Option<TextLen>,
}

/// A string, borrowed from the input unless it had escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

/// The byte length of a string, read without copying it.
struct TextLen(usize);

impl<'de> Deserialize<'de> for TextLen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TextLen;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(TextLen(v.len()))
            }
        }
        d.deserialize_str(V)
    }
}

/// The first element of `choices` (`None` for `[]`); the rest are skipped.
struct FirstChoice<'a>(Option<RawChoice<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstChoice<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FirstChoice<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<RawChoice<'de>>()?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FirstChoice(first))
            }
        }
        d.deserialize_seq(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Feeds `pieces` then finishes; the payloads as strings (lossy), or the error.
    fn events_of(pieces: &[&[u8]]) -> Result<Vec<Vec<u8>>, SseError> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        let mut push = |d: &[u8]| out.push(d.to_vec());
        for piece in pieces {
            p.feed(piece, &mut push)?;
        }
        p.finish(&mut push)?;
        Ok(out)
    }

    fn strs(v: &[Vec<u8>]) -> Vec<String> {
        v.iter()
            .map(|d| String::from_utf8(d.clone()).expect("UTF-8 payload"))
            .collect()
    }

    fn one(input: &str) -> Vec<String> {
        strs(&events_of(&[input.as_bytes()]).expect("parses"))
    }

    /// Every way of cutting `input` in two and in three gives the same payloads.
    fn same_under_splits(input: &[u8]) -> Vec<Vec<u8>> {
        let whole = events_of(&[input]).expect("parses");
        for a in 0..=input.len() {
            let got = events_of(&[&input[..a], &input[a..]]).expect("parses");
            assert_eq!(got, whole, "split at {a}");
            for b in a..=input.len() {
                let got = events_of(&[&input[..a], &input[a..b], &input[b..]]).expect("parses");
                assert_eq!(got, whole, "split at {a} and {b}");
            }
        }
        // Byte by byte.
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(events_of(&bytes).expect("parses"), whole);
        whole
    }

    #[test]
    fn lf_and_crlf_and_cr_separators() {
        let want = vec!["a".to_string(), "b".into(), "[DONE]".into()];
        assert_eq!(one("data: a\n\ndata: b\n\ndata: [DONE]\n\n"), want);
        assert_eq!(
            one("data: a\r\n\r\ndata: b\r\n\r\ndata: [DONE]\r\n\r\n"),
            want
        );
        assert_eq!(one("data: a\r\rdata: b\r\rdata: [DONE]\r\r"), want);
        assert_eq!(one("data: a\r\n\ndata: b\n\r\ndata: [DONE]\r\n\r\n"), want);
        // A `\r\n` split by an empty read is still one line end.
        let got = events_of(&[b"data: a\r", b"", b"\ndata: b\n\n"]).expect("parses");
        assert_eq!(strs(&got), vec!["a\nb"]);
    }

    #[test]
    fn data_with_or_without_space_and_multiline() {
        assert_eq!(one("data:{\"x\":1}\n\n"), vec!["{\"x\":1}"]);
        assert_eq!(one("data:  two spaces\n\n"), vec![" two spaces"]);
        assert_eq!(
            one("data: line1\ndata: line2\ndata:line3\n\n"),
            vec!["line1\nline2\nline3"]
        );
        // A bare `data` line is a data field with an empty value.
        assert_eq!(one("data\ndata: x\n\n"), vec!["\nx"]);
        assert_eq!(one("data:\n\n"), vec![""]);
    }

    #[test]
    fn comments_and_other_fields_are_ignored() {
        let s = ": keep-alive\n\nevent: message\nid: 7\nretry: 100\ndata: a\n: inside\n\nid: 8\n\n:\n\ndata: b\n\n";
        assert_eq!(one(s), vec!["a", "b"]);
        // `datax:` is another field.
        assert_eq!(one("datax: no\ndata: yes\n\n"), vec!["yes"]);
    }

    #[test]
    fn several_frames_per_read_and_split_frames() {
        let stream = b"data: {\"a\":1}\n\ndata: {\"b\":2}\r\n\r\n: ping\n\ndata: [DONE]\n\n";
        let got = same_under_splits(stream);
        assert_eq!(strs(&got), vec!["{\"a\":1}", "{\"b\":2}", "[DONE]"]);
    }

    #[test]
    fn split_inside_utf8_and_crlf() {
        let s = "data: {\"text\":\"héllo 世界 🎉\"}\r\n\r\ndata: x\ndata: 🎉\r\n\r\n";
        let got = same_under_splits(s.as_bytes());
        assert_eq!(strs(&got), vec!["{\"text\":\"héllo 世界 🎉\"}", "x\n🎉"]);
    }

    #[test]
    fn bom_is_skipped_once() {
        let mut s = BOM.to_vec();
        s.extend_from_slice(b"data: a\n\n");
        s.extend_from_slice(BOM);
        s.extend_from_slice(b"data: b\n\n");
        let got = same_under_splits(&s);
        // The second BOM is not at the start of the stream: that line is an unknown field.
        assert_eq!(strs(&got), vec!["a"]);
    }

    #[test]
    fn final_event_without_blank_line() {
        assert_eq!(one("data: a\n\ndata: [DONE]"), vec!["a", "[DONE]"]);
        assert_eq!(one("data: a\n\ndata: [DONE]\n"), vec!["a", "[DONE]"]);
        assert_eq!(one("data: a\n\ndata: [DONE]\r"), vec!["a", "[DONE]"]);
        // Nothing pending: nothing dispatched.
        assert_eq!(one("data: a\n\n: bye"), vec!["a"]);
        assert!(one("").is_empty());
    }

    #[test]
    fn pending_state_and_reuse_after_finish() {
        let mut p = SseParser::new();
        let mut n = 0;
        p.feed(b"data: a", &mut |_| n += 1).expect("feeds");
        assert!(p.has_partial());
        p.feed(b"\n", &mut |_| n += 1).expect("feeds");
        assert!(p.has_partial());
        p.feed(b"\n", &mut |_| n += 1).expect("feeds");
        assert!(!p.has_partial());
        assert_eq!(n, 1);
        p.feed(b"data: b\n", &mut |_| n += 1).expect("feeds");
        p.finish(&mut |_| n += 1).expect("finishes");
        assert_eq!(n, 2);
        p.feed(b"data: c\n\n", &mut |d| assert_eq!(d, b"c"))
            .expect("feeds");
    }

    #[test]
    fn bounded_memory() {
        // A line that never ends.
        let mut p = SseParser::with_limit(64);
        let junk = [b'x'; 40];
        p.feed(&junk, &mut |_| {}).expect("under the limit");
        assert_eq!(
            p.feed(&junk, &mut |_| {}),
            Err(SseError::EventTooLarge { limit: 64 })
        );
        // Spent: later calls fail too.
        assert!(p.feed(b"data: a\n\n", &mut |_| {}).is_err());
        assert!(p.finish(&mut |_| {}).is_err());
        // Data lines that never end an event.
        let mut p = SseParser::with_limit(64);
        let mut res = Ok(());
        for _ in 0..10 {
            res = p.feed(b"data: 0123456789\n", &mut |_| {});
            if res.is_err() {
                break;
            }
        }
        assert_eq!(res, Err(SseError::EventTooLarge { limit: 64 }));
        // One huge line inside one read.
        let mut p = SseParser::with_limit(64);
        let mut big = b"data: ".to_vec();
        big.extend_from_slice(&[b'y'; 100]);
        big.extend_from_slice(b"\n\n");
        assert!(p.feed(&big, &mut |_| panic!("no event")).is_err());
        // Comments and blank lines never accumulate.
        let mut p = SseParser::with_limit(64);
        for _ in 0..1000 {
            p.feed(b": keep-alive 0123456789\n\n\n", &mut |_| {})
                .expect("comments are dropped");
        }
        // An event exactly at the limit is fine.
        let mut p = SseParser::with_limit(10);
        let mut got = Vec::new();
        p.feed(b"data: 0123456789\n\n", &mut |d| got.push(d.to_vec()))
            .expect("at the limit");
        assert_eq!(got, vec![b"0123456789".to_vec()]);
    }

    // ---- Chunk interpretation ----

    fn chunk(s: &str) -> Chunk<'static> {
        let data: &'static str = Box::leak(s.to_string().into_boxed_str());
        match parse_event(data.as_bytes()) {
            Ok(Some(StreamEvent::Chunk(c))) => c,
            other => panic!("not a chunk: {other:?}"),
        }
    }

    #[test]
    fn completion_chunks() {
        let c = chunk(
            r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" The","logprobs":null,"finish_reason":null,"stop_reason":null}]}"#,
        );
        assert!(c.has_choices && c.has_content());
        assert_eq!(c.content_len, 4);
        assert_eq!(c.finish_reason, None);
        assert_eq!(c.usage, None);
        let c = chunk(r#"{"choices":[{"index":0,"text":" end","finish_reason":"length"}]}"#);
        assert_eq!(c.finish_reason.as_deref(), Some("length"));
        // Empty text: choices but no content.
        let c = chunk(r#"{"choices":[{"index":0,"text":"","finish_reason":"stop"}]}"#);
        assert!(c.has_choices && !c.has_content());
        assert_eq!(c.finish_reason.as_deref(), Some("stop"));
        // Escapes are measured decoded.
        let c = chunk(r#"{"choices":[{"text":"a\n\u00e9"}]}"#);
        assert_eq!(c.content_len, "a\né".len());
    }

    #[test]
    fn chat_chunks_and_the_role_chunk() {
        let role = chunk(
            r#"{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
        );
        assert!(role.has_choices && !role.has_content());
        let role_only = chunk(r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#);
        assert!(!role_only.has_content());
        let null_content = chunk(r#"{"choices":[{"delta":{"content":null}}]}"#);
        assert!(!null_content.has_content());
        let c =
            chunk(r#"{"choices":[{"index":0,"delta":{"content":" Hi"},"finish_reason":null}]}"#);
        assert_eq!(c.content_len, 3);
        let r = chunk(r#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#);
        assert_eq!(r.content_len, 5);
        let r = chunk(r#"{"choices":[{"delta":{"reasoning":"hmm"}}]}"#);
        assert_eq!(r.content_len, 3);
        // Aliases of the same text are not added up.
        let r = chunk(
            r#"{"choices":[{"delta":{"reasoning":"hmm","reasoning_content":"hmm","content":"!"}}]}"#,
        );
        assert_eq!(r.content_len, 4);
        let last = chunk(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#);
        assert!(!last.has_content());
        assert_eq!(last.finish_reason.as_deref(), Some("stop"));
        // Only choices[0] counts.
        let two = chunk(r#"{"choices":[{"delta":{}},{"delta":{"content":"x"}}]}"#);
        assert!(!two.has_content());
    }

    #[test]
    fn usage_final_and_inline() {
        let u = chunk(
            r#"{"id":"x","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":0}}}"#,
        );
        assert!(!u.has_choices && !u.has_content());
        assert_eq!(
            u.usage,
            Some(Usage {
                prompt_tokens: Some(5),
                completion_tokens: Some(3)
            })
        );
        let inline = chunk(
            r#"{"choices":[{"text":" a","finish_reason":null}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#,
        );
        assert!(inline.has_content());
        assert_eq!(inline.usage.and_then(|u| u.completion_tokens), Some(1));
        let null_usage = chunk(r#"{"choices":[{"text":"a"}],"usage":null}"#);
        assert_eq!(null_usage.usage, None);
    }

    #[test]
    fn done_errors_and_malformed() {
        assert_eq!(parse_event(b"[DONE]"), Ok(Some(StreamEvent::Done)));
        assert_eq!(parse_event(b" [DONE] \r"), Ok(Some(StreamEvent::Done)));
        assert_eq!(parse_event(b""), Ok(None));
        assert_eq!(parse_event(b"  "), Ok(None));
        let e = parse_event(
            br#"{"error":{"message":"simulated mid-stream failure","type":"InternalServerError","param":null,"code":500}}"#,
        );
        assert_eq!(
            e,
            Ok(Some(StreamEvent::Error(
                "simulated mid-stream failure (InternalServerError, code 500)".into()
            )))
        );
        assert_eq!(
            parse_event(br#"{"error":"boom"}"#),
            Ok(Some(StreamEvent::Error("boom".into())))
        );
        assert_eq!(
            parse_event(
                br#"{"object":"error","message":"old style","type":"BadRequestError","code":400}"#
            ),
            Ok(Some(StreamEvent::Error("old style".into())))
        );
        let long = format!(r#"{{"error":{{"message":"{}"}}}}"#, "é".repeat(2000));
        match parse_event(long.as_bytes()) {
            Ok(Some(StreamEvent::Error(m))) => assert!(m.len() <= MAX_ERROR_MESSAGE_BYTES),
            other => panic!("{other:?}"),
        }
        // `error: null` is no error.
        assert!(matches!(
            parse_event(br#"{"choices":[{"text":"a"}],"error":null}"#),
            Ok(Some(StreamEvent::Chunk(_)))
        ));
        for bad in [
            &b"{\"choices\":[{\"text\":\"a\"}"[..],
            b"not json",
            b"42",
            b"[1,2]",
            b"{}",
            b"{\"id\":\"x\"}",
            b"{\"choices\":\"nope\"}",
            b"{\"choices\":[{\"text\":5}]}",
            b"{\"choices\":[{\"finish_reason\":1}]}",
            b"{\"choices\":[],\"usage\":{\"completion_tokens\":-1}}",
            b"{\"choices\":[{\"text\":\"\xff\"}]}",
        ] {
            let r = parse_event(bad);
            assert!(r.is_err(), "{:?} gave {r:?}", String::from_utf8_lossy(bad));
        }
    }

    // ---- Property: splitting a valid stream anywhere gives the same events ----

    /// A valid event of varied shape, and the payload it carries.
    fn event_strategy() -> impl Strategy<Value = (Vec<u8>, Option<String>)> {
        let line_end = prop_oneof![Just("\n"), Just("\r\n"), Just("\r")];
        let text = "[a-z0-9 é世🎉{}\":,]{0,12}";
        let piece = prop_oneof![
            // data lines (1..3), optional space, then a blank line
            (
                proptest::collection::vec(text, 1..4),
                any::<bool>(),
                line_end.clone(),
                any::<bool>(),
            )
                .prop_map(|(lines, space, eol, with_id)| {
                    let mut s = String::new();
                    if with_id {
                        s.push_str("id: 1");
                        s.push_str(eol);
                    }
                    for l in &lines {
                        s.push_str(if space { "data: " } else { "data:" });
                        s.push_str(l);
                        s.push_str(eol);
                    }
                    s.push_str(eol);
                    // A value starting with a space loses it only when `data: ` had one.
                    let payload = lines
                        .iter()
                        .map(|l| {
                            if !space {
                                l.strip_prefix(' ').unwrap_or(l).to_string()
                            } else {
                                l.clone()
                            }
                        })
                        .collect::<Vec<_>>()
                        .join("\n");
                    (s.into_bytes(), Some(payload))
                }),
            (text, line_end.clone())
                .prop_map(|(c, eol)| { (format!(":{c}{eol}{eol}").into_bytes(), None) }),
            line_end.prop_map(|eol| (eol.as_bytes().to_vec(), None)),
        ];
        piece
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn splitting_anywhere_gives_the_same_events(
            events in proptest::collection::vec(event_strategy(), 0..12),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..8),
        ) {
            let mut stream = Vec::new();
            let mut want = Vec::new();
            for (bytes, payload) in &events {
                stream.extend_from_slice(bytes);
                if let Some(p) = payload {
                    want.push(p.clone().into_bytes());
                }
            }
            // A lone `\r` line end followed by an event starting with `\n` would merge the
            // two; the generator cannot produce that since events start with `d`, `i`,
            // `:` or a line end, and a line end after `\r` is a blank line either way.
            let whole = events_of(&[&stream]).expect("parses");
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
            points.sort_unstable();
            let mut pieces: Vec<&[u8]> = Vec::new();
            let mut last = 0;
            for p in points {
                pieces.push(&stream[last..p]);
                last = p;
            }
            pieces.push(&stream[last..]);
            let split = events_of(&pieces).expect("parses");
            prop_assert_eq!(&split, &whole);
            let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
            prop_assert_eq!(&events_of(&bytewise).expect("parses"), &whole);
            prop_assert_eq!(whole, want);
        }
    }
}
