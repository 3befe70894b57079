//! The error bodies of compatible providers, read into one [`ProviderErrorDetail`]:
//! - the OpenAI-style `{"error": {"message", "type", "code", "param"}}`, which most compatible
//!   providers also use (some put a number in `code`, some send a bare string);
//! - the top-level form others use (`{"code", "message"}`), and `{"error": true, ...}` with the
//!   error's fields beside the flag;
//! - MiniMax's `{"base_resp": {"status_code", "status_msg"}}` and Baidu's (ERNIE, Qianfan's older
//!   API) `{"error_code", "error_msg"}`, both also sent with an HTTP 200.
//!
//! See [`ProviderErrorDetail::of_body`]. [`ProviderErrorDetail::stable_code`] maps the provider's
//! own code to the crate's stable codes (auth, rate limit, quota exhausted, content filtered),
//! reading a numeric code in the table of the form it came in: numbers mean different things to
//! different providers (1002 is a rate limit to MiniMax and an invalid token to Zhipu).
//! [`ProviderErrorDetail::equivalent_status`] says which HTTP status the error stands for, so an
//! error body sent with a 2xx is retried (or not) as that status would be.
//!
//! MiniMax's `base_resp` beside choices (a decision): MiniMax puts `base_resp` on its answers, 0
//! for success, and its published table gives every other code as a failure with a remedy (retry
//! later, check the key, change the input); none says the answer beside it is usable. 1027
//! ("output new_sensitive") is the output refused by moderation: choices beside it hold at most
//! what was written before the filter stopped it, and the table's remedy is to change the input
//! (MiniMax's own CLI reports 1027 as "output withheld by content moderation"). So a non-zero
//! `status_code` makes the whole body that error, whatever its choices hold: an answer cut by
//! moderation or by a failure is not one the agent may act on (its text may end mid-sentence, its
//! tool calls be incomplete). The same holds for a streamed chunk: one with a failed `base_resp`
//! is the stream's error and its deltas are not handed out (those of earlier chunks were, as they
//! came; the error ends the stream).

use crate::error::codes;
use serde::Deserialize;

/// `{"error": ...}` as an HTTP error body or as an SSE payload.
#[derive(Debug, Clone, Deserialize)]
pub struct ProviderErrorBody {
    /// The error.
    pub error: ProviderErrorDetail,
}

/// The form an error body came in, which says whose table its numeric `code` belongs to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ErrorBodyForm {
    /// `{"error": ...}` or an error at the top level (`{"code", "message"}`): OpenAI and the
    /// OpenAI-compatible providers (Zhipu's numeric codes, DashScope's, Qianfan's rate limits).
    #[default]
    Standard,
    /// MiniMax's `{"base_resp": {"status_code", "status_msg"}}`.
    MiniMax,
    /// Baidu's `{"error_code", "error_msg"}` (ERNIE / Qianfan's older API, Baidu AI Cloud).
    Baidu,
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
    /// The form the body came in (whose table `code` is read in).
    pub form: ErrorBodyForm,
}

/// A string or a number as text.
fn as_text(v: Option<&serde_json::Value>) -> Option<String> {
    match v {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}

/// The first of `keys` whose value is text.
fn first_string(map: &serde_json::Map<String, serde_json::Value>, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| match map.get(*k) {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        _ => None,
    })
}

/// Whether a status code (a number, or a number as text) is other than 0, the success of MiniMax's
/// `base_resp` and of Baidu's `error_code`.
pub(crate) fn is_failure_code(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Number(n) => n.as_f64().is_some_and(|c| c != 0.0),
        serde_json::Value::String(s) => {
            let s = s.trim();
            !s.is_empty() && s != "0"
        }
        _ => false,
    }
}

impl<'de> Deserialize<'de> for ProviderErrorDetail {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(match &v {
            serde_json::Value::Object(m) => ProviderErrorDetail {
                message: as_text(m.get("message")),
                kind: as_text(m.get("type")),
                code: as_text(m.get("code")),
                param: as_text(m.get("param")),
                form: ErrorBodyForm::Standard,
            },
            serde_json::Value::String(s) => {
                ProviderErrorDetail { message: Some(s.clone()), ..Default::default() }
            }
            other => ProviderErrorDetail { message: Some(other.to_string()), ..Default::default() },
        })
    }
}

