//! Secret redaction: credentials that jobs print never leave faultline.
//!
//! Training jobs print secrets: `HF_TOKEN=hf_...` in an environment dump, a `wandb login` key,
//! `https://user:pass@host` in a pip or git URL, `--api-key ...` in a launcher's command line.
//! Every text that faultline emits and that quotes a log line (a match event's `line` and
//! `captures` here; incidents' context lines, webhook payloads, span attributes and faultline's
//! own log messages on the branches that add them) goes through a [`Redactor`] first. Each
//! secret is replaced by a marker naming its kind, `[REDACTED:hf_token]`; the text around it is
//! kept, so the line still reads as it did and the diagnosis (which comes from the KB entry, not
//! from the text) is unchanged.
//!
//! Cost: redaction runs only on text that leaves (lines that matched a KB entry), never per
//! input line. One Hyperscan call over the text, with a small database of the rules' patterns
//! built by the same [`HyperscanMatcher`] as the KB's, says which rules may apply; only those
//! rules' `regex` runs locate the secrets exactly: the rule's `secret` group, or its whole match.
//! A text that holds no secret costs that one call. If Hyperscan cannot be used (no database,
//! no scratch, a scan error), every rule's regex runs instead: slower, never less redacted.
//!
//! Rules are the built-in ones ([`BUILTIN_RULES`]) plus any extra ones the operator configures
//! ([`RuleSpec`]); patterns use the common syntax of Hyperscan and the `regex` crate, bytewise
//! and ASCII, as KB patterns do.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use regex::bytes::Regex;

use crate::matcher::{HyperscanMatcher, Matcher, RawHit};

/// Group of a rule's pattern that holds the secret; without it, the whole match is the secret.
pub const SECRET_GROUP: &str = "secret";

/// Key names that name a secret, for [`BUILTIN_RULES`]' `secret_field` rules (case-insensitive,
/// whole key): `api_key`, `client_secret`, `access_token`, `password`, `private_key_id`...,
/// with any `word_` prefix (`openai_api_key`, `db_password`), camelCase too (`apiKey`,
/// `clientSecret`); `token` only alone or behind a credential word (`access_token`,
/// `hf_token`), never behind another (`pad_token`, `eos_token` are tokenizer settings).
/// A macro so that `concat!` can build the patterns at compile time.
macro_rules! secret_key {
    () => {
        r"(?i)\b(?:(?:[a-z0-9]+[_-])*(?:api[_-]?key|apikey|client[_-]?secret|secret[_-]?(?:access[_-]?)?key|access[_-]?key|private[_-]?key(?:[_-]?id)?|(?:access|refresh|id|auth|bearer|session|api|oauth|hf|hub|huggingface|github|gh|gitlab|slack|bot|wandb|npm|pypi)[_-]?token|secret|passw(?:or)?d)|token)"
    };
}

/// Between a secret key name and its value: the key's closing quote (escaped or not, as in
/// `{\"api_key\": \"...\"}` inside a JSON message), then `:` or `=`.
macro_rules! key_sep {
    () => {
        r#"(?:\\*["'])?\s*[:=]\s*"#
    };
}

/// Characters of an unquoted value (YAML, logfmt, a query string): up to a space, quote,
/// separator or bracket.
macro_rules! bare {
    () => {
        r#"[^\s"'\\,;&<>(){}\[\]]"#
    };
}

