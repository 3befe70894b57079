//! Build script: only does something with the `napi` feature.
//!
//! - `napi_build_ohos::setup()`: links `ace_napi.z` on OHOS targets (and the usual NAPI link flags).
//! - Two host-only link shims (see `src/napi/host_shims.rs` and shared notes on napi-ohos on a
//!   Linux host), so the same `.so` can be loaded by Node for the tests. Never on OHOS:
//!   1. `--wrap=napi_module_register`: the `#[napi]` constructor registers a stack-allocated
//!      `napi_module`; Node keeps the pointer and crashes. The wrapper is a no-op and Node falls
//!      back to `napi_register_module_v1`.
//!   2. `--wrap=napi_wrap`: napi-ohos unrefs the class reference after `napi_wrap` (ArkUI hands it
//!      back with count 1, Node with 0); the wrapper refs it once so class construction works.
//!
//! Without the feature nothing is emitted: plain `cargo test` needs neither Node nor an NDK.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_NAPI").is_none() {
        return;
    }
    #[cfg(feature = "napi")]
    napi_build_ohos::setup();

    let target_env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_env != "ohos" && target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--wrap=napi_module_register");
        println!("cargo:rustc-cdylib-link-arg=-Wl,--wrap=napi_wrap");
    }
}
