//! Session id checks: a session id names a directory under the store's root, so it must not be able
//! to name anything else.

use crate::error::{codes, AgentError};

/// The longest session id accepted, in bytes.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// Checks that a session id can safely name a directory: non-empty, at most
/// [`MAX_SESSION_ID_LEN`] bytes, not `.`, and free of `/`, `\`, `..`, NUL and other control
/// characters.
///
/// # Errors
/// `session_id_invalid`, with a message saying which rule failed (the id itself is shown escaped and
/// cut short, so a hostile id cannot flood a log).
pub fn validate_session_id(session_id: &str) -> Result<(), AgentError> {
    let why = if session_id.is_empty() {
        Some("is empty")
    } else if session_id.len() > MAX_SESSION_ID_LEN {
        Some("is longer than 128 bytes")
    } else if session_id.contains('/') || session_id.contains('\\') {
        Some("contains a path separator")
    } else if session_id.contains("..") {
        Some("contains `..`")
    } else if session_id == "." {
        Some("is `.`")
    } else if session_id.contains('\0') {
        Some("contains NUL")
    } else if session_id.chars().any(char::is_control) {
        Some("contains a control character")
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(why) => {
            let shown: String = session_id.chars().take(40).collect();
            Err(AgentError::of(codes::SESSION_ID_INVALID, format!("session id {:?} {why}", shown)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_ids() {
        for id in ["s1", "user-42_chat.2026", "会话", &"a".repeat(128)] {
            assert!(validate_session_id(id).is_ok(), "{id}");
        }
    }

    #[test]
    fn refuses_ids_that_could_escape_the_root() {
        for id in ["", ".", "..", "../x", "a/b", "a\\b", "a..b", "a\0b", "a\nb", &"a".repeat(129)] {
            let e = validate_session_id(id).unwrap_err();
            assert_eq!(e.code, codes::SESSION_ID_INVALID, "{id:?}");
        }
    }
}
