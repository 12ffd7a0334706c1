//! OpenAI-style server-sent events for the simulated server, as vLLM writes them.
//!
//! Each event is `data: {json}\n\n`; the stream ends with `data: [DONE]\n\n`.
//! - Completions (`text_completion`): one frame per delivered chunk of tokens, the last
//!   one carrying `finish_reason` (`length` or `stop`).
//! - Chat (`chat.completion.chunk`): the first frame carries `delta.role = "assistant"`
//!   together with the first token's content (never a role-only frame before the first
//!   token); later frames carry `delta.content`; like vLLM, `finish_reason` rides on the
//!   last token frame rather than on a separate empty frame.
//! - With `stream_options.include_usage`, a final frame with `"choices": []` and `usage`
//!   precedes `[DONE]`; with `continuous_usage_stats`, every token frame also carries the
//!   cumulative `usage`.
//!
//! Token text is a deterministic placeholder: token *i* of a response is
//! [`WORDS`]`[(i - 1) % 16]`, each a single word with a leading space, so the number of
//! whitespace-separated words in a response is its number of tokens.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::Stream;

use super::metrics::LatenessRecorder;
use super::replica::{CancelGuard, Chunk, CutMode, Inbox, Update};

/// Placeholder token texts, cycled.
pub const WORDS: [&str; 16] = [
    " The",
    " simulated",
    " engine",
    " streams",
    " one",
    " placeholder",
    " word",
    " per",
    " output",
    " token",
    " at",
    " the",
    " pace",
    " of",
    " its",
    " model.",
];

/// The text of tokens `from + 1 ..= to` of a response.
pub(crate) fn push_words(out: &mut BytesMut, from: u32, to: u32) {
    for i in from..to {
        out.put_slice(WORDS[i as usize % WORDS.len()].as_bytes());
    }
}

/// The whole text of an `n`-token response.
pub(crate) fn response_text(n: u32) -> String {
    let mut b = BytesMut::new();
    push_words(&mut b, 0, n);
    String::from_utf8_lossy(&b).into_owned()
}

/// Which endpoint's chunk shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Completion,
    Chat,
}

/// How one request's frames look.
#[derive(Clone, Debug)]
pub(crate) struct FrameSpec {
    pub kind: Kind,
    /// `data: {"id":..,"object":..,"created":..,"model":..` (no closing brace).
    pub head: String,
    pub prompt_tokens: u32,
    pub include_usage: bool,
    pub continuous_usage: bool,
    /// `"length"` or `"stop"`: the finish reason of the last token.
    pub finish_reason: &'static str,
}

impl FrameSpec {
    /// The fixed start of every frame of a request.
    pub(crate) fn head(kind: Kind, id: &str, created: u64, model_json: &str) -> String {
        let object = match kind {
            Kind::Completion => "text_completion",
            Kind::Chat => "chat.completion.chunk",
        };
        format!(
            r#"data: {{"id":"{id}","object":"{object}","created":{created},"model":{model_json}"#
        )
    }

