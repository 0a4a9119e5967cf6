//! What counts as a credential in faultline's own settings, and how one is shown: the one
//! redaction for URLs (userinfo, query values, fragments) and for config values of a secret
//! kind. The config print, error messages, dead letters, tickets and logs all go through it, so
//! a credential given to faultline never leaves the process. (Secrets inside *log lines* are
//! [`crate::redact`]'s job.)
//!
//! A leaf: it imports nothing of the crate.

use std::borrow::Cow;

/// What a redacted part reads as.
pub const REDACTED: &str = "[redacted]";

/// Whether a setting's value is a secret, by its key: a key that mentions a password, secret,
/// token, key or credential, and librdkafka's properties that embed one under another name
/// (`sasl.oauthbearer.config` holds client secrets, `sasl.kerberos.kinit.cmd` may hold a
/// password or keytab path, `ssl.keystore.*` and `ssl_key`s are keys).
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    const WORDS: &[&str] = &[
        "password",
        "passwd",
        "secret",
        "token",
        "key",
        "credential",
        "oauthbearer.config",
        "kinit.cmd",
        "keystore",
        "authorization",
    ];
    WORDS.iter().any(|w| key.contains(w))
}

/// `value` as it may be shown: [`REDACTED`] for a secret key, else the value with every URL in
/// it redacted ([`redact_urls_in`]).
pub fn shown<'a>(key: &str, value: &'a str) -> Cow<'a, str> {
    if is_secret_key(key) {
        Cow::Borrowed(REDACTED)
    } else {
        redact_urls_in(value)
    }
}

/// `url` with its credentials replaced: the userinfo (`user:password@`), every query value
/// and the fragment. The scheme, host, port and path stay, so the URL still says where it
/// points. A string that is not `scheme://...` is returned as it is.
pub fn redact_url(url: &str) -> Cow<'_, str> {
    let Some(scheme_end) = url.find("://") else {
        return Cow::Borrowed(url);
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let tail = &rest[authority_end..];
    let (path, query_and_fragment) = match tail.find(['?', '#']) {
        Some(i) => (&tail[..i], &tail[i..]),
        None => (tail, ""),
    };
    let userinfo = authority.rfind('@');
    if userinfo.is_none() && query_and_fragment.is_empty() {
        return Cow::Borrowed(url);
    }
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..scheme_end + 3]);
    match userinfo {
        Some(at) => {
            out.push_str(REDACTED);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    out.push_str(path);
    let (query, fragment) = match query_and_fragment.find('#') {
        Some(i) => (&query_and_fragment[..i], Some(&query_and_fragment[i..])),
        None => (query_and_fragment, None),
    };
    if let Some(q) = query.strip_prefix('?') {
        out.push('?');
        for (i, pair) in q.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match pair.split_once('=') {
                Some((k, _)) => {
                    out.push_str(k);
                    out.push('=');
                    out.push_str(REDACTED);
                }
                None => out.push_str(pair),
            }
        }
    }
    if fragment.is_some() {
        out.push('#');
        out.push_str(REDACTED);
    }
    Cow::Owned(out)
}

/// `url` without its userinfo (`user:password@`), for links faultline puts in its own output
/// (incident pages, runbooks): the link still works, the credential stays behind.
pub fn without_userinfo(url: &str) -> Cow<'_, str> {
    let Some(scheme_end) = url.find("://") else {
        return Cow::Borrowed(url);
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => Cow::Owned(format!("{}{}", &url[..scheme_end + 3], &rest[at + 1..])),
        None => Cow::Borrowed(url),
    }
}

/// `text` with every URL in it (`scheme://` up to whitespace or a quote) passed through
/// [`redact_url`]: for error messages of HTTP clients, which quote the URL they failed on.
pub fn redact_urls_in(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(sep) = rest.find("://") {
        // The scheme: the letters, digits and `+-.` right before `://`.
        let scheme_start = rest[..sep]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let end = rest[sep..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .map_or(rest.len(), |i| sep + i);
        out.push_str(&rest[..scheme_start]);
        out.push_str(&redact_url(&rest[scheme_start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_userinfo_query_values_and_fragments_only() {
        assert_eq!(
            redact_url("http://am:9093/api/v2/alerts"),
            "http://am:9093/api/v2/alerts"
        );
        assert_eq!(
            redact_url("https://user:pa55@tickets.example:8443/hook"),
            "https://[redacted]@tickets.example:8443/hook"
        );
        assert_eq!(
            redact_url("https://h/x?token=abc&team=gpu#s3cret"),
            "https://h/x?token=[redacted]&team=[redacted]#[redacted]"
        );
        assert_eq!(
            redact_url("http://u:p@h?k=v"),
            "http://[redacted]@h?k=[redacted]"
        );
        // An @ in the path is not userinfo.
        assert_eq!(redact_url("http://h/a@b"), "http://h/a@b");
        assert_eq!(
            without_userinfo("https://ops:pw@f.example/base/a@b"),
            "https://f.example/base/a@b"
        );
        assert_eq!(
            without_userinfo("https://f.example/x"),
            "https://f.example/x"
        );
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn urls_inside_text_are_redacted_where_they_stand() {
        let e =
            "POST \"https://bot:hunter2@t.example/x?sig=zz\": connection refused; retry http://ok/";
        let r = redact_urls_in(e);
        assert!(!r.contains("hunter2") && !r.contains("zz"), "{r}");
        assert!(
            r.starts_with("POST \"https://[redacted]@t.example/x?sig=[redacted]\""),
            "{r}"
        );
        assert!(r.ends_with("retry http://ok/"), "{r}");
        assert!(matches!(redact_urls_in("no url here"), Cow::Borrowed(_)));
    }

    #[test]
    fn secret_keys_include_librdkafkas_embedded_credentials() {
        for k in [
            "sasl.password",
            "sasl.oauthbearer.config",
            "sasl.kerberos.kinit.cmd",
            "ssl.keystore.password",
            "ssl.key.pem",
            "api_token",
            "Authorization",
        ] {
            assert!(is_secret_key(k), "{k}");
            assert_eq!(shown(k, "v"), REDACTED);
        }
        for k in ["bootstrap.servers", "sasl.mechanisms", "security.protocol"] {
            assert!(!is_secret_key(k), "{k}");
        }
        assert_eq!(
            shown("bootstrap.servers", "https://u:p@b:9092"),
            "https://[redacted]@b:9092"
        );
    }
}
