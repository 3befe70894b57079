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

// TEMP (agent branch): replaced by the control-safety work at merge.
use crate::error::{codes, AgentError};
use crate::message::ToolCall;

/// TEMP loop detector.
#[derive(Debug, Clone)]
pub struct LoopDetector {
    config: LoopDetectorConfig,
    window: Vec<String>,
}

impl LoopDetector {
    /// TEMP.
    pub fn with_window(config: LoopDetectorConfig, window: Vec<String>) -> Self {
        LoopDetector { config, window }
    }
    /// TEMP.
    pub fn record(&mut self, call: &ToolCall) -> Result<(), AgentError> {
        let args = serde_json::from_str::<serde_json::Value>(&call.arguments)
            .map(|v| crate::json::canonicalize(&v))
            .unwrap_or_else(|_| call.arguments.clone());
        self.window.push(format!("{}:{}", call.name, args));
        if self.window.len() > self.config.window {
            self.window.remove(0);
        }
        if self.window.len() == self.config.window && self.window.iter().all(|s| *s == self.window[0]) {
            return Err(AgentError::of(codes::LOOP_DETECTED, "same call signature filled the window"));
        }
        Ok(())
    }
    /// TEMP.
    pub fn window(&self) -> Vec<String> {
        self.window.clone()
    }
}
