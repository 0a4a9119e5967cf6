//! `[admin]`: where the admin server listens, the bearer token that guards the incident pages
//! off loopback, the URL people reach it at, and how many resolved incidents it remembers.
//!
//! The incident pages and API show log lines, so they are served without a token only on a
//! loopback address. Bound anywhere else, `admin.token` (or `admin.token_file`, read when the
//! server starts) is required: the configuration is refused without one. `/healthz`, `/readyz`
//! and `/metrics` stay open (probes and scrapers; they carry no log text).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::section::{Errors, Printer};

/// The admin server's default address: loopback only.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9477";

/// Resolved incidents the admin server remembers by default.
pub const DEFAULT_RESOLVED_INCIDENTS: usize = 1_000;

/// `[admin]` as written.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// `IP:PORT`, or `off`.
    pub listen: Option<String>,
    /// In-flight records without progress for this long make /readyz fail.
    pub stall_timeout_ms: Option<u64>,
    /// The bearer token of the incident pages and API; never printed.
    pub token: Option<String>,
    /// A file holding the token (read when the server starts; surrounding whitespace ignored).
    pub token_file: Option<PathBuf>,
    /// The admin server's URL as people reach it (`https://faultline.example.com`): tickets and
    /// alerts link to `<external_url>/incidents/<fingerprint>`.
    pub external_url: Option<String>,
    /// Resolved incidents kept for the pages and the API (the most recent ones).
    pub resolved_incidents: Option<usize>,
}

/// A bearer token: compared in constant time, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

/// The shortest admin token accepted on an address other hosts can reach.
pub const MIN_TOKEN_CHARS: usize = 16;

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token([redacted])")
    }
}

impl Token {
    /// A token; `None` when empty.
    pub fn new(text: &str) -> Option<Token> {
        let t = text.trim();
        (!t.is_empty()).then(|| Token(t.to_string()))
    }

    /// Refuses a token shorter than [`MIN_TOKEN_CHARS`] (checked for non-loopback listens).
    pub fn strong_enough(&self) -> Result<(), AdminError> {
        let n = self.0.chars().count();
        if n < MIN_TOKEN_CHARS {
            return Err(AdminError::TokenTooShort(n));
        }
        Ok(())
    }

    /// Whether an `Authorization` header carries this token: `Bearer <token>`, or HTTP Basic
    /// with the token as the password (what a browser's login prompt sends).
    pub fn accepts(&self, authorization: Option<&str>) -> bool {
        let Some(value) = authorization.map(str::trim) else {
            return false;
        };
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            return same(rest.as_bytes(), self.0.as_bytes());
        }
        if scheme.eq_ignore_ascii_case("basic") {
            let Some(decoded) = base64_decode(rest) else {
                return false;
            };
            let password = match decoded.iter().position(|&b| b == b':') {
                Some(i) => &decoded[i + 1..],
                None => &decoded[..],
            };
            return same(password, self.0.as_bytes());
        }
        false
    }
}

/// Equality whose time depends on the lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Standard base64 (padding optional); `None` on anything else.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c)? << (18 - 6 * i);
        }
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    Some(out)
}

/// Where the token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// No token: the incident pages are open (loopback only).
    None,
    /// `admin.token`.
    Inline(Token),
    /// `admin.token_file`, read when the server starts.
    File(PathBuf),
}

/// Validated `[admin]`.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// `None`: no admin server.
    pub listen: Option<SocketAddr>,
    /// In-flight records without progress for this long make /readyz fail.
    pub stall_timeout: Duration,
    /// The token of the incident pages and API.
    pub token: TokenSource,
    /// The base of incident page links, without a trailing slash.
    pub external_url: Option<String>,
    /// Resolved incidents kept for the pages and the API.
    pub resolved_incidents: usize,
}

/// Why the admin server refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A non-loopback address without a token.
    #[error(
        "admin.listen {0} is not a loopback address: the incident pages show log lines, so set \
         admin.token or admin.token_file (or FAULTLINE_ADMIN_TOKEN), or listen on 127.0.0.1"
    )]
    TokenRequired(SocketAddr),
    /// A token too short to resist guessing, on an address others can reach.
    #[error(
        "admin.token is {0} characters long; on a non-loopback admin.listen it must have at \
         least {MIN_TOKEN_CHARS} (for example `openssl rand -hex 24`)"
    )]
    TokenTooShort(usize),
    /// The token file could not be read, or is empty.
    #[error("admin.token_file {path}: {error}")]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        error: String,
    },
}

