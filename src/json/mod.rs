//! Untrusted JSON: input limits (depth, size), a depth-limited parser, and the RFC 8785 canonical
//! form (JCS) used for loop signatures.
//!
//! Owns: [`JsonLimits`], [`parse_object`], [`parse_value`], [`canonicalize`],
//! [`canonicalize_str`] and the ECMAScript number formatting they need ([`format_number`]).
//!
//! Depth is counted in containers: the root object is depth 1, an object inside it depth 2, and so
//! on. The parser checks the depth as it descends, so a 10,000-deep input fails at the limit without
//! growing the stack, and the size is checked before any parsing, so a 100 MB input costs nothing.
//! No limit goes past `DEPTH_CAP` (128 levels; the parsers recurse once per level): 128 levels
//! are accepted when the limit says 128 or more, 129 never are. serde_json's own recursion guard
//! is off in this parser, as it refuses the 128th level: the depth counter takes its place.

mod jcs;
mod parse;
mod surrogates;

pub(crate) use jcs::shortest_decimal;
pub use jcs::{canonicalize, canonicalize_str, format_number};
pub(crate) use parse::{
    check_size, compact_len, depth_exceeds, kind_name, nests_deeper_than, over_limits, parse_value_unique,
    raw_compact,
};
pub use parse::{parse_object, parse_value};
pub(crate) use surrogates::lone_surrogate_escapes_mapped;
pub use surrogates::lone_surrogate_escapes_replaced;

use serde::{Deserialize, Serialize};

/// The most levels any JSON text the crate parses with limits may nest, whatever
/// [`JsonLimits::max_depth`] says: the parsers recurse once per level, and 128 levels is what
/// serde_json's own guard was made for.
pub(crate) const DEPTH_CAP: usize = 128;

/// Limits for untrusted JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonLimits {
    /// Maximum nesting depth in containers (default 64). More than 128 levels are refused whatever
    /// this says.
    pub max_depth: usize,
    /// Maximum size in bytes (default 1 MiB).
    pub max_bytes: usize,
}

impl Default for JsonLimits {
    fn default() -> Self {
        JsonLimits { max_depth: 64, max_bytes: 1024 * 1024 }
    }
}