/// The built-in rules, `(name, pattern)`, most specific first: where two rules find the same
/// secret, the earlier one names it.
pub const BUILTIN_RULES: &[(&str, &str)] = &[
    // PEM private keys: from the BEGIN line through the END line when both are in the text (a
    // one-line print: `\n`-escaped in JSON or a repr, or newlines collapsed by a shell; a
    // multi-line text such as a dead letter's payload); a BEGIN without its END (the block cut
    // by a line limit, or its lines arriving one by one) is redacted to the end of the text,
    // or to a `--` (no base64 body holds one), since what follows it may be key material. A
    // body line on a line of its own holds nothing a rule can tell from a digest:
    // docs/security.md says why it is never quoted.
    (
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?:[^-]|-[^-])*(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)?",
    ),
    // Hugging Face user access tokens: `hf_` and 34 letters or digits.
    ("hf_token", r"hf_[A-Za-z0-9]{30,}"),
    // AWS access key ids (long-term AKIA, temporary ASIA).
    (
        "aws_access_key_id",
        r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
    ),
    // AWS secret access keys, only where a key name says so (a bare 40-character base64
    // string is too common to redact everywhere).
    (
        "aws_secret_access_key",
        r#"(?i)(?:aws_?)?secret_?access_?key["']?\s*[:=]\s*["']?(?P<secret>[A-Za-z0-9/+=]{40,})"#,
    ),
    // GitHub personal, OAuth, user-to-server, server-to-server and refresh tokens.
    ("github_token", r"\bgh[pousr]_[A-Za-z0-9]{36,}"),
    // GitHub fine-grained personal access tokens.
    ("github_token", r"\bgithub_pat_[A-Za-z0-9_]{40,}"),
    // Weights & Biases: the environment variable, whatever the value looks like...
    (
        "wandb_api_key",
        r#"(?i)\bWANDB_API_KEY["']?\s*[=:]\s*["']?(?P<secret>[^\s"',;]+)"#,
    ),
    // ...and 40-hex keys near `wandb ... key|login|password|token` or `api.wandb.ai`.
    (
        "wandb_api_key",
        r"(?i)wandb[^\n]{0,40}(?:key|login|password|token)[^\n]{0,20}\b(?P<secret>[0-9a-f]{40})\b",
    ),
    (
        "wandb_api_key",
        r"(?i)api\.wandb\.ai[^\n]{0,60}\b(?P<secret>[0-9a-f]{40})\b",
    ),
    // Anthropic API keys (`sk-ant-api03-...`, `sk-ant-admin01-...`).
    ("anthropic_api_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    // OpenAI API keys: legacy `sk-`, project `sk-proj-`, `sk-svcacct-`, `sk-admin-` (other
    // vendors' `sk-` keys too).
    ("openai_api_key", r"\bsk-[A-Za-z0-9_-]{20,}"),
    // Slack bot, user, app-level, refresh and configuration tokens...
    ("slack_token", r"\bxox[abeoprs]-[A-Za-z0-9-]{10,}"),
    ("slack_token", r"\bxapp-[0-9]+-[A-Za-z0-9-]{10,}"),
    // ...and incoming-webhook URLs (the path is the credential).
    (
        "slack_token",
        r"\bhooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9_/-]{20,})",
    ),
    // `Bearer <token>` wherever it appears (JWTs, OAuth tokens: long, so no English word).
    (
        "bearer_token",
        r"\b[Bb]earer\s+(?P<secret>[A-Za-z0-9._~+/-]{20,}=*)",
    ),
    // `Authorization: <scheme> <credentials>` headers, whatever the length; the key's quotes
    // may be escaped (a JSON document inside a JSON message).
    (
        "authorization",
        r#"(?i)\bauthorization(?:\\*["'])?\s*[:=]\s*\\*["']?(?:bearer|token|basic|digest)\s+(?P<secret>[A-Za-z0-9._~+/=-]+)"#,
    ),
    // JSON Web Tokens wherever they appear: a header and a payload (both base64url JSON
    // objects, so `eyJ`), and the signature (empty for `alg: none`).
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",
    ),
    // Passwords in URLs: scheme://user:password@host (the user is kept). The password runs to
    // the first `@`: unencoded `/` happen (`s3://KEYID:SECRET/WITH/SLASHES@bucket`), and a
    // port and path before an `@` in a path are over-redacted rather than a secret leaked.
    (
        "url_password",
        r#"\b[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s]*:(?P<secret>[^@\s"'<>]+)@"#,
    ),
    // Command-line options that carry a secret: --password, --token, --api-key, --hf-token...
    // The value must not start with `-` (that is the next option of a valueless flag).
    (
        "cli_secret",
        r#"(?i)--(?:(?:hf|hub|huggingface|api|auth|access|refresh|github|gh|gitlab|wandb|db|database|admin|user|client|bot|slack|openai|aws|registry|docker|mlflow|neptune|comet)[-_])?(?:password|passwd|token|api[-_]?key|secret|secret[-_]?key|access[-_]?key|auth[-_]?token|access[-_]?token)(?:=|\s+)["']?(?P<secret>[^\s"'-][^\s"']*)"#,
    ),
    // ...and `--<service>-key` (`--wandb-key`, `--hf-key`); a bare `--key` is too generic.
    (
        "cli_secret",
        r#"(?i)--(?:hf|hub|huggingface|api|auth|access|refresh|github|gh|gitlab|wandb|db|database|admin|user|client|bot|slack|openai|aws|registry|docker|mlflow|neptune|comet|secret|private)[-_]key(?:=|\s+)["']?(?P<secret>[^\s"'-][^\s"']*)"#,
    ),
    // Environment dumps: `*_TOKEN=`, `*_KEY=`, `*_SECRET=`, `*_PASSWORD=` (also `: ` as in YAML
    // and JSON, quoted or not).
    (
        "env_secret",
        r#"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)["']?\s*[=:]\s*["']?(?P<secret>[^\s"',;]+)"#,
    ),
    // Quoted values may hold spaces: the whole quoted value goes.
    (
        "env_secret",
        r#"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)["']?\s*[=:]\s*"(?P<secret>[^"\n]+)""#,
    ),
    (
        "env_secret",
        r#"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)["']?\s*[=:]\s*'(?P<secret>[^'\n]+)'"#,
    ),
    // `password=...`, `db_password: ...`, `"password": "..."` in any case.
    (
        "password",
        r#"(?i)\b(?:[a-z0-9]+[_-])*(?:password|passwd)["']?\s*[=:]\s*["']?(?P<secret>[^\s"',;]+)"#,
    ),
    (
        "password",
        r#"(?i)\b(?:[a-z0-9]+[_-])*(?:password|passwd)["']?\s*[=:]\s*"(?P<secret>[^"\n]+)""#,
    ),
    (
        "password",
        r#"(?i)\b(?:[a-z0-9]+[_-])*(?:password|passwd)["']?\s*[=:]\s*'(?P<secret>[^'\n]+)'"#,
    ),
    // JSON, YAML, Python and logfmt fields whose key names a secret (`secret_key!`): the
    // value goes, the key stays. A double-quoted value, escaped or not, runs to its closing
    // quote (JSON escapes such as a service-account key's `\n` included)...
    (
        "secret_field",
        concat!(
            secret_key!(),
            key_sep!(),
            r#"\\*"(?P<secret>(?:[^"\\\n]|\\[^"\\\n])+)"#
        ),
    ),
    // ...a single-quoted one to its quote...
    (
        "secret_field",
        concat!(
            secret_key!(),
            key_sep!(),
            r#"\\*'(?P<secret>(?:[^'\\\n]|\\[^'\\\n])+)"#
        ),
    ),
    // ...and a bare one to a space, quote or separator, when it looks like a credential (a
    // digit, or 24 characters): `token: expected` and `api_key: null` are prose and settings.
    (
        "secret_field",
        concat!(
            secret_key!(),
            key_sep!(),
            "(?P<secret>",
            bare!(),
            "*[0-9]",
            bare!(),
            "*|",
            bare!(),
            "{24,})"
        ),
    ),
];

