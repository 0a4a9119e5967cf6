//! `[unknown]`: the live mining of error lines that no KB entry knows, in `faultline run` (and
//! the same settings, from flags, in `scan`). On by default.

use serde::Deserialize;

use crate::section::{Errors, Printer};
use crate::time::Millis;

/// Templates kept per job by default.
pub const DEFAULT_MAX_TEMPLATES: usize = 50;
/// Jobs with a miner by default.
pub const DEFAULT_MAX_JOBS: usize = 1_000;
/// A template's next event waits at least this long after its last, by default.
pub const DEFAULT_TEMPLATE_INTERVAL_MS: Millis = 60_000;
/// Events per job per minute of log time, by default.
pub const DEFAULT_MAX_EVENTS_PER_MINUTE: u32 = 10;

/// `[unknown]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUnknownConfig {
    /// [`UnknownConfig::enabled`].
    pub enabled: Option<bool>,
    /// [`UnknownConfig::max_templates`].
    pub max_templates: Option<usize>,
    /// [`UnknownConfig::max_jobs`].
    pub max_jobs: Option<usize>,
    /// [`UnknownConfig::template_interval_ms`].
    pub template_interval_ms: Option<i64>,
    /// [`UnknownConfig::max_events_per_minute`].
    pub max_events_per_minute: Option<u32>,
}

/// Validated `[unknown]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownConfig {
    /// Mine unknown error lines and emit `unknown` events.
    pub enabled: bool,
    /// Live templates per job; the least recently seen is evicted beyond this.
    pub max_templates: usize,
    /// Jobs with a miner; the least recently active job's miner is dropped beyond this.
    pub max_jobs: usize,
    /// After a template's event, its next one waits at least this long (log time), unless the
    /// template's text changes.
    pub template_interval_ms: Millis,
    /// `unknown` events per job per minute of log time; further ones are held back and counted.
    pub max_events_per_minute: u32,
}

impl Default for UnknownConfig {
    fn default() -> Self {
        UnknownConfig {
            enabled: true,
            max_templates: DEFAULT_MAX_TEMPLATES,
            max_jobs: DEFAULT_MAX_JOBS,
            template_interval_ms: DEFAULT_TEMPLATE_INTERVAL_MS,
            max_events_per_minute: DEFAULT_MAX_EVENTS_PER_MINUTE,
        }
    }
}

impl UnknownConfig {
    /// Validates `[unknown]`, applying the defaults; every problem is reported under
    /// `unknown.<key>`.
    pub fn from_raw(raw: &RawUnknownConfig, errors: &mut Errors<'_>) -> Self {
        let d = UnknownConfig::default();
        let c = UnknownConfig {
            enabled: raw.enabled.unwrap_or(d.enabled),
            max_templates: raw.max_templates.unwrap_or(d.max_templates),
            max_jobs: raw.max_jobs.unwrap_or(d.max_jobs),
            template_interval_ms: raw.template_interval_ms.unwrap_or(d.template_interval_ms),
            max_events_per_minute: raw.max_events_per_minute.unwrap_or(d.max_events_per_minute),
        };
        for (key, value) in [
            ("max_templates", c.max_templates as i128),
            ("max_jobs", c.max_jobs as i128),
            ("template_interval_ms", c.template_interval_ms.into()),
            ("max_events_per_minute", c.max_events_per_minute.into()),
        ] {
            if value <= 0 {
                errors.push(
                    key,
                    "must be positive (set `enabled = false` to turn unknown events off)",
                );
            }
        }
        c
    }

    /// The effective `[unknown]` table.
    pub fn print(&self, p: &mut Printer) {
        p.table("unknown");
        p.value("enabled", self.enabled);
        p.number("max_templates", self.max_templates);
        p.number("max_jobs", self.max_jobs);
        p.number("template_interval_ms", self.template_interval_ms);
        p.number("max_events_per_minute", self.max_events_per_minute);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (UnknownConfig, Vec<String>) {
        let raw: RawUnknownConfig = toml::from_str(text).expect("toml");
        let mut out = Vec::new();
        let c = UnknownConfig::from_raw(&raw, &mut Errors::new("unknown", &mut out));
        (c, out.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn defaults_overrides_and_errors_that_name_the_field() {
        let (c, errors) = parse("");
        assert!(errors.is_empty());
        assert_eq!(c, UnknownConfig::default());
        assert!(c.enabled);
        let (c, errors) =
            parse("enabled = false\nmax_templates = 7\ntemplate_interval_ms = 1000\n");
        assert!(errors.is_empty(), "{errors:?}");
        assert!(!c.enabled);
        assert_eq!((c.max_templates, c.template_interval_ms), (7, 1000));
        let mut p = Printer::default();
        c.print(&mut p);
        let text = p.finish();
        assert!(
            text.contains("[unknown]\nenabled = false\nmax_templates = 7\n"),
            "{text}"
        );
        let (_, errors) =
            parse("max_jobs = 0\nmax_events_per_minute = 0\ntemplate_interval_ms = -1\n");
        let fields: Vec<&str> = errors
            .iter()
            .map(|e| e.split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(
            fields,
            [
                "unknown.max_jobs",
                "unknown.template_interval_ms",
                "unknown.max_events_per_minute"
            ]
        );
        assert!(
            toml::from_str::<RawUnknownConfig>("rate = 1").is_err(),
            "unknown keys are errors"
        );
    }
}
