//! An API key that cannot go into an HTTP header (a line break, NUL, DEL or another control
//! character: a key pasted with its newline) is refused when the client is built, with
//! `config_invalid` naming `api_key` and never showing the key, instead of every run failing later
//! with `provider_connect` "failed to parse header value". So is a missing key for a preset's own
//! cloud endpoint, which refuses every request without one (it failed at the first request, with
//! `provider_auth`); a custom base URL (a local server, a gateway) may go without one.

use arkagent::provider::{ClientConfig, OpenAiCompatibleClient, ProviderPreset};
use arkagent::{codes, ErrorLayer};

#[test]
fn a_key_with_a_byte_invalid_in_a_header_is_refused_at_construction() {
    for key in [
        "sk-SECRETabc\n",
        "sk-SECRET\rabc",
        "sk-SECRET\0abc",
        "sk-SECRET\x7fabc",
        "sk-SECRET\x1babc",
        "\nsk-SECRET",
    ] {
        let config = ClientConfig::custom("http://127.0.0.1:9/v1", "m", key);
        let e = OpenAiCompatibleClient::new(config.clone()).unwrap_err();
        assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Config, codes::CONFIG_INVALID), "{key:?}: {e}");
        assert_eq!(config.check_api_key(), Err(e.clone()));
        assert!(e.message.starts_with("api_key"), "{key:?}: {e}");
        assert!(!e.message.contains("SECRET"), "the key is shown: {e}");
        assert!(!format!("{e:?}").contains("SECRET"));
    }
}

#[test]
fn usable_keys_are_accepted() {
    // Printable ASCII of any kind, a tab (valid in a header value), no key at all (local gateways).
    for key in ["sk-proj-AbC_123.xyz~+/=", "k", "", "key\twith tab"] {
        let config = ClientConfig::custom("http://127.0.0.1:9/v1", "m", key);
        assert_eq!(config.check_api_key(), Ok(()), "{key:?}");
        assert!(OpenAiCompatibleClient::new(config).is_ok(), "{key:?}");
    }
}

#[test]
fn a_cloud_preset_without_a_key_is_refused_at_construction() {
    for preset in ProviderPreset::ALL.into_iter().filter(|p| *p != ProviderPreset::Custom) {
        for key in ["", "  "] {
            let config = ClientConfig::new(preset, "m", key);
            let e = OpenAiCompatibleClient::new(config.clone()).unwrap_err();
            assert_eq!(
                (e.layer, e.code.as_ref()),
                (ErrorLayer::Config, codes::CONFIG_INVALID),
                "{preset:?}: {e}"
            );
            assert!(e.message.starts_with("api_key: required"), "{preset:?}: {e}");
            assert!(e.message.contains(preset.name()), "{preset:?}: {e}");
            assert_eq!(config.check_api_key(), Err(e));
            // The same endpoint written with a trailing slash is still the preset's.
            let slash = format!("{}/", preset.default_base_url().unwrap());
            assert!(OpenAiCompatibleClient::new(ClientConfig::new(preset, "m", key).with_base_url(slash))
                .is_err());
        }
        // With a key, or with a base URL of its own (a local server, a gateway), it is built.
        assert!(OpenAiCompatibleClient::new(ClientConfig::new(preset, "m", "k")).is_ok(), "{preset:?}");
        let local = ClientConfig::new(preset, "m", "").with_base_url("http://127.0.0.1:8080/v1");
        assert!(OpenAiCompatibleClient::new(local).is_ok(), "{preset:?}");
    }
}