/// An extra rule as configured: `{ name = "internal_token", pattern = 'itk_[a-z0-9]{32}' }`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// Lowercase letters, digits and `_`; the marker says `[REDACTED:<name>]`.
    pub name: String,
    /// Common Hyperscan/`regex` syntax; a `secret` group narrows what is replaced.
    pub pattern: String,
}

impl std::str::FromStr for RuleSpec {
    type Err = RedactError;

    /// `NAME=PATTERN`, as the `--redact` flag takes it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, pattern) = s.split_once('=').ok_or_else(|| RedactError::Rule {
            name: s.to_string(),
            message: "expected NAME=PATTERN".to_string(),
        })?;
        Ok(RuleSpec {
            name: name.trim().to_string(),
            pattern: pattern.to_string(),
        })
    }
}

impl RuleSpec {
    /// Checks the rule as [`Redactor::new`] would (its name, its pattern in both engines)
    /// without building a redactor: for configuration validation, which has no side effects.
    pub fn check(&self) -> Result<(), RedactError> {
        compile_rule(&self.name, &self.pattern)?;
        HyperscanMatcher::check_one(&self.pattern).map_err(|e| RedactError::Rule {
            name: self.name.clone(),
            message: e.to_string(),
        })?;
        Ok(())
    }
}

/// Why an extra rule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedactError {
    /// A rule whose name or pattern is invalid.
    #[error("redaction rule `{name}`: {message}")]
    Rule {
        /// The rule's configured name.
        name: String,
        /// What is wrong with its name or pattern.
        message: String,
    },
}

/// One compiled rule.
#[derive(Debug)]
struct Rule {
    name: String,
    marker: Vec<u8>,
    regex: Regex,
    secret: Option<usize>,
}

/// A secret found in a text: bytes `start..end`, of rule `rule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span {
    /// Offset of the secret's first byte.
    pub start: usize,
    /// Offset one past its last byte.
    pub end: usize,
    /// Index of the rule that found it, in [`Redactor::rule_names`] order.
    pub rule: usize,
}

type HsScratch = <HyperscanMatcher as Matcher>::Scratch;

/// The compiled rules. Share it with `Arc`; it is `Sync` (scratches are pooled).
pub struct Redactor {
    rules: Vec<Rule>,
    /// The rules' patterns in one Hyperscan database, pattern id = rule index.
    detect: Option<HyperscanMatcher>,
    /// Idle Hyperscan scratches: one is taken per call and put back.
    scratches: Mutex<Vec<HsScratch>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("rules", &self.rule_names().collect::<Vec<_>>())
            .field("hyperscan", &self.detect.is_some())
            .finish()
    }
}

impl Redactor {
    /// The built-in rules, compiled once per process and shared.
    pub fn builtin() -> Arc<Redactor> {
        static BUILTIN: OnceLock<Arc<Redactor>> = OnceLock::new();
        Arc::clone(BUILTIN.get_or_init(|| {
            // The built-in patterns are constants that a unit test compiles in both engines.
            #[allow(clippy::expect_used)]
            let redactor = Redactor::new(&[]).expect("the built-in redaction rules compile");
            Arc::new(redactor)
        }))
    }

    /// The built-in rules plus `extra` ones, which are checked in both engines first.
    pub fn new(extra: &[RuleSpec]) -> Result<Redactor, RedactError> {
        let mut rules = Vec::with_capacity(BUILTIN_RULES.len() + extra.len());
        for (name, pattern) in BUILTIN_RULES {
            rules.push(compile_rule(name, pattern)?);
        }
        for spec in extra {
            let rule = compile_rule(&spec.name, &spec.pattern)?;
            HyperscanMatcher::check_one(&spec.pattern).map_err(|e| RedactError::Rule {
                name: spec.name.clone(),
                message: e.to_string(),
            })?;
            rules.push(rule);
        }
        let sources: Vec<&str> = BUILTIN_RULES
            .iter()
            .map(|(_, p)| *p)
            .chain(extra.iter().map(|s| s.pattern.as_str()))
            .collect();
        // Without Hyperscan every rule's regex runs: slower, never less redacted.
        // Cached like the KB's database, so start-up does not recompile it every time.
        let cache = crate::cache::dir();
        let detect = HyperscanMatcher::compile_cached(&sources, cache.as_deref())
            .ok()
            .map(|(m, _)| m);
        Ok(Redactor {
            rules,
            detect,
            scratches: Mutex::new(Vec::new()),
        })
    }

