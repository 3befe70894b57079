//! An API key that cannot go into an HTTP header (a line break, NUL, DEL or another control
//! character: a key pasted with its newline) is refused when the client is built, with
//! `config_invalid` naming `api_key` and never showing the key, instead of every run failing later
//! with `provider_connect` "failed to parse header value". So is a key no provider issues though a
//! header could carry it (a tab, whitespace around it, only whitespace: a copy-paste slip), which
//! was sent as is and answered 401, far from the cause. So is a missing key for a preset's own
//! cloud endpoint, which refuses every request without one (it failed at the first request, with
//! `provider_auth`); a custom base URL (a local server, a gateway) may go without one. So is a
//! key with a space or anything outside visible ASCII inside it (a zero-width space, a byte order
//! mark, a look-alike letter), which was sent raw in the header and answered 401.

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
        "sk-SECRET\tabc",
        "sk-SECRET\u{85}abc",
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
    // Printable ASCII of any kind, no key at all (local gateways).
    for key in ["sk-proj-AbC_123.xyz~+/=", "k", ""] {
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

#[test]
fn a_key_with_whitespace_around_it_or_only_whitespace_is_refused_for_presets_and_custom_urls() {
    let refused = |config: ClientConfig, key: &str, start: &str| {
        let e = OpenAiCompatibleClient::new(config.clone()).unwrap_err();
        assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Config, codes::CONFIG_INVALID), "{key:?}: {e}");
        assert_eq!(config.check_api_key(), Err(e.clone()));
        assert!(e.message.starts_with(start), "{key:?}: {e}");
        assert!(
            !e.message.contains("SECRET") && !format!("{e:?}").contains("SECRET"),
            "the key is shown: {e}"
        );
    };
    // A copy-paste slip: spaces, a newline, a no-break or ideographic space around the key.
    for key in ["  sk-SECRET\n", " sk-SECRET", "sk-SECRET ", "\u{a0}sk-SECRET", "sk-SECRET\u{3000}"] {
        let custom = ClientConfig::custom("http://127.0.0.1:9/v1", "m", key);
        refused(custom, key, "api_key: ");
        for preset in ProviderPreset::ALL.into_iter().filter(|p| *p != ProviderPreset::Custom) {
            refused(ClientConfig::new(preset, "m", key), key, "api_key: ");
        }
    }
    for key in [" sk-SECRET", "sk-SECRET\u{3000}"] {
        refused(
            ClientConfig::custom("http://127.0.0.1:9/v1", "m", key),
            key,
            "api_key: starts or ends with whitespace",
        );
    }
    // A blank key is no key: a custom base URL may go without one, but then empty.
    for key in [" ", "   ", "\u{3000}"] {
        refused(ClientConfig::custom("http://127.0.0.1:9/v1", "m", key), key, "api_key: blank");
    }
}

#[test]
fn a_key_with_a_space_or_a_non_ascii_character_inside_is_refused_saying_what_and_where() {
    // Sent raw in the Authorization header, such a key was answered 401: a key as issued is
    // visible ASCII only. A zero-width space or a byte order mark comes with a copy from a web
    // page or a file; a look-alike letter (Cyrillic Е) with a retyped key.
    for (key, why) in [
        ("sk-SE CRET", "contains a space at character 6;"),
        ("sk-SECRET\u{200b}", "contains a zero-width character (U+200B) at character 10;"),
        ("\u{feff}sk-SECRET", "contains a byte order mark (U+FEFF) at its start;"),
        ("sk-S\u{415}CRET", "contains a non-ASCII character (U+0415) at character 5;"),
        ("sk-s\u{e9}cret-SECRET", "contains a non-ASCII character (U+00E9) at character 5;"),
        ("sk-SEC\u{a0}RET", "contains a non-ASCII space (U+00A0) at character 7;"),
        ("sk-\u{1f600}SECRET", "contains a non-ASCII character (U+1F600) at character 4;"),
    ] {
        for config in [
            ClientConfig::custom("http://127.0.0.1:9/v1", "m", key),
            ClientConfig::new(ProviderPreset::OpenAi, "m", key),
        ] {
            let e = OpenAiCompatibleClient::new(config.clone()).unwrap_err();
            assert_eq!(
                (e.layer, e.code.as_ref()),
                (ErrorLayer::Config, codes::CONFIG_INVALID),
                "{key:?}: {e}"
            );
            assert_eq!(config.check_api_key(), Err(e.clone()));
            assert!(e.message.starts_with(&format!("api_key: {why}")), "{key:?}: {e}");
            assert!(
                !e.message.contains("SECRET")
                    && !e.message.contains("SE CRET")
                    && !format!("{e:?}").contains("SECRET"),
                "the key is shown: {e}"
            );
        }
    }
    // Every visible ASCII character is accepted.
    let all: String = ('!'..='~').collect();
    assert_eq!(ClientConfig::custom("http://127.0.0.1:9/v1", "m", all.as_str()).check_api_key(), Ok(()));
}
