//! The OpenAI-style error body, `{"error": {"message", "type", "code", "param"}}`, which most
//! compatible providers also use (some put a number in `code`, some send a bare string), and the
//! top-level form others use (`{"code", "message"}`: see [`ProviderErrorDetail::of_body`]).

use serde::Deserialize;

/// `{"error": ...}` as an HTTP error body or as an SSE payload.
#[derive(Debug, Clone, Deserialize)]
pub struct ProviderErrorBody {
    /// The error.
    pub error: ProviderErrorDetail,
}

/// The inside of an error body. Every field is optional; a bare string becomes the message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderErrorDetail {
    /// What went wrong.
    pub message: Option<String>,
    /// The provider's error type (`invalid_request_error`...).
    pub kind: Option<String>,
    /// The provider's error code, as text (numbers are turned into text).
    pub code: Option<String>,
    /// The offending parameter, if named.
    pub param: Option<String>,
}

impl<'de> Deserialize<'de> for ProviderErrorDetail {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        let text = |v: Option<&serde_json::Value>| match v {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        Ok(match &v {
            serde_json::Value::Object(m) => ProviderErrorDetail {
                message: text(m.get("message")),
                kind: text(m.get("type")),
                code: text(m.get("code")),
                param: text(m.get("param")),
            },
            serde_json::Value::String(s) => {
                ProviderErrorDetail { message: Some(s.clone()), ..Default::default() }
            }
            other => ProviderErrorDetail { message: Some(other.to_string()), ..Default::default() },
        })
    }
}

impl ProviderErrorDetail {
    /// The error a JSON body describes, if it describes one:
    /// - `{"error": ...}` (OpenAI and most compatible providers: GLM, Qwen's compatible mode,
    ///   Moonshot, DeepSeek), read as [`ProviderErrorBody`] reads it;
    /// - otherwise an object with no choices whose `message` (or `msg`) is text and whose `code`
    ///   or `success` does not say it succeeded (`"code":0,"message":"Success"` is iFlytek
    ///   Spark's every chunk, not an error; see `says_success`): the error at the top level, with its `code`, `type` and `param` (DashScope's native errors
    ///   `{"code": "DataInspectionFailed", "message": ..., "request_id": ...}`, Zhipu's older API
    ///   `{"code": 1261, "msg": ..., "success": false}`, vLLM's `{"object": "error", ...}`,
    ///   gateways such as one-api `{"code": 500, "message": ..., "data": null}`).
    ///
    /// `None` for anything else (not JSON, not an object, a chat completion).
    pub fn of_body(text: &str) -> Option<ProviderErrorDetail> {
        let serde_json::Value::Object(mut map) = serde_json::from_str(text).ok()? else {
            return None;
        };
        match map.remove("error") {
            Some(serde_json::Value::Null) | None => {}
            Some(error) => return serde_json::from_value(error).ok(),
        }
        let has_choices = match map.get("choices") {
            Some(serde_json::Value::Array(choices)) => !choices.is_empty(),
            Some(serde_json::Value::Null) | None => false,
            Some(_) => true,
        };
        let message = ["message", "msg"].into_iter().find_map(|k| match map.get(k) {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            _ => None,
        });
        let message = message?;
        if has_choices || says_success(&map, &message) {
            return None;
        }
        map.insert("message".into(), message.into());
        serde_json::from_value(serde_json::Value::Object(map)).ok()
    }

    /// Whether the error lasts until someone sees to the account, so retrying only delays it:
    /// OpenAI's `insufficient_quota` (sent with a 429), Moonshot's `exceeded_current_quota_error`
    /// (a 429 for an exhausted quota or balance: "You exceeded your current quota, please check
    /// your plan and billing details", forum.moonshot.ai/t/429-insufficient-balance/244; its
    /// passing limits are `rate_limit_reached_error` and `engine_overloaded_error`), and Zhipu's
    /// account codes, also sent with a 429 (docs.z.ai/api-reference/api-code: 1110 inactive, 1111
    /// no such account, 1112 locked, 1113 in arrears, 1121 locked for irregular activity).
    pub fn is_lasting(&self) -> bool {
        const LASTING: [&str; 7] =
            ["insufficient_quota", "exceeded_current_quota_error", "1110", "1111", "1112", "1113", "1121"];
        [&self.code, &self.kind].into_iter().flatten().any(|c| LASTING.contains(&c.as_str()))
    }

