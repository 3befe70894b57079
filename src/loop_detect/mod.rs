//! The loop detector: a window of call signatures (tool name + JCS arguments).
//!
//! INTERFACE (foundation commit): behaviour comes with the control-safety issue.

use serde::{Deserialize, Serialize};

/// Loop detector settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopDetectorConfig {
    /// Window length; the window full of identical signatures is a loop (default 5).
    pub window: usize,
}

impl Default for LoopDetectorConfig {
    fn default() -> Self {
        LoopDetectorConfig { window: 5 }
    }
}
