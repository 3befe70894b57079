//! The two host-only link shims (Linux, not OHOS): build.rs wraps `napi_module_register` and
//! `napi_wrap` with `-Wl,--wrap`, and these are the wrappers. They make the same code that runs on
//! ArkUI loadable by Node for the tests; on OHOS neither the link flags nor this file exist.

use napi_ohos::sys;
use std::ffi::c_void;

extern "C" {
    fn __real_napi_wrap(
        env: sys::napi_env,
        js_object: sys::napi_value,
        native_object: *mut c_void,
        finalize_cb: sys::napi_finalize,
        finalize_hint: *mut c_void,
        result: *mut sys::napi_ref,
    ) -> sys::napi_status;
}

/// Node keeps the pointer to the stack-allocated `napi_module` that the `#[napi]` constructor
/// registers, and crashes later; doing nothing here makes Node use `napi_register_module_v1`.
#[no_mangle]
pub extern "C" fn __wrap_napi_module_register(_module: *mut c_void) {}

/// napi-ohos unrefs the class reference right after `napi_wrap`, because ArkUI returns it with a
/// count of 1; Node returns it with 0, so the unref fails ("Failed to ref class"). Reference it
/// once here, so both runtimes end at the same count.
///
/// # Safety
/// Called by napi-ohos with the arguments of `napi_wrap`, on the JS thread.
#[no_mangle]
pub unsafe extern "C" fn __wrap_napi_wrap(
    env: sys::napi_env,
    js_object: sys::napi_value,
    native_object: *mut c_void,
    finalize_cb: sys::napi_finalize,
    finalize_hint: *mut c_void,
    result: *mut sys::napi_ref,
) -> sys::napi_status {
    // SAFETY: same arguments, forwarded unchanged to the real function.
    let status =
        unsafe { __real_napi_wrap(env, js_object, native_object, finalize_cb, finalize_hint, result) };
    if status == sys::Status::napi_ok && !result.is_null() {
        // SAFETY: `result` is non-null and was just written by a successful napi_wrap.
        let reference = unsafe { *result };
        if !reference.is_null() {
            let mut count = 0u32;
            // SAFETY: a valid env and a reference it just created.
            unsafe { sys::napi_reference_ref(env, reference, &mut count) };
        }
    }
    status
}
