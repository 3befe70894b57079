//! An API key that cannot go into an HTTP header (a line break, NUL, DEL or another control
//! character: a key pasted with its newline) is refused when the client is built, with
//! `config_invalid` naming `api_key` and never showing the key, instead of every run failing later
//! with `provider_connect` "failed to parse header value".

use arkagent::provider::{ClientConfig, OpenAiCompatibleClient};
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
