//! The OpenAI-style error body, `{"error": {"message", "type", "code", "param"}}`, which most
//! compatible providers also use (some put a number in `code`, some send a bare string).

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
    /// Whether the error lasts until someone sees to the account, so retrying only delays it:
    /// OpenAI's `insufficient_quota` (sent with a 429), and Zhipu's account codes, also sent with
    /// a 429 (docs.z.ai/api-reference/api-code: 1110 inactive, 1111 no such account, 1112 locked,
    /// 1113 in arrears, 1121 locked for irregular activity).
    pub fn is_lasting(&self) -> bool {
        const LASTING: [&str; 6] = ["insufficient_quota", "1110", "1111", "1112", "1113", "1121"];
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
}