/// A chunk's or body's `error` field: `null` and `false` say there is none (`{"error": false,
/// ...}` is a success flag); `true` is an error whose details are beside the flag (read with
/// [`ProviderErrorDetail::of_body`]); anything else is the error.
pub(crate) fn error_field<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Box<ProviderErrorDetail>>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(match v {
        serde_json::Value::Null | serde_json::Value::Bool(false) => None,
        serde_json::Value::Bool(true) => Some(Box::default()),
        other => Some(Box::new(serde_json::from_value(other).map_err(serde::de::Error::custom)?)),
    })
}

/// Provider codes (or types) that name an exhausted quota or balance, a used-up plan limit.
const QUOTA_CODES: &[&str] = &[
    // OpenAI (a 429 "You exceeded your current quota").
    "insufficient_quota",
    // Moonshot: a 429 for an exhausted quota or balance ("You exceeded your current quota,
    // please check your plan and billing details", forum.moonshot.ai/t/429-insufficient-balance/244).
    "exceeded_current_quota_error",
    // MiniMax's type in an `{"error": ...}` body ("insufficient balance (1008)").
    "insufficient_balance_error",
    // DashScope: the account is in arrears.
    "Arrearage",
    // Zhipu (docs.bigmodel.cn/cn/api/api-code): 1113 in arrears, 1304 the day's call limit,
    // 1308 a usage limit until its reset, 1309 the plan expired, 1310 the week's or month's limit.
    "1113",
    "1304",
    "1308",
    "1309",
    "1310",
];

/// Provider codes (or types) that name a refused key or an unusable account.
const AUTH_CODES: &[&str] = &[
    "invalid_api_key",
    "authentication_error",
    // Moonshot.
    "invalid_authentication_error",
    // DashScope.
    "InvalidApiKey",
    // Zhipu: 1000-1004 authentication failed (missing, invalid, expired token); 1110 inactive,
    // 1111 no such account, 1112 locked, 1121 locked for irregular activity.
    "1000",
    "1001",
    "1002",
    "1003",
    "1004",
    "1110",
    "1111",
    "1112",
    "1121",
];

/// Provider codes (or types) that name a passing rate limit.
const RATE_CODES: &[&str] = &[
    "rate_limit_exceeded",
    "rate_limit_error",
    // Moonshot.
    "rate_limit_reached_error",
    "engine_overloaded_error",
    // Qianfan (cloud.baidu.com/doc/WENXINWORKSHOP/s/hlzic283e: sent with an HTTP 200).
    "rpm_rate_limit_exceeded",
    "tpm_rate_limit_exceeded",
    "336501",
    "336502",
    // DashScope.
    "Throttling",
    "Throttling.RateQuota",
    // Zhipu: 1302 too many concurrent requests, 1303 too frequent, 1305 the API's traffic limit,
    // 1312 the model is too busy, try later.
    "1302",
    "1303",
    "1305",
    "1312",
];

/// Provider codes (or types) that name input or output refused by the provider's moderation.
const CONTENT_CODES: &[&str] = &[
    // Azure OpenAI: a prompt (or completion) filtered by its content management policy.
    "content_filter",
    // DashScope: "Input or output data may contain inappropriate content."
    "DataInspectionFailed",
    // Zhipu: the input or the generated content may be unsafe or sensitive.
    "1301",
];

/// Provider codes (or types) that name a failure on the provider's side that a later attempt may
/// not meet, as a 5xx does.
const SERVER_CODES: &[&str] = &[
    // OpenAI, inside a stream: "The server had an error while processing your request".
    "server_error",
    // Anthropic's type through compatible gateways: the service is overloaded.
    "overloaded_error",
    // DashScope: "An internal error has occured, please try again later."
    "InternalError",
];