    /// Rule names, in rule order (a name repeats when several patterns share it).
    pub fn rule_names(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| r.name.as_str())
    }

    /// Whether the Hyperscan prefilter is in use.
    pub fn uses_hyperscan(&self) -> bool {
        self.detect.is_some()
    }

    /// `text` with every secret replaced by its marker; borrowed when there was none.
    pub fn redact<'a>(&self, text: &'a [u8]) -> Cow<'a, [u8]> {
        let spans = self.spans(text);
        self.apply(text, &spans)
    }

    /// [`Redactor::redact`] for text.
    pub fn redact_str<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.redact(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // Markers are ASCII and secrets end on ASCII bytes or at the text's end, so valid
            // UTF-8 stays valid; lossy conversion is only a guard.
            Cow::Owned(bytes) => Cow::Owned(match String::from_utf8(bytes) {
                Ok(s) => s,
                Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
            }),
        }
    }

    /// The secrets in `text`, sorted and merged so that they do not overlap.
    pub fn spans(&self, text: &[u8]) -> Vec<Span> {
        let mut candidates = Vec::new();
        if !self.detect_rules(text, &mut candidates) {
            candidates.clear();
            candidates.extend(0..self.rules.len());
        }
        self.locate(text, &candidates)
    }

    /// The oracle: every rule's regex, no Hyperscan. Tests and fuzzing compare it with
    /// [`Redactor::spans`].
    #[doc(hidden)]
    pub fn spans_oracle(&self, text: &[u8]) -> Vec<Span> {
        let all: Vec<usize> = (0..self.rules.len()).collect();
        self.locate(text, &all)
    }

    /// The ids of the rules whose pattern Hyperscan found in `text`; false when Hyperscan
    /// could not say (then the caller tries every rule).
    fn detect_rules(&self, text: &[u8], out: &mut Vec<usize>) -> bool {
        let Some(detect) = &self.detect else {
            return false;
        };
        let pooled = self
            .scratches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut scratch = match pooled {
            Some(s) => s,
            None => match detect.scratch() {
                Ok(s) => s,
                Err(_) => return false,
            },
        };
        let mut hits: Vec<RawHit> = Vec::new();
        let ok = detect.find(&mut scratch, text, &mut hits).is_ok();
        self.scratches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(scratch);
        out.extend(hits.iter().map(|h| h.pattern as usize));
        out.sort_unstable();
        out.dedup();
        ok
    }

    fn locate(&self, text: &[u8], rules: &[usize]) -> Vec<Span> {
        let mut spans = Vec::new();
        for &i in rules {
            let Some(rule) = self.rules.get(i) else {
                continue;
            };
            for caps in rule.regex.captures_iter(text) {
                let m = match rule.secret {
                    Some(g) => caps.get(g),
                    None => caps.get(0),
                };
                if let Some(m) = m.filter(|m| !m.is_empty()) {
                    spans.push(Span {
                        start: m.start(),
                        end: m.end(),
                        rule: i,
                    });
                }
            }
        }
        merge(spans)
    }

    fn apply<'a>(&self, text: &'a [u8], spans: &[Span]) -> Cow<'a, [u8]> {
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out = Vec::with_capacity(text.len() + 16 * spans.len());
        let mut at = 0;
        for span in spans {
            out.extend_from_slice(&text[at..span.start]);
            out.extend_from_slice(&self.rules[span.rule].marker);
            at = span.end;
        }
        out.extend_from_slice(&text[at..]);
        Cow::Owned(out)
    }
}

/// Sorts spans by start (longest, then earliest rule first) and merges overlapping ones into
/// the first: every byte of every secret stays covered.
fn merge(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_unstable_by_key(|s| (s.start, std::cmp::Reverse(s.end), s.rule));
    let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
    for span in spans {
        match merged.last_mut() {
            Some(last) if span.start < last.end => last.end = last.end.max(span.end),
            _ => merged.push(span),
        }
    }
    merged
}

fn compile_rule(name: &str, pattern: &str) -> Result<Rule, RedactError> {
    let error = |message: String| RedactError::Rule {
        name: name.to_string(),
        message,
    };
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(error(
            "the name must be lowercase letters, digits and `_`".to_string(),
        ));
    }
    crate::kb::validate_pattern(pattern).map_err(error)?;
    let regex = regex::bytes::RegexBuilder::new(pattern)
        .unicode(false)
        .build()
        .map_err(|e| error(format!("the regex crate rejects it: {e}")))?;
    let secret = regex.capture_names().position(|n| n == Some(SECRET_GROUP));
    Ok(Rule {
        name: name.to_string(),
        marker: format!("[REDACTED:{name}]").into_bytes(),
        regex,
        secret,
    })
}

/// `[redact]` as written.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedact {
    /// Redact secrets in events (default true).
    pub enabled: Option<bool>,
    /// Rules added to the built-in ones: `[{ name = "...", pattern = '...' }]`, as
    /// `faultline scan --redact NAME=PATTERN` takes them.
    #[serde(default)]
    pub extra: Vec<RuleSpec>,
}

/// Secret redaction in `faultline run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedactConfig {
    /// Redact events' `line` and `captures` (and so spans and everything quoting events).
    pub enabled: bool,
    /// Rules added to the built-in ones, each checked in both engines at validation.
    pub extra: Vec<RuleSpec>,
}