impl AdminConfig {
    /// Validates `[admin]`, applying defaults.
    pub fn from_raw(raw: RawAdmin, errors: &mut Errors<'_>) -> AdminConfig {
        let listen = match raw.listen.as_deref().unwrap_or(DEFAULT_ADMIN_LISTEN) {
            "off" | "" => None,
            addr => match addr.parse::<SocketAddr>() {
                Ok(a) => Some(a),
                Err(e) => {
                    errors.push(
                        "listen",
                        format!("{addr:?}: {e} (expected IP:PORT, or off)"),
                    );
                    None
                }
            },
        };
        let stall_ms = raw.stall_timeout_ms.unwrap_or(60_000);
        if stall_ms == 0 {
            errors.push("stall_timeout_ms", "must be positive");
        }
        let before = errors.count();
        let token = match (&raw.token, &raw.token_file) {
            (Some(_), Some(_)) => {
                errors.push("token", "set admin.token or admin.token_file, not both");
                TokenSource::None
            }
            (Some(t), None) => match Token::new(t) {
                Some(t) => TokenSource::Inline(t),
                None => {
                    errors.push("token", "must not be empty");
                    TokenSource::None
                }
            },
            (None, Some(p)) => TokenSource::File(p.clone()),
            (None, None) => TokenSource::None,
        };
        if let Some(addr) = listen.filter(|a| !a.ip().is_loopback()) {
            if token == TokenSource::None && errors.count() == before {
                errors.push("token", AdminError::TokenRequired(addr).to_string());
            }
            if let TokenSource::Inline(t) = &token {
                if let Err(e) = t.strong_enough() {
                    errors.push("token", e.to_string());
                }
            }
        }
        let external_url = raw.external_url.as_deref().map(|u| {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                errors.push(
                    "external_url",
                    format!("{u:?}: expected http://... or https://..."),
                );
            }
            u.trim_end_matches('/').to_string()
        });
        let resolved_incidents = raw.resolved_incidents.unwrap_or(DEFAULT_RESOLVED_INCIDENTS);
        if resolved_incidents == 0 {
            errors.push("resolved_incidents", "must be positive");
        }
        AdminConfig {
            listen,
            stall_timeout: Duration::from_millis(stall_ms),
            token,
            external_url,
            resolved_incidents,
        }
    }

    /// The token in force, reading `admin.token_file`; refuses a non-loopback `listen` without
    /// one. Called when the server starts.
    pub fn resolve_token(&self) -> Result<Option<Token>, AdminError> {
        let token = match &self.token {
            TokenSource::None => None,
            TokenSource::Inline(t) => Some(t.clone()),
            TokenSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| AdminError::TokenFile {
                    path: path.clone(),
                    error: e.to_string(),
                })?;
                Some(Token::new(&text).ok_or_else(|| AdminError::TokenFile {
                    path: path.clone(),
                    error: "the file is empty".into(),
                })?)
            }
        };
        match (self.listen, &token) {
            (Some(addr), None) if !addr.ip().is_loopback() => Err(AdminError::TokenRequired(addr)),
            (Some(addr), Some(t)) if !addr.ip().is_loopback() => {
                t.strong_enough()?;
                Ok(token)
            }
            _ => Ok(token),
        }
    }

    /// The base of incident page links: `external_url`, else the bound address.
    pub fn page_base(&self, bound: Option<SocketAddr>) -> Option<String> {
        // Links go into alerts and tickets: never with the URL's credentials.
        self.external_url
            .as_deref()
            .map(|u| crate::secret::without_userinfo(u).into_owned())
            .or_else(|| bound.map(|a| format!("http://{a}")))
    }

    /// The effective `[admin]` table, the token left out.
    pub fn print(&self, p: &mut Printer) {
        p.table("admin");
        p.value(
            "listen",
            self.listen
                .map_or_else(|| "off".to_string(), |a| a.to_string()),
        );
        p.number("stall_timeout_ms", self.stall_timeout.as_millis());
        p.number("resolved_incidents", self.resolved_incidents);
        if let Some(u) = &self.external_url {
            p.value("external_url", crate::secret::redact_url(u));
        }
        match &self.token {
            TokenSource::None => {}
            TokenSource::Inline(_) => p.line("# token: [redacted]"),
            TokenSource::File(path) => p.value("token_file", path.display().to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (AdminConfig, Vec<String>) {
        let raw: RawAdmin = toml::from_str(text).expect("toml");
        let mut out = Vec::new();
        let c = AdminConfig::from_raw(raw, &mut Errors::new("admin", &mut out));
        (c, out.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn off_loopback_a_short_token_is_refused() {
        let (_, errors) = parse("listen = \"0.0.0.0:9477\"\ntoken = \"x\"\n");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("admin.token: admin.token is 1 characters long"),
            "{errors:?}"
        );
        let (_, errors) = parse("listen = \"0.0.0.0:9477\"\ntoken = \"0123456789abcdef\"\n");
        assert!(errors.is_empty(), "{errors:?}");
        let (_, errors) = parse("listen = \"127.0.0.1:9477\"\ntoken = \"x\"\n");
        assert!(errors.is_empty(), "loopback keeps any token: {errors:?}");
        // A token file is checked when it is read.
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        std::fs::write(&file, "short\n").expect("write");
        let (c, errors) = parse(&format!(
            "listen = \"0.0.0.0:9477\"\ntoken_file = {:?}\n",
            file.display().to_string()
        ));
        assert!(errors.is_empty(), "{errors:?}");
        assert!(matches!(
            c.resolve_token(),
            Err(AdminError::TokenTooShort(5))
        ));
    }

    #[test]
    fn off_loopback_the_token_is_required_and_never_printed() {
        let (c, errors) = parse("");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(c.token, TokenSource::None);
        assert_eq!(c.resolved_incidents, DEFAULT_RESOLVED_INCIDENTS);
        assert_eq!(c.resolve_token().expect("loopback"), None);

        let (_, errors) = parse("listen = \"0.0.0.0:9477\"\n");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("admin.token: admin.listen 0.0.0.0:9477 is not a loopback"));

        let (c, errors) = parse(
            "listen = \"127.0.0.2:9477\"\ntoken = \"s3cret-t0ken\"\nexternal_url = \"https://f.example/\"\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(c.external_url.as_deref(), Some("https://f.example"));
        let token = c.resolve_token().expect("token").expect("set");
        let mut p = Printer::default();
        c.print(&mut p);
        let text = p.finish();
        assert!(text.contains("# token: [redacted]"), "{text}");
        for shown in [text, format!("{c:?}")] {
            assert!(!shown.contains("s3cret"), "{shown}");
        }
        assert!(token.accepts(Some("Bearer s3cret-t0ken")));
        assert!(token.accepts(Some("bearer  s3cret-t0ken ")));
        // "anyone:s3cret-t0ken", as a browser's login prompt sends it.
        assert!(token.accepts(Some("Basic YW55b25lOnMzY3JldC10MGtlbg==")));
        assert!(!token.accepts(Some("Basic YW55b25lOndyb25n")));
        assert!(!token.accepts(Some("Bearer s3cret-t0ke")));
        assert!(!token.accepts(None));

        let (_, errors) =
            parse("token = \"\"\nexternal_url = \"ftp://x\"\nresolved_incidents = 0\n");
        let fields: Vec<&str> = errors
            .iter()
            .map(|e| e.split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(
            fields,
            [
                "admin.token",
                "admin.external_url",
                "admin.resolved_incidents"
            ]
        );
    }

    #[test]
    fn the_token_file_is_read_when_the_server_starts() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("token");
        let (c, errors) = parse(&format!(
            "listen = \"10.1.2.3:9477\"\ntoken_file = {:?}\n",
            path.display().to_string()
        ));
        assert!(
            errors.is_empty(),
            "a missing file is not a configuration error: {errors:?}"
        );
        let e = c.resolve_token().expect_err("no file yet");
        assert!(e.to_string().starts_with("admin.token_file"), "{e}");
        std::fs::write(&path, "  \n").expect("write");
        assert!(c.resolve_token().is_err(), "empty");
        std::fs::write(&path, "from-file-0123456789\n").expect("write");
        let t = c.resolve_token().expect("reads").expect("token");
        assert!(t.accepts(Some("Bearer from-file-0123456789")));
    }
}