impl ProviderErrorDetail {
    /// The error a JSON body describes, if it describes one:
    /// - `{"error": ...}` (OpenAI and most compatible providers: GLM, Qwen's compatible mode,
    ///   Moonshot, DeepSeek), read as [`ProviderErrorBody`] reads it; `{"error": true, ...}` is the
    ///   error at the top level (its `message`, `msg`, `error_msg`..., `code` or `error_code`,
    ///   `type`), and `{"error": false, ...}` says there is none;
    /// - MiniMax's `base_resp` whose `status_code` is not 0 (`status_msg` the message; MiniMax
    ///   sends it with an HTTP 200 too), with or without choices (see the module docs: a failed
    ///   `base_resp` beside choices is still the error);
    /// - otherwise, for an object with no choices:
    ///   - Baidu's `error_code` other than 0 (`error_msg` the message; ERNIE / Qianfan's older API
    ///     answers an HTTP 200 with it);
    ///   - an object whose `message` (or `msg`) is text and whose `code` or `success` does not say
    ///     it succeeded (`"code":0,"message":"Success"` is iFlytek Spark's every chunk, not an
    ///     error; see `says_success`): the error at the top level, with its `code`, `type` and
    ///     `param` (DashScope's native errors `{"code": "DataInspectionFailed", "message": ...,
    ///     "request_id": ...}`, Zhipu's older API `{"code": 1261, "msg": ..., "success": false}`,
    ///     Qianfan's rate limits `{"code": 336501, "msg": ...}`, vLLM's `{"object": "error", ...}`,
    ///     gateways such as one-api `{"code": 500, "message": ..., "data": null}`).
    ///
    /// `None` for anything else (not JSON, not an object, a chat completion).
    pub fn of_body(text: &str) -> Option<ProviderErrorDetail> {
        let serde_json::Value::Object(mut map) = serde_json::from_str(text).ok()? else {
            return None;
        };
        match map.remove("error") {
            Some(serde_json::Value::Null) | None => {}
            Some(serde_json::Value::Bool(false)) => return None,
            Some(serde_json::Value::Bool(true)) => return Some(Self::beside_a_flag(&map)),
            Some(error) => return serde_json::from_value(error).ok(),
        }
        if let Some(serde_json::Value::Object(base)) = map.get("base_resp") {
            if base.get("status_code").is_some_and(is_failure_code) {
                return Some(ProviderErrorDetail {
                    message: first_string(base, &["status_msg", "message"]),
                    code: as_text(base.get("status_code")),
                    form: ErrorBodyForm::MiniMax,
                    ..Default::default()
                });
            }
        }
        let has_choices = match map.get("choices") {
            Some(serde_json::Value::Array(choices)) => !choices.is_empty(),
            Some(serde_json::Value::Null) | None => false,
            Some(_) => true,
        };
        if has_choices {
            return None;
        }
        if map.get("error_code").is_some_and(is_failure_code) {
            return Some(ProviderErrorDetail {
                message: first_string(&map, &["error_msg", "message", "msg"]),
                code: as_text(map.get("error_code")),
                form: ErrorBodyForm::Baidu,
                ..Default::default()
            });
        }
        let message = first_string(&map, &["message", "msg"])?;
        if says_success(&map, &message) {
            return None;
        }
        map.insert("message".into(), message.into());
        serde_json::from_value(serde_json::Value::Object(map)).ok()
    }

    /// The error of `{"error": true, ...}`: its fields beside the flag.
    fn beside_a_flag(map: &serde_json::Map<String, serde_json::Value>) -> ProviderErrorDetail {
        ProviderErrorDetail {
            message: first_string(
                map,
                &["message", "msg", "error_msg", "error_message", "errmsg", "detail", "reason"],
            ),
            kind: as_text(map.get("type")),
            code: as_text(map.get("code")).or_else(|| as_text(map.get("error_code"))),
            param: as_text(map.get("param")),
            form: ErrorBodyForm::Standard,
        }
    }