    /// `[code, type] message` in one line (the parts the provider gave).
    pub fn describe(&self) -> String {
        let mut tags: Vec<&str> = Vec::new();
        if let Some(c) = &self.code {
            tags.push(c);
        }
        if let Some(k) = &self.kind {
            tags.push(k);
        }
        let mut s = String::new();
        if !tags.is_empty() {
            s.push_str(&format!("[{}] ", tags.join(", ")));
        }
        s.push_str(self.message.as_deref().unwrap_or("(no message)"));
        if let Some(p) = &self.param {
            s.push_str(&format!(" (param {p})"));
        }
        s
    }
}

/// Whether a top-level object with a `message` (or `msg`) says it succeeded, so it is no error:
/// `"success": true`, a `code` of `0` or `200` (number or text) or `"success"`/`"ok"` (any case),
/// or, with no code, a message that is just `success` or `ok`. iFlytek Spark's compatible API
/// puts `"code":0,"message":"Success"` on every chunk, and wrappers (`{"code":0,"msg":"ok",
/// "data":...}`) say success this way: a chunk of theirs with no choices is a keep-alive, not the
/// stream's error.
fn says_success(map: &serde_json::Map<String, serde_json::Value>, message: &str) -> bool {
    use serde_json::Value;
    let success_word = |s: &str| s.eq_ignore_ascii_case("success") || s.eq_ignore_ascii_case("ok");
    if map.get("success") == Some(&Value::Bool(true)) {
        return true;
    }
    match map.get("code") {
        Some(Value::Number(n)) => n.as_f64().is_some_and(|c| c == 0.0 || c == 200.0),
        Some(Value::String(s)) => {
            let s = s.trim();
            s == "0" || s == "200" || success_word(s)
        }
        Some(Value::Null) | None => success_word(message.trim()),
        Some(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_openai_and_numeric_code_bodies() {
        let b: ProviderErrorBody = serde_json::from_str(
            r#"{"error":{"message":"Rate limit","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
        )
        .unwrap();
        assert_eq!(b.error.code.as_deref(), Some("rate_limit_exceeded"));
        assert_eq!(b.error.describe(), "[rate_limit_exceeded, requests] Rate limit");
        let b: ProviderErrorBody =
            serde_json::from_str(r#"{"error":{"code":1214,"message":"bad"}}"#).unwrap();
        assert_eq!(b.error.code.as_deref(), Some("1214"));
        let b: ProviderErrorBody = serde_json::from_str(r#"{"error":"just text"}"#).unwrap();
        assert_eq!(b.error.message.as_deref(), Some("just text"));
    }

    #[test]
    fn the_error_of_a_body_in_either_form() {
        let of = |t: &str| ProviderErrorDetail::of_body(t).map(|d| d.describe());
        assert_eq!(of(r#"{"error":{"code":1214,"message":"bad"}}"#).as_deref(), Some("[1214] bad"));
        assert_eq!(of(r#"{"error":"text","message":"ignored"}"#).as_deref(), Some("text"));
        assert_eq!(
            of(r#"{"code":"Arrearage","message":"Access denied","request_id":"r"}"#).as_deref(),
            Some("[Arrearage] Access denied")
        );
        assert_eq!(
            of(r#"{"code":1261,"msg":"too long","success":false}"#).as_deref(),
            Some("[1261] too long")
        );
        assert_eq!(
            of(r#"{"object":"error","message":"m","type":"BadRequestError","param":"p","code":400,"error":null}"#)
                .as_deref(),
            Some("[400, BadRequestError] m (param p)")
        );
        assert_eq!(of(r#"{"message":"Unauthorized","choices":null}"#).as_deref(), Some("Unauthorized"));
        // Not an error: a chat completion, no message, not an object, not JSON.
        for t in [
            r#"{"choices":[{"message":{"content":"x"}}],"message":"odd"}"#,
            r#"{"code":0,"data":{}}"#,
            r#"{"code":0,"message":"Success","sid":"s"}"#,
            r#"{"code":"200","msg":"success"}"#,
            r#"{"success":true,"msg":"done"}"#,
            r#"{"msg":" OK "}"#,
            r#"{"message":7}"#,
            r#"["message"]"#,
            "message: no",
        ] {
            assert_eq!(of(t), None, "{t}");
        }
        assert_eq!(of(r#"{"code":1,"msg":"ok"}"#).as_deref(), Some("[1] ok"));
        assert_eq!(of(r#"{"msg":"okay?","success":false}"#).as_deref(), Some("okay?"));
        let lasting = |t: &str| ProviderErrorDetail::of_body(t).is_some_and(|d| d.is_lasting());
        assert!(lasting(r#"{"error":{"type":"exceeded_current_quota_error","message":"m"}}"#));
        assert!(lasting(r#"{"code":1113,"msg":"arrears"}"#));
        assert!(!lasting(r#"{"error":{"type":"rate_limit_reached_error","message":"m"}}"#));
    }
}
