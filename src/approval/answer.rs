//! The text form of a [`PolicyDecision`] that an app policy outside Rust answers with (the NAPI
//! binding's `Agent.setApprovalPolicy`), and its strict parser. Anything that is not exactly one
//! of the accepted forms is an error, so a caller can fail closed on it.
//!
//! Accepted answers (surrounding whitespace ignored):
//! - an action name: `allow`, `deny`, `requireConfirmation` (or `require_confirmation`), bare or
//!   as a JSON string;
//! - a JSON object `{"action": <an action name>, "reason"?: <string>}` with no other key.
//!
//! `deny` and `requireConfirmation` without a reason (or with a blank one) get a default reason
//! naming the tool; the reason of `allow` is ignored.

use super::PolicyDecision;
use crate::error::{codes, AgentError};
use serde::Deserialize;

/// The longest part of a wrong answer quoted back in the error message.
const QUOTED_CHARS: usize = 120;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerObject {
    action: String,
    #[serde(default)]
    reason: Option<String>,
}

enum Action {
    Allow,
    Deny,
    RequireConfirmation,
}

fn action(name: &str) -> Option<Action> {
    match name {
        "allow" => Some(Action::Allow),
        "deny" => Some(Action::Deny),
        "requireConfirmation" | "require_confirmation" => Some(Action::RequireConfirmation),
        _ => None,
    }
}

/// The answer, shortened for an error message.
fn quoted(answer: &str) -> String {
    let mut chars = answer.chars();
    let head: String = chars.by_ref().take(QUOTED_CHARS).collect();
    if chars.next().is_some() {
        format!("{head:?}...")
    } else {
        format!("{head:?}")
    }
}

fn wrong(answer: &str, why: impl std::fmt::Display) -> AgentError {
    AgentError::of(
        codes::APPROVAL_POLICY_FAILED,
        format!("the approval policy answered {}, which is not a decision: {why}", quoted(answer)),
    )
}

/// The decision an app policy's text answer stands for, about a call of `tool_name` (used in the
/// default reasons).
///
/// # Errors
/// `approval_policy_failed` (layer runtime) for anything but the accepted forms: an unknown action,
/// JSON that is not an action name or an object of the documented shape, an unknown key.
pub fn parse_policy_answer(answer: &str, tool_name: &str) -> Result<PolicyDecision, AgentError> {
    let text = answer.trim();
    let (name, reason) = if text.starts_with('{') {
        let object: AnswerObject = serde_json::from_str(text).map_err(|e| wrong(answer, e))?;
        (object.action, object.reason)
    } else if text.starts_with('"') {
        let name: String = serde_json::from_str(text).map_err(|e| wrong(answer, e))?;
        (name, None)
    } else {
        (text.to_string(), None)
    };
    let Some(action) = action(&name) else {
        return Err(wrong(answer, "the action must be allow, deny or requireConfirmation"));
    };
    let reason = reason.filter(|r| !r.trim().is_empty());
    Ok(match action {
        Action::Allow => PolicyDecision::Allow,
        Action::Deny => PolicyDecision::Deny(
            reason.unwrap_or_else(|| format!("the app's approval policy denies tool \"{tool_name}\"")),
        ),
        Action::RequireConfirmation => PolicyDecision::RequireConfirmation(
            reason.unwrap_or_else(|| format!("Tool \"{tool_name}\" requires confirmation")),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(answer: &str) -> Result<PolicyDecision, AgentError> {
        parse_policy_answer(answer, "wipe")
    }

    #[test]
    fn action_names_bare_or_json() {
        assert_eq!(parse("allow").unwrap(), PolicyDecision::Allow);
        assert_eq!(parse(" allow\n").unwrap(), PolicyDecision::Allow);
        assert_eq!(parse("\"allow\"").unwrap(), PolicyDecision::Allow);
        assert_eq!(
            parse("deny").unwrap(),
            PolicyDecision::Deny("the app's approval policy denies tool \"wipe\"".into())
        );
        assert_eq!(
            parse("requireConfirmation").unwrap(),
            PolicyDecision::RequireConfirmation("Tool \"wipe\" requires confirmation".into())
        );
        assert_eq!(parse("require_confirmation").unwrap(), parse("requireConfirmation").unwrap());
    }

    #[test]
    fn objects_carry_reasons() {
        assert_eq!(parse(r#"{"action":"allow","reason":"safe tool"}"#).unwrap(), PolicyDecision::Allow);
        assert_eq!(
            parse(r#"{"action":"deny","reason":"off hours"}"#).unwrap(),
            PolicyDecision::Deny("off hours".into())
        );
        assert_eq!(
            parse(r#"{"action":"requireConfirmation","reason":"ask"}"#).unwrap(),
            PolicyDecision::RequireConfirmation("ask".into())
        );
        // A blank reason gets the default, like a missing one.
        assert_eq!(parse(r#"{"action":"deny","reason":"  "}"#).unwrap(), parse("deny").unwrap());
        // The core's own serde form reads the same.
        let text = serde_json::to_string(&PolicyDecision::Deny("x".into())).unwrap();
        assert_eq!(parse(&text).unwrap(), PolicyDecision::Deny("x".into()));
    }

    #[test]
    fn anything_else_is_an_error() {
        for answer in [
            "",
            "Allow",
            "yes",
            "allow please",
            "{}",
            "{\"action\":\"allow\"",
            r#"{"action":"maybe"}"#,
            r#"{"action":"allow","reasn":"typo"}"#,
            r#"{"action":"deny","reason":42}"#,
            r#"{"action":null}"#,
            "[\"allow\"]",
            "\"nope\"",
            "null",
            "1",
        ] {
            let e = parse(answer).unwrap_err();
            assert_eq!(e.code, codes::APPROVAL_POLICY_FAILED, "{answer}");
            assert_eq!(e.layer, crate::error::ErrorLayer::Runtime);
        }
    }

    #[test]
    fn long_wrong_answers_are_shortened_in_the_message() {
        let answer = "x".repeat(10_000);
        let e = parse(&answer).unwrap_err();
        assert!(e.message.len() < 400, "{}", e.message);
        assert!(e.message.contains("..."));
    }
}