    fn usage(&self, out: &mut BytesMut, completion: u32) {
        let p = self.prompt_tokens;
        let t = u64::from(p) + u64::from(completion);
        out.put_slice(
            format!(r#""usage":{{"prompt_tokens":{p},"completion_tokens":{completion},"total_tokens":{t}}}"#)
                .as_bytes(),
        );
    }

    /// One frame with tokens `from + 1 ..= to`.
    pub(crate) fn token_frame(&self, out: &mut BytesMut, from: u32, to: u32, last: bool) {
        out.put_slice(self.head.as_bytes());
        match self.kind {
            Kind::Completion => out.put_slice(br#","choices":[{"index":0,"text":""#),
            Kind::Chat if from == 0 => {
                out.put_slice(br#","choices":[{"index":0,"delta":{"role":"assistant","content":""#)
            }
            Kind::Chat => out.put_slice(br#","choices":[{"index":0,"delta":{"content":""#),
        }
        push_words(out, from, to);
        out.put_slice(match self.kind {
            Kind::Completion => br#"","logprobs":null,"finish_reason":"#.as_slice(),
            Kind::Chat => br#""},"logprobs":null,"finish_reason":"#.as_slice(),
        });
        if last {
            out.put_u8(b'"');
            out.put_slice(self.finish_reason.as_bytes());
            out.put_u8(b'"');
        } else {
            out.put_slice(b"null");
        }
        if self.kind == Kind::Completion {
            out.put_slice(br#","stop_reason":null"#);
        }
        out.put_slice(b"}]");
        if self.continuous_usage {
            out.put_u8(b',');
            self.usage(out, to);
        }
        out.put_slice(b"}\n\n");
    }

    /// The final usage frame (`choices: []`).
    pub(crate) fn usage_frame(&self, out: &mut BytesMut, completion: u32) {
        out.put_slice(self.head.as_bytes());
        out.put_slice(br#","choices":[],"#);
        self.usage(out, completion);
        out.put_slice(b"}\n\n");
    }
}

/// vLLM's mid-stream error frame.
const ERROR_FRAME: &[u8] = br#"data: {"error":{"message":"simulated mid-stream failure","type":"InternalServerError","param":null,"code":500}}

"#;
const DONE: &[u8] = b"data: [DONE]\n\n";

/// The body of a streaming response: turns inbox updates into SSE frames. Dropping it
/// before the request finished (the client went away) cancels the request in the engine.
pub(crate) struct SseStream {
    inbox: Arc<Inbox>,
    guard: CancelGuard,
    spec: FrameSpec,
    taken: u32,
    /// Cut after this many tokens.
    cut: Option<(u32, CutMode)>,
    state: State,
    lateness: Option<Arc<LatenessRecorder>>,
    /// Deliveries taken from the inbox (kept for its allocation).
    chunks: VecDeque<Chunk>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Streaming,
    /// Let the HTTP layer flush what was written, then break the connection.
    Flush,
    /// Break the connection now.
    Abort,
    Done,
}

impl SseStream {
    pub(crate) fn new(
        inbox: Arc<Inbox>,
        guard: CancelGuard,
        spec: FrameSpec,
        cut: Option<(u32, CutMode)>,
        lateness: Option<Arc<LatenessRecorder>>,
    ) -> Self {
        SseStream {
            inbox,
            guard,
            spec,
            taken: 0,
            cut,
            state: State::Streaming,
            lateness,
            chunks: VecDeque::new(),
        }
    }
}

fn broken(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, msg)
}

impl Stream for SseStream {
    type Item = Result<Bytes, io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        match this.state {
            State::Done => return Poll::Ready(None),
            State::Flush => {
                // Pending makes hyper flush its buffer before polling again.
                this.state = State::Abort;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            State::Abort => {
                this.state = State::Done;
                return Poll::Ready(Some(Err(broken("simulated stream cut"))));
            }
            State::Streaming => {}
        }
        let finished = match ready!(this.inbox.poll_take(&mut this.chunks, cx)) {
            Update::Failed => {
                this.state = State::Done;
                return Poll::Ready(Some(Err(broken("simulated replica died"))));
            }
            Update::Chunks(finished) => finished,
        };
        // Each delivery is its own SSE event; a reader that fell behind writes them all in
        // one HTTP chunk.
        let mut out = BytesMut::with_capacity(256 * this.chunks.len());
        let now = this.lateness.as_ref().map(|_| Instant::now());
        let n = this.chunks.len();
        let mut cut = None;
        for (i, c) in this.chunks.drain(..).enumerate() {
            let mut to = c.generated;
            if let Some((after, mode)) = this.cut
                && to > after
            {
                to = after;
                cut = Some(mode);
            }
            if to > this.taken {
                let last = finished && i + 1 == n && cut.is_none();
                this.spec.token_frame(&mut out, this.taken, to, last);
                if let (Some(rec), Some(now)) = (&this.lateness, now) {
                    rec.record(now.saturating_duration_since(c.due));
                }
                this.taken = to;
            }
            if cut.is_some() {
                break;
            }
        }
        let finished = finished && cut.is_none();
        match cut {
            Some(CutMode::ErrorFrame) => {
                out.put_slice(ERROR_FRAME);
                out.put_slice(DONE);
                this.state = State::Done;
            }
            Some(CutMode::Disconnect) if out.is_empty() => {
                this.state = State::Done;
                return Poll::Ready(Some(Err(broken("simulated stream cut"))));
            }
            Some(CutMode::Disconnect) => this.state = State::Flush,
            None if finished => {
                if this.spec.include_usage {
                    this.spec.usage_frame(&mut out, this.taken);
                }
                out.put_slice(DONE);
                this.guard.disarm();
                this.state = State::Done;
            }
            None => {}
        }
        Poll::Ready(Some(Ok(out.freeze())))
    }
}

/// Waits until the request behind `inbox` finishes; its output token count, or `None`
/// when the replica died under it.
pub(crate) async fn wait_finished(inbox: &Inbox) -> Option<u32> {
    let mut chunks = VecDeque::new();
    std::future::poll_fn(|cx| {
        loop {
            match ready!(inbox.poll_take(&mut chunks, cx)) {
                Update::Failed => return Poll::Ready(None),
                Update::Chunks(true) => return Poll::Ready(chunks.back().map(|c| c.generated)),
                Update::Chunks(false) => {}
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: Kind) -> FrameSpec {
        FrameSpec {
            kind,
            head: FrameSpec::head(kind, "x-1", 7, "\"m\""),
            prompt_tokens: 5,
            include_usage: true,
            continuous_usage: false,
            finish_reason: "length",
        }
    }

    fn parse(frame: &[u8]) -> serde_json::Value {
        let s = std::str::from_utf8(frame).unwrap();
        let body = s
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn completion_frames_are_valid_json() {
        let s = spec(Kind::Completion);
        let mut b = BytesMut::new();
        s.token_frame(&mut b, 0, 1, false);
        let v = parse(&b);
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], WORDS[0]);
        assert!(v["choices"][0]["finish_reason"].is_null());
        let mut b = BytesMut::new();
        s.token_frame(&mut b, 1, 3, true);
        let v = parse(&b);
        assert_eq!(v["choices"][0]["text"], format!("{}{}", WORDS[1], WORDS[2]));
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        let mut b = BytesMut::new();
        s.usage_frame(&mut b, 3);
        let v = parse(&b);
        assert_eq!(v["choices"].as_array().unwrap().len(), 0);
        assert_eq!(v["usage"]["total_tokens"], 8);
    }

    #[test]
    fn chat_role_rides_on_the_first_token() {
        let mut s = spec(Kind::Chat);
        s.continuous_usage = true;
        let mut b = BytesMut::new();
        s.token_frame(&mut b, 0, 1, false);
        let v = parse(&b);
        assert_eq!(v["object"], "chat.completion.chunk");
        assert_eq!(v["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(v["choices"][0]["delta"]["content"], WORDS[0]);
        assert_eq!(v["usage"]["completion_tokens"], 1);
        let mut b = BytesMut::new();
        s.token_frame(&mut b, 1, 2, true);
        let v = parse(&b);
        assert!(v["choices"][0]["delta"].get("role").is_none());
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(response_text(17).split_whitespace().count(), 17);
    }
}