impl RedactConfig {
    /// Validates `[redact]`: each extra rule compiles in both engines.
    pub fn from_raw(raw: RawRedact, errors: &mut crate::section::Errors<'_>) -> Self {
        for (i, rule) in raw.extra.iter().enumerate() {
            if let Err(e) = rule.check() {
                errors.push(&format!("extra[{i}]"), e.to_string());
            }
        }
        RedactConfig {
            enabled: raw.enabled.unwrap_or(true),
            extra: raw.extra,
        }
    }

    /// The built-in rules plus the extra ones, compiled (the shared built-in instance when
    /// there are none).
    pub fn rules(&self) -> Result<Arc<Redactor>, RedactError> {
        if self.extra.is_empty() {
            Ok(Redactor::builtin())
        } else {
            Redactor::new(&self.extra).map(Arc::new)
        }
    }

    /// The effective `[redact]` table.
    pub fn print(&self, p: &mut crate::section::Printer) {
        p.table("redact");
        p.number("enabled", self.enabled);
        let extra: Vec<String> = self
            .extra
            .iter()
            .map(|r| {
                format!(
                    "{{ name = {}, pattern = {} }}",
                    toml::Value::String(r.name.clone()),
                    toml::Value::String(r.pattern.clone())
                )
            })
            .collect();
        p.line(&format!("extra = [{}]", extra.join(", ")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(text: &str) -> String {
        let r = Redactor::builtin();
        let out = r.redact_str(text).into_owned();
        assert_eq!(
            r.spans(text.as_bytes()),
            r.spans_oracle(text.as_bytes()),
            "Hyperscan and the oracle disagree on {text:?}"
        );
        out
    }

    #[track_caller]
    fn redacted(text: &str, secret: &str, kind: &str) {
        let out = redact(text);
        assert!(!out.contains(secret), "{secret:?} left in {out:?}");
        assert!(
            out.contains(&format!("[REDACTED:{kind}]")),
            "no {kind} marker in {out:?}"
        );
    }

    #[track_caller]
    fn kept(text: &str) {
        assert_eq!(redact(text), text);
    }

    #[test]
    fn builtin_rules_compile_in_both_engines() {
        let r = Redactor::builtin();
        assert!(r.uses_hyperscan());
        assert_eq!(r.rules.len(), BUILTIN_RULES.len());
        for (name, pattern) in BUILTIN_RULES {
            HyperscanMatcher::check_one(pattern)
                .unwrap_or_else(|e| panic!("{name} does not compile in Hyperscan: {e}"));
        }
    }

    #[test]
    fn hugging_face_tokens() {
        let t = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567";
        redacted(&format!("Using token {t} from env"), t, "hf_token");
        assert_eq!(
            redact(&format!("login(token='{t}')")),
            "login(token='[REDACTED:hf_token]')"
        );
        kept("from huggingface_hub import hf_hub_download, hf_hub_url");
        kept("hf_transfer enabled; hf_xet disabled");
    }

    #[test]
    fn aws_keys() {
        redacted(
            "botocore: using AKIAIOSFODNN7EXAMPLE for s3://bucket/ckpt",
            "AKIAIOSFODNN7EXAMPLE",
            "aws_access_key_id",
        );
        redacted(
            "creds: ASIAY34FZKBOKMUTVV7A expires soon",
            "ASIAY34FZKBOKMUTVV7A",
            "aws_access_key_id",
        );
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
        redacted(
            &format!("aws_secret_access_key = {secret}"),
            secret,
            "aws_secret_access_key",
        );
        redacted(
            &format!(r#"{{"SecretAccessKey": "{secret}", "Expiration": "x"}}"#),
            secret,
            "aws_secret_access_key",
        );
        // Uppercase env dump: the specific rule names it.
        assert_eq!(
            redact(&format!("AWS_SECRET_ACCESS_KEY={secret}")),
            "AWS_SECRET_ACCESS_KEY=[REDACTED:aws_secret_access_key]"
        );
        kept("AKIA is a prefix; AKIAshort is not a key");
        kept("a base64 blob wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY with no key name");
    }

    #[test]
    fn github_tokens() {
        for t in [
            "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            "gho_16C7e42F292c6912E7710c838347Ae178B4a",
            "ghs_16C7e42F292c6912E7710c838347Ae178B4a",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123",
        ] {
            redacted(&format!("git clone https://x-access:{t}@github.com/o/r"), t, "github_token");
            redacted(&format!("GH auth with {t} ok"), t, "github_token");
        }
        kept("ghp_short and gh_pages and ghost_town");
    }

    #[test]
    fn wandb_keys() {
        let key = "0123456789abcdef0123456789abcdef01234567";
        redacted(&format!("WANDB_API_KEY={key}"), key, "wandb_api_key");
        redacted(
            &format!("export WANDB_API_KEY='local-{key}'"),
            key,
            "wandb_api_key",
        );
        redacted(&format!("$ wandb login {key}"), key, "wandb_api_key");
        redacted(&format!("wandb.login(key=\"{key}\")"), key, "wandb_api_key");
        redacted(
            &format!("machine api.wandb.ai login user password {key}"),
            key,
            "wandb_api_key",
        );
        // A git sha is 40 hex too: outside a W&B context it stays.
        kept("wandb: Syncing run; git commit 9fceb02d0ae598e95dc970b74767f19372d61af8");
        kept("HEAD is now at 9fceb02d0ae598e95dc970b74767f19372d61af8");
    }

    #[test]
    fn authorization_headers_and_bearer_tokens() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        redacted(
            &format!("curl -H 'Authorization: Bearer {jwt}' https://api"),
            jwt,
            "bearer_token",
        );
        redacted(
            "requests: headers={'Authorization': 'Bearer abc123'}",
            "abc123",
            "authorization",
        );
        redacted(
            "Authorization: Basic dXNlcjpwYXNzd29yZA==",
            "dXNlcjpwYXNzd29yZA==",
            "authorization",
        );
        kept("the bearer of bad news: Bearer information follows");
    }

    #[test]
    fn passwords_in_urls() {
        assert_eq!(
            redact("pip install --index-url https://deploy:s3cr3t!@pypi.corp.example/simple pkg"),
            "pip install --index-url https://deploy:[REDACTED:url_password]@pypi.corp.example/simple pkg"
        );
        redacted("redis://:hunter2@cache:6379/0", "hunter2", "url_password");
        kept("http://localhost:8080/metrics and https://user@host/path and [::1]:29500");
        kept("tcp://10.0.0.1:29500 rendezvous");
        let secret = "q8Xv3LpR2mZt7Nw9Kb4Hy6Jc1Fd5Gs0Ae/Uo+Ti8";
        redacted(
            &format!("open s3://AKIAZ7QXPLMN3RFT4KWB:{secret}@bucket/x"),
            secret,
            "url_password",
        );
    }

    #[test]
    fn command_line_secrets() {
        redacted(
            "train.py --hf-token abcd1234efgh --epochs 3",
            "abcd1234efgh",
            "cli_secret",
        );
        redacted(
            "mlflow server --password=pa55word",
            "pa55word",
            "cli_secret",
        );
        redacted(
            "openai --api-key 'sk-live-xyz' run",
            "sk-live-xyz",
            "cli_secret",
        );
        redacted("deploy --token \"tok_0987\"", "tok_0987", "cli_secret");
        kept("generate.py --token-limit 5 --max-tokens 512 --max-new-tokens 64");
        kept("login --no-password --use-token-auth");
        kept("serve --password --verbose");
        redacted(
            "train.py --wandb-key 0b1c2d3e4f",
            "0b1c2d3e4f",
            "cli_secret",
        );
        kept("sort --key 2 --key-limit 5");
    }

    #[test]
    fn environment_dumps() {
        redacted("HF_TOKEN=abc123def", "abc123def", "env_secret");
        redacted("  MY_SERVICE_API_KEY: 'zzz-999'", "zzz-999", "env_secret");
        assert_eq!(
            redact("DB_PASSWORD=\"correct horse\" next"),
            "DB_PASSWORD=\"[REDACTED:env_secret]\" next"
        );
        redacted("SLACK_BOT_SECRET=xoxb1", "xoxb1", "env_secret");
        redacted("db_password: tr0ub4dor", "tr0ub4dor", "password");
        redacted(r#"{"password": "p@ss"}"#, "p@ss", "password");
        kept("TOKENIZERS_PARALLELISM=false NCCL_IB_PKEY=0 MASTER_PORT=29500");
        kept("NCCL_SOCKET_IFNAME=eth0 CUDA_VISIBLE_DEVICES=0,1 KEY_LENGTH=4");
    }

    #[test]
    fn secret_fields_in_json_yaml_and_logfmt() {
        let key = "Zx9Qw8Er7Ty6Ui5Op4As3Df2";
        for (text, kept_text) in [
            (
                format!(r#"{{"api_key": "{key}", "model": "gpt"}}"#),
                r#""model": "gpt""#,
            ),
            (format!(r#"{{"apiKey":"{key}"}}"#), r#"{"apiKey":""#),
            (
                format!(r#"{{"client_secret": "{key}"}}"#),
                r#""client_secret": ""#,
            ),
            (
                format!(r#"{{"access_token": "{key}", "token_type": "Bearer"}}"#),
                "token_type",
            ),
            (format!(r#"{{"refresh_token": "{key}"}}"#), "refresh_token"),
            (format!(r#"{{"secret": "{key}"}}"#), r#"{"secret": ""#),
            (
                format!(r#"{{"private_key_id": "{key}"}}"#),
                "private_key_id",
            ),
            (
                format!(r#"{{"secret_access_key": "{key}"}}"#),
                "secret_access_key",
            ),
            (format!("  token: {key}"), "  token: "),
            (format!("api_key: '{key}'"), "api_key: '"),
            (format!("access_key = \"{key}\""), "access_key = "),
            (format!("GET /v1/x?access_token={key}&page=2"), "&page=2"),
            (
                format!("cfg={{'apikey': '{key}', 'retries': 3}}"),
                "'retries': 3",
            ),
            (format!("passwd={key} user=root"), " user=root"),
            // JSON escaped inside a JSON message, once and twice.
            (
                format!(r#"body={{\"api_key\": \"{key}\", \"n\": 1}}"#),
                r#"\"n\": 1"#,
            ),
            (
                format!(r#"{{\\\"token\\\":\\\"{key}\\\"}}"#),
                r#"{\\\"token"#,
            ),
        ] {
            let out = redact(&text);
            assert!(!out.contains(key), "{key} left in {out:?}");
            assert!(out.contains("[REDACTED:"), "{out}");
            assert!(out.contains(kept_text), "{kept_text:?} not kept in {out:?}");
        }
        assert_eq!(
            redact(
                r#"{"type": "service_account", "private_key_id": "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b", "client_email": "sa@p.iam.gserviceaccount.com"}"#
            ),
            r#"{"type": "service_account", "private_key_id": "[REDACTED:secret_field]", "client_email": "sa@p.iam.gserviceaccount.com"}"#
        );
        // Tokenizer settings, prose, references and non-secret keys are kept.
        kept(
            r#"{"pad_token": "<pad>", "eos_token": "</s>", "bos_token": "<s>", "unk_token": "<unk>"}"#,
        );
        kept(
            r#"{"max_tokens": 512, "total_tokens": 77, "token_type": "Bearer", "tokenizer": "gpt2"}"#,
        );
        kept("ValueError: Invalid token: expected a string, got None");
        kept("api_key: null  use_auth_token: true  token: None");
        kept("hub_token: ${HF_TOKEN}  api_key_env: OPENAI_API_KEY  token=args.hf_token");
        kept(r#"{"secret_name": "hf-token", "secretRef": "x", "imagePullSecrets": []}"#);
        kept("tokens: 4096 secrets_dir: /run/secrets");
    }

    #[test]
    fn sk_api_keys() {
        for (key, kind) in [
            (
                "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_A7b-C0d",
                "openai_api_key",
            ),
            ("sk-svcacct-Q1w2E3r4T5y6U7i8O9p0A1s2D3f4", "openai_api_key"),
            (
                "sk-T3BlbkFJq1w2e3r4t5y6u7i8o9p0a1s2d3f4g5h6j7k8l9",
                "openai_api_key",
            ),
            (
                "sk-ant-api03-Zq8Xw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf9Ed8Cb7Az6-Yx5Wv4Ut3AA",
                "anthropic_api_key",
            ),
        ] {
            redacted(
                &format!("openai.AuthenticationError: Incorrect API key provided: {key}."),
                key,
                kind,
            );
            redacted(&format!("client = Anthropic(api_key={key})"), key, kind);
        }
        kept("pip install scikit-learn sk-video; risk-free task-queue");
        kept("locale sk-SK and sk-short-key");
    }

    #[test]
    fn slack_tokens() {
        for t in [
            "xoxb-1234567890-0987654321098-AbCdEfGhIjKlMnOpQrStUvWx",
            "xoxp-1234567890-1234567890-1234567890123-abcdef0123456789abcdef0123456789",
            "xoxa-2-1234567890-abcdefABCDEF",
            "xoxr-1234567890-abcdefABCDEF",
            "xapp-1-A0123456789-1234567890123-abcdef0123456789abcdef0123456789abcdef0123",
        ] {
            redacted(
                &format!("slack_sdk.errors.SlackApiError: invalid_auth (token {t})"),
                t,
                "slack_token",
            );
        }
        redacted(
            "POST https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX failed",
            "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
            "slack_token",
        );
        kept("xoxo-hugs and xoxb- alone, hooks.slack.com/services/");
    }

    #[test]
    fn json_web_tokens() {
        let jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzYUBwcm9qIiwiZXhwIjoxNzAwMDAwMDAwfQ.Sg7h_Kx-9Qw";
        redacted(&format!("401 for token {jwt} (expired)"), jwt, "jwt");
        redacted(&format!(r#"{{"id_token":"{jwt}"}}"#), jwt, "jwt");
        // Unsigned (`alg: none`): an empty signature.
        let none = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.";
        redacted(&format!("got {none} from the proxy"), none, "jwt");
        // After `Bearer`, the more specific rule names it.
        redacted(&format!("Authorization: Bearer {jwt}"), jwt, "bearer_token");
        kept("eyJ alone, eyJhbGci.notapayload, {\"eyJ\": 1}");
    }

    #[test]
    fn pem_private_keys() {
        let body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7";
        let tail = "5Xq1Zr4Kp0vT9mWn2bYc8LdF3gHj6sAe";
        // One line: `\n` escapes (JSON, a repr), or newlines a shell collapsed into spaces;
        // what follows the END line stays.
        for (block, after) in [
            (format!("-----BEGIN PRIVATE KEY-----\\n{body}\\n{tail}\\n-----END PRIVATE KEY-----\\n"), "\\n"),
            (format!("-----BEGIN RSA PRIVATE KEY----- {body} {tail} -----END RSA PRIVATE KEY-----"), ""),
            (format!("-----BEGIN OPENSSH PRIVATE KEY-----\\r\\n{body}\\r\\n-----END OPENSSH PRIVATE KEY-----"), ""),
            (format!("-----BEGIN ENCRYPTED PRIVATE KEY-----\\nProc-Type: 4,ENCRYPTED\\nDEK-Info: AES-128-CBC,0A1B\\n\\n{body}\\n-----END ENCRYPTED PRIVATE KEY-----"), ""),
            (format!("-----BEGIN PGP PRIVATE KEY BLOCK-----\\n\\n{body}\\n=tail\\n-----END PGP PRIVATE KEY BLOCK-----"), ""),
        ] {
            assert_eq!(
                redact(&format!("ValueError: Could not deserialize key data: b'{block}' (bad padding)")),
                format!("ValueError: Could not deserialize key data: b'[REDACTED:private_key]{after}' (bad padding)"),
            );
        }
        // A multi-line text (a dead letter's payload): the block across its lines.
        assert_eq!(
            redact(&format!("key:\n-----BEGIN RSA PRIVATE KEY-----\n{body}\n{tail}\n-----END RSA PRIVATE KEY-----\nnext line --flag")),
            "key:\n[REDACTED:private_key]\nnext line --flag"
        );
        // Cut by a line limit: no END; the rest of the line may be key material.
        let out = redact(&format!(
            "KeyError: '-----BEGIN EC PRIVATE KEY-----\\n{body}\\n{tail}"
        ));
        assert_eq!(out, "KeyError: '[REDACTED:private_key]");
        // The BEGIN line alone (the block arriving line by line) is redacted too...
        assert_eq!(
            redact("[rank0]: -----BEGIN RSA PRIVATE KEY-----"),
            "[rank0]: [REDACTED:private_key]"
        );
        // ...but a body line or the END line on its own holds nothing a rule can tell from a
        // hash (docs/security.md: such lines are never quoted).
        kept(body);
        kept("-----END RSA PRIVATE KEY-----");
        kept("-----BEGIN CERTIFICATE----- and -----BEGIN PUBLIC KEY----- are not secrets");
    }

    #[test]
    fn a_service_account_document() {
        let id = "8f3e1d2c4b5a69788796a5b4c3d2e1f0a9b8c7d6";
        let key = "MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQDfake";
        let doc = format!(
            r#"{{"type": "service_account", "project_id": "ml-prod", "private_key_id": "{id}", "private_key": "-----BEGIN PRIVATE KEY-----\n{key}\n-----END PRIVATE KEY-----\n", "client_email": "trainer@ml-prod.iam.gserviceaccount.com"}}"#
        );
        let out = redact(&format!(
            "google.auth.exceptions.RefreshError: bad key in {doc}"
        ));
        assert!(
            !out.contains(id) && !out.contains(key) && !out.contains("BEGIN"),
            "{out}"
        );
        assert!(out.contains(r#""client_email": "trainer@ml-prod.iam.gserviceaccount.com""#));
        assert!(out.contains(r#""private_key": "[REDACTED:"#), "{out}");
        // Pretty-printed, one field per line.
        redacted(
            &format!(r#"  "private_key_id": "{id}","#),
            id,
            "secret_field",
        );
        let line = format!(
            r#"  "private_key": "-----BEGIN PRIVATE KEY-----\n{key}\n-----END PRIVATE KEY-----\n","#
        );
        let out = redact(&line);
        assert_eq!(out, r#"  "private_key": "[REDACTED:secret_field]","#);
    }

    #[test]
    fn near_misses_are_kept() {
        kept("commit 9fceb02d0ae598e95dc970b74767f19372d61af8");
        kept("run id 123e4567-e89b-12d3-a456-426614174000 started");
        kept("hf_hub_download('bert-base-uncased', 'config.json')");
        kept("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB");
        kept("sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn surrounding_text_is_kept() {
        let t = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567";
        assert_eq!(
            redact(&format!("[rank0]: HF_TOKEN={t} CUDA out of memory")),
            "[rank0]: HF_TOKEN=[REDACTED:hf_token] CUDA out of memory"
        );
    }

    #[test]
    fn overlapping_findings_merge() {
        let spans = merge(vec![
            Span {
                start: 5,
                end: 10,
                rule: 2,
            },
            Span {
                start: 0,
                end: 6,
                rule: 1,
            },
            Span {
                start: 20,
                end: 22,
                rule: 0,
            },
        ]);
        assert_eq!(
            spans,
            vec![
                Span {
                    start: 0,
                    end: 10,
                    rule: 1
                },
                Span {
                    start: 20,
                    end: 22,
                    rule: 0
                },
            ]
        );
    }

    #[test]
    fn extra_rules_are_checked_and_applied() {
        let extra = vec![RuleSpec {
            name: "internal_token".into(),
            pattern: r"\bitk_(?P<secret>[a-z0-9]{8,})".into(),
        }];
        let r = Redactor::new(&extra).expect("valid");
        assert_eq!(
            r.redact_str("auth itk_abcdef123 ok"),
            "auth itk_[REDACTED:internal_token] ok"
        );
        let bad = |name: &str, pattern: &str| {
            Redactor::new(&[RuleSpec {
                name: name.into(),
                pattern: pattern.into(),
            }])
            .expect_err("refused")
            .to_string()
        };
        assert!(bad("x", "a*").contains("empty"));
        assert!(bad("x", "(unclosed").contains("`x`"));
        assert!(bad("Bad Name", "abc").contains("lowercase"));
        assert!(bad("x", "^abc").contains('^'));
        assert_eq!(
            "tok=itk_[a-z]+".parse::<RuleSpec>(),
            Ok(RuleSpec {
                name: "tok".into(),
                pattern: "itk_[a-z]+".into()
            })
        );
        assert!("no-equals".parse::<RuleSpec>().is_err());
    }

    #[test]
    fn invalid_utf8_is_redacted_bytewise() {
        let r = Redactor::builtin();
        let text = b"\xff\xfe HF_TOKEN=abc\xffdef end";
        let out = r.redact(text);
        assert_eq!(&out[..], b"\xff\xfe HF_TOKEN=[REDACTED:env_secret] end");
    }
}
