//! The error model: every failure is an [`AgentError`] with a layer, a stable snake_case code and a
//! human-readable message. The codes are defined once, in the [`codes`] table below; nothing else in
//! the crate spells a code as a string literal.
//!
//! What the model is shown for a failed tool call ([`AgentError::to_model_text`]) is kept apart from
//! what the operator sees (`Display`, which adds the layer).

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// Where an error comes from. Stable, serialised as snake_case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorLayer {
    /// Configuration and registration (tool definitions, schemas, agent config).
    Config,
    /// Decoding untrusted text (tool-call arguments, JSON limits).
    Decode,
    /// Tool lookup, argument validation and execution.
    Tool,
    /// Cancellation by the user or the app.
    Cancelled,
    /// The run loop (round limit, loop detection, hooks, approvals).
    Runtime,
    /// The model provider (HTTP, SSE, response decoding).
    Provider,
    /// The state store (snapshots, journal, migrations).
    Persistence,
    /// A bug caught at a boundary (a panic turned into an error).
    Internal,
}

impl ErrorLayer {
    /// The stable snake_case name of the layer.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorLayer::Config => "config",
            ErrorLayer::Decode => "decode",
            ErrorLayer::Tool => "tool",
            ErrorLayer::Cancelled => "cancelled",
            ErrorLayer::Runtime => "runtime",
            ErrorLayer::Provider => "provider",
            ErrorLayer::Persistence => "persistence",
            ErrorLayer::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $name:ident = $code:literal => $layer:ident; )*) => {
        /// The table of stable error codes. Each constant is the code string; [`ALL`](codes::ALL)
        /// lists every code with its default layer.
        pub mod codes {
            use super::ErrorLayer;
            $( $(#[$doc])* pub const $name: &str = $code; )*
            /// Every code with its default layer, in table order.
            pub const ALL: &[(&str, ErrorLayer)] = &[ $( ($code, ErrorLayer::$layer), )* ];
        }
    };
}

error_codes! {
    // --- registration and configuration
    /// A tool definition has an empty (or blank) name.
    TOOL_NAME_EMPTY = "tool_name_empty" => Config;
    /// A tool name OpenAI-compatible APIs refuse: more than 64 characters, or a character other
    /// than ASCII letters, digits, `_` and `-` (the request would fail at every round).
    TOOL_NAME_INVALID = "tool_name_invalid" => Config;
    /// A tool with this name is already registered.
    TOOL_NAME_DUPLICATE = "tool_name_duplicate" => Config;
    /// An app's tool named `delegate_task`: the name is the runtime's delegation tool, whose
    /// calls run sub-agents (`Agent::enable_delegation`, the native config's `enableDelegation`).
    TOOL_NAME_RESERVED = "tool_name_reserved" => Config;
    /// A schema uses a keyword outside the whitelist (the message names it and its path).
    SCHEMA_UNSUPPORTED_KEYWORD = "schema_unsupported_keyword" => Config;
    /// `type` is missing where required, not a string / array of strings, or names an unknown type.
    SCHEMA_INVALID_TYPE = "schema_invalid_type" => Config;
    /// `required` is not an array of unique strings.
    SCHEMA_INVALID_REQUIRED = "schema_invalid_required" => Config;
    /// `properties` is not an object of schemas.
    SCHEMA_INVALID_PROPERTIES = "schema_invalid_properties" => Config;
    /// `items` is not a schema.
    SCHEMA_INVALID_ITEMS = "schema_invalid_items" => Config;
    /// `enum` is not an array.
    SCHEMA_INVALID_ENUM = "schema_invalid_enum" => Config;
    /// `additionalProperties` is not a boolean or a schema.
    SCHEMA_INVALID_ADDITIONAL_PROPERTIES = "schema_invalid_additional_properties" => Config;
    /// A numeric bound or `multipleOf` is not a (positive, for multipleOf) number.
    SCHEMA_INVALID_BOUND = "schema_invalid_bound" => Config;
    /// A length / count bound is not a non-negative integer.
    SCHEMA_INVALID_LENGTH = "schema_invalid_length" => Config;
    /// `pattern` is not a string or does not compile as an ECMA-262 regular expression.
    SCHEMA_INVALID_PATTERN = "schema_invalid_pattern" => Config;
    /// `anyOf` is not a non-empty array of schemas.
    SCHEMA_INVALID_ANY_OF = "schema_invalid_any_of" => Config;
    /// `uniqueItems` is not a boolean.
    SCHEMA_INVALID_UNIQUE_ITEMS = "schema_invalid_unique_items" => Config;
    /// An annotation (`description`, `title`) has the wrong type.
    SCHEMA_INVALID_ANNOTATION = "schema_invalid_annotation" => Config;
    /// The root of a tool's parameter schema is not an object schema (or a schema is not an object).
    SCHEMA_INVALID_ROOT = "schema_invalid_root" => Config;
    /// A schema nests deeper than the limit.
    SCHEMA_TOO_DEEP = "schema_too_deep" => Config;
    /// The agent configuration is invalid (a message says which field).
    CONFIG_INVALID = "config_invalid" => Config;
    /// A session id is empty, too long, or contains a path separator, `..` or NUL.
    SESSION_ID_INVALID = "session_id_invalid" => Config;
    /// A session metadata key is empty, longer than 128 bytes or holds a control character.
    METADATA_KEY_INVALID = "metadata_key_invalid" => Config;
    /// Setting a metadata key would make the session's metadata larger than its limit (256 KiB of
    /// JSON); nothing was written. Remove keys (set them to null) to make room.
    METADATA_TOO_LARGE = "metadata_too_large" => Config;
    /// A call into the native module passed an argument of the wrong type or shape (a JS caller
    /// around the typed ArkTS wrappers): the message says what was expected.
    ARGUMENT_INVALID = "argument_invalid" => Config;
    /// Plain http:// to a host other than loopback without explicit permission.
    INSECURE_URL = "insecure_url" => Config;

    // --- decoding untrusted JSON
    /// The text is not valid JSON.
    JSON_INVALID = "json_invalid" => Decode;
    /// A tool call's arguments are not valid JSON because the model's output was cut off at its
    /// token limit (the answer's finish reason is `length`): the call did not run.
    TOOL_ARGUMENTS_TRUNCATED = "tool_arguments_truncated" => Decode;
    /// Valid JSON, but not an object where an object is required.
    JSON_NOT_OBJECT = "json_not_object" => Decode;
    /// Nested deeper than the limit.
    JSON_TOO_DEEP = "json_too_deep" => Decode;
    /// Longer than the size limit.
    JSON_TOO_LARGE = "json_too_large" => Decode;
    /// A number that JSON (and JCS) cannot represent (NaN, infinity).
    JSON_NUMBER_INVALID = "json_number_invalid" => Decode;

    // --- the ArkTS bindings' readers (`JsonError`): JSON that lacks the shape a class needs
    /// A pending approval batch or item lacks a field or has one of the wrong type.
    APPROVAL_INVALID = "approval_invalid" => Decode;
    /// An approval decision other than `pending`, `approved` or `denied`.
    APPROVAL_DECISION_UNKNOWN = "approval_decision_unknown" => Decode;
    /// An approval policy action other than `allow`, `deny` or `requireConfirmation`.
    APPROVAL_ACTION_UNKNOWN = "approval_action_unknown" => Decode;
    /// An agent event lacks a field its type needs.
    EVENT_INVALID = "event_invalid" => Decode;
    /// A chat message lacks its role or a field the role needs.
    MESSAGE_INVALID = "message_invalid" => Decode;
    /// A run outcome lacks its status or a field the status needs.
    RUN_OUTCOME_INVALID = "run_outcome_invalid" => Decode;
    /// A session summary (`Agent.listSessions`) lacks a field or has one of the wrong type.
    SESSION_SUMMARY_INVALID = "session_summary_invalid" => Decode;
    /// A run status the bindings do not know.
    RUN_STATUS_UNKNOWN = "run_status_unknown" => Decode;
    /// A tool call lacks its id, name or arguments.
    TOOL_CALL_INVALID = "tool_call_invalid" => Decode;
    /// A tool definition lacks a field or has one of the wrong type.
    TOOL_DEFINITION_INVALID = "tool_definition_invalid" => Decode;
    /// A risk level other than `safe`, `sensitive` or `dangerous`.
    TOOL_RISK_LEVEL_UNKNOWN = "tool_risk_level_unknown" => Decode;
    /// A tool timeout given to an ArkTS `ToolDefinition` that is not a positive integer of
    /// milliseconds.
    TOOL_TIMEOUT_INVALID = "tool_timeout_invalid" => Config;

    // --- tools
    /// No tool with this name is registered.
    TOOL_NOT_FOUND = "tool_not_found" => Tool;
    /// A value has the wrong JSON type.
    TOOL_ARGUMENT_TYPE_MISMATCH = "tool_argument_type_mismatch" => Tool;
    /// A required property is missing.
    TOOL_ARGUMENT_REQUIRED = "tool_argument_required" => Tool;
    /// A value is not one of `enum`.
    TOOL_ARGUMENT_ENUM = "tool_argument_enum" => Tool;
    /// A value differs from `const`.
    TOOL_ARGUMENT_CONST = "tool_argument_const" => Tool;
    /// A property not allowed by `additionalProperties`.
    TOOL_ARGUMENT_ADDITIONAL_PROPERTY = "tool_argument_additional_property" => Tool;
    /// A number below `minimum` / at or below `exclusiveMinimum`.
    TOOL_ARGUMENT_MINIMUM = "tool_argument_minimum" => Tool;
    /// A number above `maximum` / at or above `exclusiveMaximum`.
    TOOL_ARGUMENT_MAXIMUM = "tool_argument_maximum" => Tool;
    /// A number that is not a multiple of `multipleOf`.
    TOOL_ARGUMENT_MULTIPLE_OF = "tool_argument_multiple_of" => Tool;
    /// A string shorter than `minLength` or longer than `maxLength` (in code points).
    TOOL_ARGUMENT_LENGTH = "tool_argument_length" => Tool;
    /// A string that does not match `pattern`.
    TOOL_ARGUMENT_PATTERN = "tool_argument_pattern" => Tool;
    /// An array with fewer than `minItems` or more than `maxItems` items.
    TOOL_ARGUMENT_ITEMS_COUNT = "tool_argument_items_count" => Tool;
    /// An array whose items are not unique under `uniqueItems`.
    TOOL_ARGUMENT_UNIQUE_ITEMS = "tool_argument_unique_items" => Tool;
    /// A value that matches none of `anyOf`.
    TOOL_ARGUMENT_ANY_OF = "tool_argument_any_of" => Tool;
    /// A value where the schema is `false` (a property or item that must not be there).
    TOOL_ARGUMENT_NOT_ALLOWED = "tool_argument_not_allowed" => Tool;
    /// Several violations at once (the "collect all" validation mode); the message lists them.
    TOOL_ARGUMENTS_INVALID = "tool_arguments_invalid" => Tool;
    /// The executor failed (an error that is not a domain error, or a panic).
    TOOL_EXECUTION_FAILED = "tool_execution_failed" => Tool;
    /// The executor did not finish within its timeout.
    TOOL_TIMEOUT = "tool_timeout" => Tool;
    /// A binding's executor could not even be started within its timeout (the app's JS thread
    /// was busy all along): the tool did not run.
    TOOL_NOT_STARTED = "tool_not_started" => Tool;
    /// The executor returned something that is not a ToolResult (bindings).
    TOOL_RESULT_INVALID = "tool_result_invalid" => Tool;
    /// The tool's result (after the after-hooks) is larger than the agent's `max_result_bytes`.
    TOOL_RESULT_TOO_LARGE = "tool_result_too_large" => Tool;
    /// The call was denied (by the approval policy, the user or a hook).
    TOOL_DENIED = "tool_denied" => Tool;
    /// The call was not run: another call of its batch was denied, the batch was dismissed, or its
    /// tool was registered anew (or needs a confirmation nobody was asked for) since the call was
    /// checked. Nothing of it ran.
    TOOL_NOT_RUN = "tool_not_run" => Tool;
    /// The call was started but the process stopped before it finished.
    TOOL_INTERRUPTED = "tool_interrupted" => Tool;

    // --- cancellation
    /// The call was cancelled before or while it ran.
    TOOL_CANCELLED = "tool_cancelled" => Cancelled;
    /// The run was cancelled. Not returned at present: a cancelled run ends with status
    /// `cancelled` and no error (a cancelled call is `tool_cancelled`).
    RUN_CANCELLED = "run_cancelled" => Cancelled;

    // --- runtime
    /// The loop detector found the same call signature (or a short cycle) filling its window.
    LOOP_DETECTED = "loop_detected" => Runtime;
    /// The run reached its round limit.
    MAX_ROUNDS = "max_rounds" => Runtime;
    /// A hook aborted the run.
    HOOK_ABORTED = "hook_aborted" => Runtime;
    /// A hook tried to change a tool call's id.
    HOOK_CALL_ID_CHANGED = "hook_call_id_changed" => Runtime;
    /// A hook tried to change a tool call's tool name (the call would run another tool).
    HOOK_CALL_NAME_CHANGED = "hook_call_name_changed" => Runtime;
    /// A hook itself failed.
    HOOK_FAILED = "hook_failed" => Runtime;
    /// The app's approval policy failed (threw, rejected, answered something that is not a
    /// decision, or did not answer in time); the call fails closed and needs the user's
    /// confirmation.
    APPROVAL_POLICY_FAILED = "approval_policy_failed" => Runtime;
    /// An approval id that the pending batch does not hold.
    APPROVAL_NOT_FOUND = "approval_not_found" => Runtime;
    /// An approval that was already decided.
    APPROVAL_ALREADY_DECIDED = "approval_already_decided" => Runtime;
    /// A decision whose call id or argument hash does not match the pending item.
    APPROVAL_MISMATCH = "approval_mismatch" => Runtime;
    /// There is no pending approval batch to decide or resume.
    NO_PENDING_APPROVAL = "no_pending_approval" => Runtime;
    /// Resume was asked while decisions are still pending.
    APPROVAL_PENDING = "approval_pending" => Runtime;
    /// A run was started while another is active on the same session. Not returned at present:
    /// that run, resume or decision fails with `session_busy`.
    RUN_IN_PROGRESS = "run_in_progress" => Runtime;
    /// The sub-agent depth limit was reached.
    DELEGATION_DEPTH_EXCEEDED = "delegation_depth_exceeded" => Runtime;
    /// A worker agent's batch needs user approval (the worker session is suspended).
    WORKER_AWAITING_APPROVAL = "worker_awaiting_approval" => Runtime;
    /// The session is in a state that does not allow the operation.
    INVALID_STATE = "invalid_state" => Runtime;

    // --- provider
    /// Could not connect (DNS, TCP, TLS).
    PROVIDER_CONNECT = "provider_connect" => Provider;
    /// A timeout (connect, first byte, idle between chunks, total).
    PROVIDER_TIMEOUT = "provider_timeout" => Provider;
    /// The provider is limiting the rate of requests: a 429, or an error body whose code says so
    /// (Zhipu 1302/1303/1305/1312, MiniMax 1002/1039/1041/2045, Qianfan 18/336501...), any status,
    /// a 200 included, after the retries. Passing: slow down, or try again later.
    PROVIDER_RATE_LIMITED = "provider_rate_limited" => Provider;
    /// The account's quota or balance is used up, or its plan's limit for the day (or other
    /// period) is reached: a 402, or an error body whose code says so (OpenAI
    /// `insufficient_quota`, DeepSeek's 402 "Insufficient Balance", Moonshot
    /// `exceeded_current_quota_error`, Zhipu 1113/1304/1308-1310, MiniMax 1008/2056, Qianfan 17/19).
    /// Lasting: never retried, as no wait of seconds changes it; someone must top up the account
    /// or raise its limit.
    PROVIDER_QUOTA_EXHAUSTED = "provider_quota_exhausted" => Provider;
    /// The provider's moderation refused the request's input or withheld the answer (MiniMax
    /// 1026/1027 "new_sensitive", Zhipu 1301, DashScope `DataInspectionFailed`, Azure OpenAI
    /// `content_filter`), whatever status it came with. Never retried: the same request meets the
    /// same filter; change the input (or tell the user to).
    PROVIDER_CONTENT_FILTERED = "provider_content_filtered" => Provider;
    /// The provider answered with an HTTP error status (the code of its error body when it has one),
    /// or sent an error body with a 2xx, whole or inside its stream, whose code names none of the
    /// kinds above (an unknown provider code, a gateway's `{"code": 500, ...}`).
    PROVIDER_HTTP_STATUS = "provider_http_status" => Provider;
    /// 401 / 403, or an error body whose code says the key or account is refused (an invalid or
    /// expired key, a locked or inactive account: Zhipu 1000-1004/1110-1112/1121, MiniMax
    /// 1004/2049, Qianfan 110/111...). Never retried.
    PROVIDER_AUTH = "provider_auth" => Provider;
    /// A response or chunk that could not be decoded (the raw body is kept, truncated).
    PROVIDER_DECODE = "provider_decode" => Provider;
    /// A response larger than the size limit.
    PROVIDER_RESPONSE_TOO_LARGE = "provider_response_too_large" => Provider;
    /// The stream broke off before it finished.
    PROVIDER_STREAM_INTERRUPTED = "provider_stream_interrupted" => Provider;
    /// A scripted model ran out of scripted responses.
    PROVIDER_SCRIPT_EXHAUSTED = "provider_script_exhausted" => Provider;
    /// TLS configuration failed (bad extra root PEM...).
    PROVIDER_TLS = "provider_tls" => Provider;

    // --- persistence
    /// Reading or writing the state directory failed.
    STATE_IO = "state_io" => Persistence;
    /// A snapshot or journal could not be decoded and no good fallback exists (or a file stands
    /// where a session's directory should be).
    STATE_CORRUPT = "state_corrupt" => Persistence;
    /// The state was written by a newer schema version than this code knows; the file is left untouched.
    STATE_VERSION_UNSUPPORTED = "state_version_unsupported" => Persistence;
    /// A migration step failed.
    STATE_MIGRATION_FAILED = "state_migration_failed" => Persistence;
    /// The session does not exist.
    SESSION_NOT_FOUND = "session_not_found" => Persistence;
    /// The state store cannot list its sessions (an app's own `StateStore` that does not
    /// implement `list`); nothing was read. The listing is not empty: it is unknown.
    STATE_LIST_UNSUPPORTED = "state_list_unsupported" => Persistence;
    /// Another agent or process is writing the session (a run, a resume or a decision in
    /// progress); nothing was done. Try again once it has finished.
    SESSION_BUSY = "session_busy" => Persistence;

    // --- internal
    /// A panic caught at a boundary.
    INTERNAL_PANIC = "internal_panic" => Internal;
}

/// The crate's error: a layer, a stable snake_case code, and a message.
///
/// Codes of the crate are listed in [`codes`]; an executor's own domain error keeps its own code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{layer}/{code}: {message}")]
pub struct AgentError {
    /// Where the error comes from.
    pub layer: ErrorLayer,
    /// Stable snake_case code.
    pub code: Cow<'static, str>,
    /// What happened, for people (never contains the API key).
    pub message: String,
}

impl AgentError {
    /// An error with an explicit layer and code.
    pub fn new(layer: ErrorLayer, code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        AgentError { layer, code: code.into(), message: message.into() }
    }

    /// An error for one of the crate's codes, with the layer the [`codes`] table gives it.
    pub fn of(code: &'static str, message: impl Into<String>) -> Self {
        let layer =
            codes::ALL.iter().find(|(c, _)| *c == code).map(|(_, l)| *l).unwrap_or(ErrorLayer::Internal);
        AgentError::new(layer, code, message)
    }

    /// A config-layer error.
    pub fn config(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        AgentError::new(ErrorLayer::Config, code, message)
    }

    /// A decode-layer error.
    pub fn decode(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        AgentError::new(ErrorLayer::Decode, code, message)
    }

    /// A tool-layer error (also what an executor returns for its own domain errors).
    pub fn tool(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        AgentError::new(ErrorLayer::Tool, code, message)
    }

    /// A runtime-layer error.
    pub fn runtime(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        AgentError::new(ErrorLayer::Runtime, code, message)
    }

    /// A provider-layer error.
    pub fn provider(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        AgentError::new(ErrorLayer::Provider, code, message)
    }

    /// A persistence-layer error.
    pub fn persistence(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        AgentError::new(ErrorLayer::Persistence, code, message)
    }

    /// A cancellation.
    pub fn cancelled(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        AgentError::new(ErrorLayer::Cancelled, code, message)
    }

    /// The generic failure of an executor (anything that is not a domain error).
    pub fn execution_failed(message: impl Into<String>) -> Self {
        AgentError::of(codes::TOOL_EXECUTION_FAILED, message)
    }

    /// True when this is a cancellation.
    pub fn is_cancelled(&self) -> bool {
        self.layer == ErrorLayer::Cancelled
    }

    /// What the model is shown when this error becomes a tool result: the code and the message,
    /// without the layer (an operator detail).
    pub fn to_model_text(&self) -> String {
        format!("error [{}]: {}", self.code, self.message)
    }
}

/// The longest code [`is_stable_code`] accepts, in bytes.
pub const MAX_CODE_LEN: usize = 64;

/// Whether `code` has the form of a stable error code: snake_case ASCII (`^[a-z][a-z0-9_]*$`),
/// at most [`MAX_CODE_LEN`] bytes. Every code of the [`codes`] table has it; a binding uses it to
/// tell an executor's own domain error (kept with its code) from any other thrown value (which
/// becomes `tool_execution_failed`): `ERR_INVALID_ARG`, `ENOENT`, `""` or a sentence are not codes.
pub fn is_stable_code(code: &str) -> bool {
    let mut bytes = code.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && code.len() <= MAX_CODE_LEN
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
}

/// Shorthand for results of this crate.
pub type Result<T, E = AgentError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_are_unique_snake_case() {
        let mut seen = HashSet::new();
        for (code, _) in codes::ALL {
            assert!(seen.insert(*code), "duplicate code {code}");
            assert!(is_stable_code(code), "{code} of the table is not a stable code");
            assert!(!code.ends_with('_'), "{code} ends with `_`");
        }
    }

    #[test]
    fn stable_codes_are_bounded_snake_case() {
        for code in ["plan_todo_status_unknown", "a", "x1", "e_404", "a_"] {
            assert!(is_stable_code(code), "{code}");
        }
        assert!(is_stable_code(&"a".repeat(MAX_CODE_LEN)));
        let too_long = "a".repeat(MAX_CODE_LEN + 1);
        for code in [
            "",
            "ERR_INVALID_ARG",
            "ENOENT",
            "Plan_x",
            "_private",
            "1abc",
            "has space",
            "dash-ed",
            "dot.ted",
            "caf\u{e9}",
            "a\n",
            too_long.as_str(),
        ] {
            assert!(!is_stable_code(code), "{code:?}");
        }
    }

    #[test]
    fn of_takes_the_layer_from_the_table() {
        let e = AgentError::of(codes::TOOL_CANCELLED, "stop");
        assert_eq!(e.layer, ErrorLayer::Cancelled);
        assert_eq!(e.to_string(), "cancelled/tool_cancelled: stop");
        assert_eq!(AgentError::of(codes::JSON_INVALID, "x").layer, ErrorLayer::Decode);
    }

    #[test]
    fn serialises_layer_and_code_as_strings() {
        let e = AgentError::of(codes::TOOL_NOT_FOUND, "Tool not found: x");
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["layer"], "tool");
        assert_eq!(v["code"], "tool_not_found");
    }
}
