//! What every section of `faultline.toml` shares: errors that name their key, and the printing
//! of the effective configuration with secrets left out.
//!
//! Each component owns its section: its table as written (a serde type with
//! `deny_unknown_fields`), its validated form, a `from_raw(raw, &mut Errors)` that applies the
//! defaults and reports every problem under `<table>.<key>`, and a `print(&self, &mut Printer)`
//! for `--check-config`. [`super`] composes the sections and checks the rules that span them.

use std::fmt;

/// A problem with one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `table.key`, as the file spells it.
    pub field: String,
    /// What is wrong and what is expected.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Collects the problems of one table, each named `<table>.<key>`.
#[derive(Debug)]
pub struct Errors<'a> {
    table: &'a str,
    out: &'a mut Vec<FieldError>,
}

impl<'a> Errors<'a> {
    /// Problems of `table` go to `out`.
    pub fn new(table: &'a str, out: &'a mut Vec<FieldError>) -> Self {
        Errors { table, out }
    }

    /// Reports a problem of `key` (`topics[2]`, `options."group.id"`); an empty key names the
    /// whole table.
    pub fn push(&mut self, key: &str, message: impl Into<String>) {
        let field = if key.is_empty() {
            self.table.to_string()
        } else {
            format!("{}.{key}", self.table)
        };
        let message = message.into();
        // A value quoted in a message may be a URL with credentials.
        let message = match crate::secret::redact_urls_in(&message) {
            std::borrow::Cow::Borrowed(_) => message,
            std::borrow::Cow::Owned(m) => m,
        };
        self.out.push(FieldError { field, message });
    }

    /// Reports a problem under a full field name, for a rule that spans tables.
    pub fn push_field(&mut self, field: &str, message: impl Into<String>) {
        self.out.push(FieldError {
            field: field.to_string(),
            message: message.into(),
        });
    }

    /// How many problems were reported so far, over every table.
    pub fn count(&self) -> usize {
        self.out.len()
    }
}

/// The effective configuration as TOML-like text.
#[derive(Debug, Default)]
pub struct Printer {
    text: String,
}

impl Printer {
    /// Starts `[name]`.
    pub fn table(&mut self, name: &str) {
        self.line(&format!("[{name}]"));
    }

    /// `key = value`, the value as TOML would write it (strings quoted).
    pub fn value(&mut self, key: &str, value: impl fmt::Debug) {
        self.line(&format!("{key} = {value:?}"));
    }

    /// `key = number` (or any value printed as it is).
    pub fn number(&mut self, key: &str, value: impl fmt::Display) {
        self.line(&format!("{key} = {value}"));
    }

    /// One line as it is (comments, inline tables).
    pub fn line(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
    }

    /// The text printed so far, every URL in it without its credentials (a second net under
    /// the sections' own redaction).
    pub fn finish(self) -> String {
        crate::secret::redact_urls_in(&self.text).into_owned()
    }
}

/// Whether a setting's value is a secret ([`crate::secret::is_secret_key`]).
pub fn is_secret(key: &str) -> bool {
    crate::secret::is_secret_key(key)
}

/// The value as it may be printed: redacted for a secret key, URLs without their credentials
/// ([`crate::secret::shown`]).
pub fn redact<'a>(key: &str, value: &'a str) -> std::borrow::Cow<'a, str> {
    crate::secret::shown(key, value)
}

/// A positive number or an error naming the key.
pub fn positive<T: Default + PartialEq + Copy>(errors: &mut Errors<'_>, key: &str, v: T) -> T {
    if v == T::default() {
        errors.push(key, "must be positive");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_table_and_key() {
        let mut out = Vec::new();
        let mut e = Errors::new("kafka", &mut out);
        e.push("topics[1]", "empty topic name");
        e.push("", "whole table");
        assert_eq!(positive(&mut e, "commit_interval_ms", 0u64), 0);
        assert_eq!(e.count(), 3);
        let fields: Vec<&str> = out.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(
            fields,
            ["kafka.topics[1]", "kafka", "kafka.commit_interval_ms"]
        );
    }

    #[test]
    fn secrets_are_never_printed() {
        assert_eq!(redact("sasl.password", "hunter2"), "[redacted]");
        assert_eq!(redact("ssl.key.location", "/k"), "[redacted]");
        assert_eq!(redact("bootstrap.servers", "b:9092"), "b:9092");
    }
}
