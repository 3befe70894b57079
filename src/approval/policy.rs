//! The default approval policy and the argument hash that binds a decision to one call's arguments.

use super::{ApprovalPolicy, PolicyDecision};
use crate::message::ToolCall;
use crate::tool::{RiskLevel, ToolDefinition};
use ring::digest::{digest, SHA256};

/// The seed's policy: an unknown tool is allowed (the registry answers it with `tool_not_found`;
/// asking the user about a tool that cannot run is pointless), a safe tool is allowed, a sensitive
/// or dangerous tool needs the user's confirmation. It never denies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DefaultApprovalPolicy;

impl ApprovalPolicy for DefaultApprovalPolicy {
    fn decide(&self, call: &ToolCall, definition: Option<&ToolDefinition>) -> PolicyDecision {
        match definition.map(|d| d.risk_level) {
            None | Some(RiskLevel::Safe) => PolicyDecision::Allow,
            Some(RiskLevel::Sensitive) => PolicyDecision::RequireConfirmation(format!(
                "Sensitive tool \"{}\" requires confirmation",
                call.name
            )),
            Some(RiskLevel::Dangerous) => PolicyDecision::RequireConfirmation(format!(
                "Dangerous tool \"{}\" requires confirmation",
                call.name
            )),
        }
    }
}

/// The hash a pending item carries: `sha256:` and the lowercase hex SHA-256 of the call's
/// arguments in RFC 8785 canonical form, so the same arguments in another key order or spacing
/// hash the same. Arguments that are not JSON are hashed as their raw text; such text can never
/// equal a canonical JSON text (that would parse), so the two cases cannot collide.
pub fn arguments_hash(arguments: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(value) => sha256_text(crate::json::canonicalize(&value).as_bytes()),
        Err(_) => sha256_text(arguments.as_bytes()),
    }
}

/// `sha256:` and the lowercase hex SHA-256 of `bytes`.
pub(crate) fn sha256_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    push_hex(&mut out, digest(&SHA256, bytes).as_ref());
    out
}

/// Appends `bytes` to `out` as lowercase hex.
pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_sha256_hex_of_the_text() {
        // Known digest of the two bytes `{}` (canonical form of an empty object).
        assert_eq!(
            arguments_hash("{}"),
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert_eq!(arguments_hash(" { } "), arguments_hash("{}"));
    }

    #[test]
    fn unparsable_arguments_hash_their_raw_text() {
        assert_ne!(arguments_hash("{\"a\":"), arguments_hash("{\"a\": "));
        assert_eq!(arguments_hash("{\"a\":"), arguments_hash("{\"a\":"));
    }
}
