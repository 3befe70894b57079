//! Untrusted JSON: input limits (depth, size), a depth-limited parser, and the RFC 8785 canonical
//! form (JCS) used for loop signatures.
//!
//! Owns: [`JsonLimits`], [`parse_object`], [`parse_value`], [`canonicalize`],
//! [`canonicalize_str`] and the ECMAScript number formatting they need ([`format_number`]).
//!
//! Depth is counted in containers: the root object is depth 1, an object inside it depth 2, and so
//! on. The parser checks the depth as it descends, so a 10,000-deep input fails at the limit without
//! growing the stack, and the size is checked before any parsing, so a 100 MB input costs nothing.
//! serde_json's own recursion guard (128 levels) stays in place as a second fence: a limit above it
//! still ends in `json_too_deep`, never in a stack overflow.

mod jcs;
mod parse;
mod surrogates;

pub(crate) use jcs::shortest_decimal;
pub use jcs::{canonicalize, canonicalize_str, format_number};
pub(crate) use parse::{check_size, compact_len, depth_exceeds, kind_name};
pub use parse::{parse_object, parse_value};
pub(crate) use surrogates::lone_surrogate_escapes_mapped;
pub use surrogates::lone_surrogate_escapes_replaced;

use serde::{Deserialize, Serialize};

/// Limits for untrusted JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonLimits {
    /// Maximum nesting depth in containers (default 64). serde_json refuses more than 128 levels
    /// whatever this says.
    pub max_depth: usize,
    /// Maximum size in bytes (default 1 MiB).
    pub max_bytes: usize,
}

impl Default for JsonLimits {
    fn default() -> Self {
        JsonLimits { max_depth: 64, max_bytes: 1024 * 1024 }
    }
}