    /// The crate's stable code for what the provider's own code (or type) names, when it names
    /// one of these: [`PROVIDER_QUOTA_EXHAUSTED`](codes::PROVIDER_QUOTA_EXHAUSTED) (a used-up
    /// quota, balance or plan limit), [`PROVIDER_AUTH`](codes::PROVIDER_AUTH) (a refused key, an
    /// unusable account), [`PROVIDER_RATE_LIMITED`](codes::PROVIDER_RATE_LIMITED) (a passing
    /// limit), [`PROVIDER_CONTENT_FILTERED`](codes::PROVIDER_CONTENT_FILTERED) (input or output
    /// refused by moderation). `None` for any other code: the HTTP status decides then.
    ///
    /// A numeric code is read in the table of its body's [`form`](Self::form): MiniMax (its
    /// published table, platform.minimax.io/docs/api-reference/errorcode: 1002 rate limit, 1039
    /// token limit (read as a tokens-per-minute limit, as the English table's "retry later" says;
    /// the Chinese table says to adjust max_tokens, which a retry does not do, but the retries are
    /// bounded), 1041 connection limit, 2045 rate growth limit,
    /// 1004 not authorized, 2049 invalid API key, 1008 insufficient balance, 2056 the Coding
    /// Plan's usage limit until the next 5-hour window, 1026/1027 input/output "new_sensitive";
    /// 1000/1001/1013/1024/1033 are failures on its side, see
    /// [`equivalent_status`](Self::equivalent_status); 2013 invalid params and 1042 too many
    /// invisible characters are the request's fault and left to the status), Baidu (17 the day's
    /// request limit, 19 the total limit, 4 and 18 the cluster's and the QPS limit, 336501/336502
    /// RPM/TPM, 6/13/14 no permission or failed authentication, 110/111 an invalid or expired
    /// access token), or else Zhipu's and the OpenAI-compatible providers' (see the tables).
    pub fn stable_code(&self) -> Option<&'static str> {
        let code = self.code.as_deref().map(str::trim);
        match self.form {
            ErrorBodyForm::MiniMax => {
                return match code? {
                    "1008" | "2056" => Some(codes::PROVIDER_QUOTA_EXHAUSTED),
                    "1004" | "2049" => Some(codes::PROVIDER_AUTH),
                    "1002" | "1039" | "1041" | "2045" => Some(codes::PROVIDER_RATE_LIMITED),
                    "1026" | "1027" => Some(codes::PROVIDER_CONTENT_FILTERED),
                    _ => None,
                }
            }
            ErrorBodyForm::Baidu => {
                return match code? {
                    "17" | "19" => Some(codes::PROVIDER_QUOTA_EXHAUSTED),
                    "6" | "13" | "14" | "110" | "111" => Some(codes::PROVIDER_AUTH),
                    "4" | "18" | "336501" | "336502" => Some(codes::PROVIDER_RATE_LIMITED),
                    _ => None,
                }
            }
            ErrorBodyForm::Standard => {}
        }
        let names = [code, self.kind.as_deref().map(str::trim)];
        let any_in = |table: &[&str]| names.iter().flatten().any(|c| table.contains(c));
        if any_in(QUOTA_CODES) {
            Some(codes::PROVIDER_QUOTA_EXHAUSTED)
        } else if any_in(AUTH_CODES) {
            Some(codes::PROVIDER_AUTH)
        } else if any_in(RATE_CODES) {
            Some(codes::PROVIDER_RATE_LIMITED)
        } else if any_in(CONTENT_CODES) {
            Some(codes::PROVIDER_CONTENT_FILTERED)
        } else {
            match self.http_status_code()? {
                401 | 403 => Some(codes::PROVIDER_AUTH),
                402 => Some(codes::PROVIDER_QUOTA_EXHAUSTED),
                429 => Some(codes::PROVIDER_RATE_LIMITED),
                _ => None,
            }
        }
    }

    /// The HTTP status a standard body's code is, when it is one: a code of three digits from
    /// 400 to 599 that no table above knows (OpenRouter's `error.code`, also in an error it sends
    /// inside a stream that began with a 200: `{"error": {"code": 502, "message": ...}}`; the
    /// providers of the tables use codes of other lengths or words).
    fn http_status_code(&self) -> Option<u16> {
        if self.form != ErrorBodyForm::Standard {
            return None;
        }
        let code = self.code.as_deref()?.trim();
        if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        code.parse().ok().filter(|status| (400..600).contains(status))
    }

    /// Whether the provider's code (or type) names a failure on its side that a later attempt may
    /// not meet: MiniMax 1000 (unknown error), 1001 (request timeout), 1024 (internal error) and
    /// 1033 (system error), each "retry later" in its table, and 1013 (internal service error in
    /// its older table, gone from the current one); Baidu 1 (unknown error), 2 (service temporarily unavailable), 336000
    /// (internal error) and 336100 (try again later); else the table above.
    fn is_server_side(&self) -> bool {
        let code = self.code.as_deref().map(str::trim);
        match self.form {
            ErrorBodyForm::MiniMax => matches!(code, Some("1000" | "1001" | "1013" | "1024" | "1033")),
            ErrorBodyForm::Baidu => matches!(code, Some("1" | "2" | "336000" | "336100")),
            ErrorBodyForm::Standard => {
                [code, self.kind.as_deref().map(str::trim)].iter().flatten().any(|c| SERVER_CODES.contains(c))
            }
        }
    }

    /// The HTTP status this error stands for, when the provider's code (or type) names one: 401
    /// a refused key or account, 402 an exhausted quota, 429 a rate limit, 400 content refused by
    /// moderation, 500 a failure on the provider's side ([`stable_code`](Self::stable_code) and
    /// the tables of `is_server_side`), else the status a standard body's code is (OpenRouter's
    /// 502, 408...); `None` for a code these tables do not know. An error body
    /// sent with a 2xx is retried as a response with this status would be (the client's rules:
    /// 429 and 5xx are, a lasting error never is); with `None` it is not, as any 4xx.
    pub fn equivalent_status(&self) -> Option<u16> {
        match self.stable_code() {
            Some(codes::PROVIDER_AUTH) => Some(401),
            Some(codes::PROVIDER_QUOTA_EXHAUSTED) => Some(402),
            Some(codes::PROVIDER_RATE_LIMITED) => Some(429),
            Some(codes::PROVIDER_CONTENT_FILTERED) => Some(400),
            _ if self.is_server_side() => Some(500),
            _ => self.http_status_code(),
        }
    }

    /// Whether the error lasts until someone sees to the account, so retrying only delays it: an
    /// exhausted quota or balance or a used-up plan limit, a refused key or an unusable account
    /// ([`stable_code`](Self::stable_code) is `provider_quota_exhausted` or `provider_auth`),
    /// whatever status it came with (Zhipu sends its account codes with a 429).
    pub fn is_lasting(&self) -> bool {
        matches!(self.stable_code(), Some(codes::PROVIDER_QUOTA_EXHAUSTED | codes::PROVIDER_AUTH))
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

    #[test]
    fn minimax_baidu_and_flagged_bodies() {
        let of = |t: &str| ProviderErrorDetail::of_body(t).map(|d| (d.describe(), d.form));
        assert_eq!(
            of(r#"{"id":"x","choices":null,"base_resp":{"status_code":1004,"status_msg":"login fail"}}"#),
            Some(("[1004] login fail".into(), ErrorBodyForm::MiniMax))
        );
        assert_eq!(
            of(r#"{"error_code":110,"error_msg":"Access token invalid or no longer valid"}"#),
            Some(("[110] Access token invalid or no longer valid".into(), ErrorBodyForm::Baidu))
        );
        assert_eq!(
            of(r#"{"error":true,"msg":"quota used up","code":"E42"}"#),
            Some(("[E42] quota used up".into(), ErrorBodyForm::Standard))
        );
        assert_eq!(
            of(r#"{"error":true,"error_message":"down","choices":[{"delta":{}}]}"#).map(|d| d.0),
            Some("down".into())
        );
        assert_eq!(of(r#"{"error":true}"#).map(|d| d.0), Some("(no message)".into()));
        // Success: base_resp 0 (MiniMax puts it on every answer), error_code 0, `"error": false`,
        // and any of them beside choices.
        for t in [
            r#"{"choices":[],"base_resp":{"status_code":0,"status_msg":"success"}}"#,
            r#"{"base_resp":{"status_code":"0","status_msg":""}}"#,
            r#"{"error_code":0,"error_msg":"","result":"x"}"#,
            r#"{"error":false,"message":"fine","data":{}}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"base_resp":{"status_code":0,"status_msg":""}}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"error_code":336003,"error_msg":"m"}"#,
        ] {
            assert_eq!(of(t), None, "{t}");
        }
    }

    #[test]
    fn provider_codes_are_read_in_the_table_of_their_form() {
        let code = |t: &str| ProviderErrorDetail::of_body(t).and_then(|d| d.stable_code());
        let quota = Some(codes::PROVIDER_QUOTA_EXHAUSTED);
        let auth = Some(codes::PROVIDER_AUTH);
        let rate = Some(codes::PROVIDER_RATE_LIMITED);
        let filtered = Some(codes::PROVIDER_CONTENT_FILTERED);
        for (t, want) in [
            (r#"{"error":{"code":"insufficient_quota","type":"insufficient_quota","message":"m"}}"#, quota),
            (r#"{"error":{"type":"exceeded_current_quota_error","message":"m"}}"#, quota),
            (r#"{"error":{"http_code":"429","type":"insufficient_balance_error","message":"m"}}"#, quota),
            (r#"{"error":{"code":"1113","message":"m"}}"#, quota),
            (r#"{"code":1308,"msg":"limit until 12:00"}"#, quota),
            (r#"{"code":"Arrearage","message":"m"}"#, quota),
            (r#"{"base_resp":{"status_code":1008,"status_msg":"insufficient balance"}}"#, quota),
            (r#"{"error_code":17,"error_msg":"Open api daily request limit reached"}"#, quota),
            (r#"{"error":{"code":"invalid_api_key","message":"m"}}"#, auth),
            (r#"{"error":{"code":"1002","message":"m"}}"#, auth),
            (r#"{"error":{"code":"1112","message":"locked"}}"#, auth),
            (r#"{"base_resp":{"status_code":2049,"status_msg":"invalid api key"}}"#, auth),
            (r#"{"error_code":111,"error_msg":"Access token expired"}"#, auth),
            (r#"{"error":{"code":"rate_limit_exceeded","message":"m"}}"#, rate),
            (r#"{"code":336501,"msg":"Rate limit reached for RPM"}"#, rate),
            (r#"{"error":{"code":"1302","message":"m"}}"#, rate),
            (r#"{"base_resp":{"status_code":1002,"status_msg":"rate limit"}}"#, rate),
            (r#"{"error_code":18,"error_msg":"Open api qps request limit reached"}"#, rate),
            (r#"{"error":{"code":"1301","message":"unsafe"}}"#, filtered),
            (r#"{"code":"DataInspectionFailed","message":"inappropriate content"}"#, filtered),
            (r#"{"error":{"code":"content_filter","message":"filtered","status":400}}"#, filtered),
            (r#"{"base_resp":{"status_code":1026,"status_msg":"input new_sensitive"}}"#, filtered),
            // Codes these tables do not know: the status decides.
            (r#"{"base_resp":{"status_code":2013,"status_msg":"invalid params"}}"#, None),
            (r#"{"error_code":336003,"error_msg":"invalid"}"#, None),
            (r#"{"error":{"code":"17","message":"not Baidu's"}}"#, None),
        ] {
            assert_eq!(code(t), want, "{t}");
        }
    }
    /// MiniMax's published table (platform.minimax.io/docs/api-reference/errorcode), each code
    /// of a chat completion with its stable code and the status it stands for (which decides a
    /// retry of a 200 that carries it).
    #[test]
    fn minimax_codes_of_its_published_table() {
        let quota = Some(codes::PROVIDER_QUOTA_EXHAUSTED);
        let auth = Some(codes::PROVIDER_AUTH);
        let rate = Some(codes::PROVIDER_RATE_LIMITED);
        let filtered = Some(codes::PROVIDER_CONTENT_FILTERED);
        for (code, want, status) in [
            (1000, None, Some(500)),
            (1001, None, Some(500)),
            (1002, rate, Some(429)),
            (1004, auth, Some(401)),
            (1008, quota, Some(402)),
            (1013, None, Some(500)),
            (1024, None, Some(500)),
            (1026, filtered, Some(400)),
            (1027, filtered, Some(400)),
            (1033, None, Some(500)),
            (1039, rate, Some(429)),
            (1041, rate, Some(429)),
            (1042, None, None),
            (2013, None, None),
            (2045, rate, Some(429)),
            (2049, auth, Some(401)),
            (2056, quota, Some(402)),
        ] {
            let body = format!(r#"{{"base_resp":{{"status_code":{code},"status_msg":"m"}}}}"#);
            let d = ProviderErrorDetail::of_body(&body).unwrap();
            assert_eq!((d.stable_code(), d.equivalent_status()), (want, status), "{code}");
            // The same number in another form is another provider's code.
            let standard = ProviderErrorDetail { code: Some(code.to_string()), ..Default::default() };
            if matches!(code, 1002 | 1004) {
                assert_eq!(standard.stable_code(), auth, "Zhipu's {code}");
            } else if status.is_some() {
                assert_ne!(standard.equivalent_status(), status, "{code} outside MiniMax's form");
            }
        }
    }

    #[test]
    fn the_status_an_error_body_stands_for() {
        let status = |t: &str| ProviderErrorDetail::of_body(t).and_then(|d| d.equivalent_status());
        for (t, want) in [
            (r#"{"error_code":336501,"error_msg":"Rate limit reached for RPM"}"#, Some(429)),
            (r#"{"error_code":18,"error_msg":"Open api qps request limit reached"}"#, Some(429)),
            (r#"{"error_code":4,"error_msg":"Open api request limit reached"}"#, Some(429)),
            (r#"{"error_code":2,"error_msg":"Service temporarily unavailable"}"#, Some(500)),
            (r#"{"error_code":336100,"error_msg":"try again later"}"#, Some(500)),
            (r#"{"error_code":17,"error_msg":"daily request limit reached"}"#, Some(402)),
            (r#"{"error_code":336003,"error_msg":"invalid"}"#, None),
            (r#"{"code":336501,"msg":"Rate limit reached for RPM"}"#, Some(429)),
            (r#"{"error":{"type":"server_error","message":"The server had an error"}}"#, Some(500)),
            (r#"{"error":{"type":"overloaded_error","message":"Overloaded"}}"#, Some(500)),
            (r#"{"code":"InternalError","message":"try again later"}"#, Some(500)),
            (r#"{"error":{"code":"insufficient_quota","message":"m"}}"#, Some(402)),
            (r#"{"error":{"code":"invalid_request_error","message":"m"}}"#, None),
            (r#"{"error":{"code":"2","message":"not Baidu's"}}"#, None),
        ] {
            assert_eq!(status(t), want, "{t}");
        }
    }

    /// A failed `base_resp` beside choices is the error (see the module docs): MiniMax's 1027
    /// with the part of the answer written before moderation withheld the rest.
    #[test]
    fn a_failed_base_resp_beside_choices_is_the_error() {
        let body = r#"{"id":"x","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Here is how to"}}],"base_resp":{"status_code":1027,"status_msg":"output new_sensitive"}}"#;
        let d = ProviderErrorDetail::of_body(body).unwrap();
        assert_eq!(d.describe(), "[1027] output new_sensitive");
        assert_eq!(
            (d.form, d.stable_code()),
            (ErrorBodyForm::MiniMax, Some(codes::PROVIDER_CONTENT_FILTERED))
        );
        let rate = r#"{"choices":[{"message":{"content":"x"}}],"base_resp":{"status_code":"1002","status_msg":"rate limit"}}"#;
        assert_eq!(
            ProviderErrorDetail::of_body(rate).and_then(|d| d.stable_code()),
            Some(codes::PROVIDER_RATE_LIMITED)
        );
    }
}
