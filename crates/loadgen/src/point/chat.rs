//! Chat prompts sized against the server's own tokenizer and chat template.

use super::*;

/// How a chat point's text prompts were sized against the server's tokenizer
/// (`summary.json`'s `chat_sizing`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatSizing {
    /// Words of the generated text per token of the server's tokenizer.
    pub words_per_token: f64,
    /// Tokens the chat template adds to every request (the same text tokenized as a
    /// user message minus as a plain prompt), taken off each request's text; 0 when the
    /// server cannot tokenize messages.
    pub template_tokens: u32,
    /// The tokenizer asked: `POST {target}/tokenize`, and the body key it took.
    pub tokenizer: String,
}

/// Tokens of `body` by the server's `/tokenize`; `None` when it has none or answers
/// nothing usable (llama.cpp answers `{"tokens": []}` to a key it does not take).
pub(super) async fn tokenize(
    client: &reqwest::Client,
    target: &str,
    body: serde_json::Value,
) -> Option<f64> {
    let r = client
        .post(format!("{target}/tokenize"))
        .json(&body)
        .send()
        .await
        .ok()?;
    let v: serde_json::Value = r.error_for_status().ok()?.json().await.ok()?;
    let count = v["count"]
        .as_f64()
        .or_else(|| v["tokens"].as_array().map(|t| t.len() as f64))?;
    (count > 0.0).then_some(count)
}

/// The server's tokenizer measured on a sample text: words per token (vLLM's and SGLang's
/// `/tokenize` take `prompt`, llama.cpp's `content`) and the chat template's own tokens
/// (vLLM tokenizes `messages` with the template); `None` when it has no `/tokenize`.
pub(super) async fn chat_sizing(
    client: &reqwest::Client,
    target: &str,
    model: &str,
) -> Option<ChatSizing> {
    let words = 400;
    let text = crate::prompt::prompt_text(0, 0, words, None);
    let mut found = None;
    for key in ["prompt", "content"] {
        let body = serde_json::json!({"model": model, key: text});
        if let Some(count) = tokenize(client, target, body).await {
            found = Some((count, key));
            break;
        }
    }
    let (count, key) = found?;
    let messages = serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": text}],
    });
    let template_tokens = tokenize(client, target, messages)
        .await
        .map_or(0, |with| (with - count).max(0.0) as u32);
    Some(ChatSizing {
        words_per_token: f64::from(words) / count,
        template_tokens,
        tokenizer: format!("POST {target}/tokenize ({key})"),
    })
}

/// A chat point whose text prompts are sized by the estimate, with the server's tokenizer
/// instead when it serves `/tokenize` (before any load); `None` when there is nothing to
/// change.
pub(super) async fn chat_calibration(
    client: &reqwest::Client,
    config: &LoadConfig,
) -> Option<(LoadConfig, ChatSizing)> {
    if config.prompt_method != PromptMethod::TextEstimated {
        return None;
    }
    let sizing = chat_sizing(client, &config.target, &config.model).await?;
    Some((
        LoadConfig {
            text_words_per_token: Some(sizing.words_per_token),
            chat_template_tokens: sizing.template_tokens,
            prompt_method: PromptMethod::TextCalibrated,
            ..config.clone()
        },
        sizing,
    ))
}
