//! The NAPI binding: adapters only (classes, functions, ArkTS callbacks as executors and hooks).
//!
//! Comes with the NAPI issue; compiled only with the `napi` feature.
