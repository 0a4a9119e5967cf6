//! Decoding consumed records, the pure part of the match stage: whether a payload can be read
//! under `[input]`, which job it names, how many lines it adds to the scan buffer, and the
//! Arroyo-style limits on undecodable records (`[dead_letter]`), past which faultline stops
//! instead of dead-lettering. The tables themselves live in [`super::config`].
//!
//! [`decode_record`] is what the `kafka_record` fuzz target drives.

use super::config::{EnvelopeMode, InputConfig, InvalidLimits, JobIdFrom};
use crate::engine::JsonLines;
use crate::enrich::JobName;
use crate::kafka::RecordView;
use crate::metrics::DeadLetterReason;

/// Why the Arroyo-style invalid-record limit tripped.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LimitExceeded {
    /// Too many undecodable records in a row.
    #[error(
        "stopped consuming: {count} consecutive records could not be decoded (limit \
         dead_letter.max_consecutive_invalid = {max}); last at {source_record}: {reason}. \
         Fix the producer or the input settings (input.envelope, input.max_record_bytes); \
         nothing past the last good record was committed"
    )]
    Consecutive {
        /// Undecodable records in a row, the last one included.
        count: u64,
        /// `dead_letter.max_consecutive_invalid`.
        max: u64,
        /// `topic/partition@offset` of the last undecodable record.
        source_record: String,
        /// Why it could not be decoded.
        reason: String,
    },
    /// Too many undecodable records within the window.
    #[error(
        "stopped consuming: {invalid} of the last {seen} records could not be decoded (limit \
         dead_letter.max_invalid_ratio = {ratio} of dead_letter.invalid_window = {window}); \
         last at {source_record}: {reason}. Nothing past the last good record was committed"
    )]
    Ratio {
        /// Undecodable records in the current window.
        invalid: u64,
        /// Records seen in the current window.
        seen: u64,
        /// `dead_letter.max_invalid_ratio`.
        ratio: f64,
        /// `dead_letter.invalid_window`, in records.
        window: u64,
        /// `topic/partition@offset` of the last undecodable record.
        source_record: String,
        /// Why it could not be decoded.
        reason: String,
    },
}

/// Counts invalid records against [`InvalidLimits`]: more than `max_consecutive` in a row, or
/// more than `max_ratio * window` within a window of `window` records, trips it.
#[derive(Debug, Clone)]
pub struct InvalidCounter {
    limits: InvalidLimits,
    consecutive: u64,
    window_seen: u64,
    window_invalid: u64,
}

/// Which limit tripped, before the caller adds where.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trip {
    /// Too many undecodable records in a row.
    Consecutive {
        /// Undecodable records in a row.
        count: u64,
        /// The limit they passed.
        max: u64,
    },
    /// Too many undecodable records within the window.
    Ratio {
        /// Undecodable records in the current window.
        invalid: u64,
        /// Records seen in the current window.
        seen: u64,
        /// The ratio they passed.
        ratio: f64,
        /// The window's length, in records.
        window: u64,
    },
}

impl InvalidCounter {
    /// A counter with nothing counted yet.
    pub fn new(limits: InvalidLimits) -> Self {
        InvalidCounter {
            limits,
            consecutive: 0,
            window_seen: 0,
            window_invalid: 0,
        }
    }

    /// Counts one record; `Err` when the invalid ones are past a limit.
    pub fn record(&mut self, valid: bool) -> Result<(), Trip> {
        if self.window_seen >= self.limits.window {
            self.window_seen = 0;
            self.window_invalid = 0;
        }
        self.window_seen += 1;
        if valid {
            self.consecutive = 0;
            return Ok(());
        }
        self.consecutive += 1;
        self.window_invalid += 1;
        if let Some(max) = self.limits.max_consecutive {
            if self.consecutive > max {
                return Err(Trip::Consecutive {
                    count: self.consecutive,
                    max,
                });
            }
        }
        if let Some(ratio) = self.limits.max_ratio {
            if self.window_invalid as f64 > ratio * self.limits.window as f64 {
                return Err(Trip::Ratio {
                    invalid: self.window_invalid,
                    seen: self.window_seen,
                    ratio,
                    window: self.limits.window,
                });
            }
        }
        Ok(())
    }
}

impl Trip {
    /// The error, with where the last invalid record was and why.
    pub fn at(self, source_record: String, reason: String) -> LimitExceeded {
        match self {
            Trip::Consecutive { count, max } => LimitExceeded::Consecutive {
                count,
                max,
                source_record,
                reason,
            },
            Trip::Ratio {
                invalid,
                seen,
                ratio,
                window,
            } => LimitExceeded::Ratio {
                invalid,
                seen,
                ratio,
                window,
                source_record,
                reason,
            },
        }
    }
}

/// Why a record cannot be decoded: it goes to the dead-letter topic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The payload is over `input.max_record_bytes`.
    #[error("payload of {bytes} bytes is over input.max_record_bytes = {max}")]
    TooLarge {
        /// The payload's size in bytes.
        bytes: usize,
        /// `input.max_record_bytes`.
        max: usize,
    },
    /// `input.envelope = text` and the payload is not UTF-8.
    #[error("payload is not valid UTF-8 (input.envelope = text): invalid byte at {at}")]
    NotUtf8 {
        /// Offset of the first invalid byte.
        at: usize,
    },
    /// `input.envelope = json` and a line is not a JSON envelope.
    #[error("line {line} is not a JSON envelope (input.envelope = json): {error}")]
    NotEnvelope {
        /// The line, from 1.
        line: usize,
        /// Why it is not an envelope.
        error: String,
    },
}

impl Invalid {
    /// Why, as a closed set.
    pub fn reason(&self) -> DeadLetterReason {
        match self {
            Invalid::TooLarge { .. } => DeadLetterReason::TooLarge,
            Invalid::NotUtf8 { .. } => DeadLetterReason::InvalidUtf8,
            Invalid::NotEnvelope { .. } => DeadLetterReason::NotAnEnvelope,
        }
    }

    /// The `faultline.reason` header.
    pub fn code(&self) -> &'static str {
        self.reason().as_str()
    }
}

/// What to do with one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// No payload (a tombstone) or an empty one: nothing to match, terminal at once.
    Skip,
    /// Undecodable: it goes to the dead-letter topic.
    Invalid(Invalid),
    /// Decodable: its lines join the scan buffer.
    Scan,
}

/// Decides whether a payload can be decoded under the input settings. Under `input.envelope =
/// json` that means decoding every line: the records are kept in `json` (the payload's lines
/// numbered from `at`, where the payload will start in the scan buffer), so that the engine
/// reads them there instead of decoding them again; an undecodable payload leaves nothing.
pub fn classify(
    payload: Option<&[u8]>,
    input: &InputConfig,
    json: &mut JsonLines,
    at: usize,
) -> Disposition {
    let Some(p) = payload.filter(|p| !p.is_empty()) else {
        return Disposition::Skip;
    };
    if p.len() > input.max_record_bytes {
        return Disposition::Invalid(Invalid::TooLarge {
            bytes: p.len(),
            max: input.max_record_bytes,
        });
    }
    match input.envelope {
        EnvelopeMode::Auto => Disposition::Scan,
        EnvelopeMode::Text => match std::str::from_utf8(p) {
            Ok(_) => Disposition::Scan,
            Err(e) => Disposition::Invalid(Invalid::NotUtf8 {
                at: e.valid_up_to(),
            }),
        },
        EnvelopeMode::Json => {
            let kept = json.len();
            let mut start = at;
            for (i, line) in p.split(|&b| b == b'\n').enumerate() {
                let line_start = start;
                start += line.len() + 1;
                if line.trim_ascii().is_empty() {
                    continue;
                }
                if let Err(e) = json.decode(line_start, line) {
                    json.truncate(kept);
                    return Disposition::Invalid(Invalid::NotEnvelope {
                        line: i + 1,
                        error: e.to_string(),
                    });
                }
            }
            Disposition::Scan
        }
    }
}

/// The job a record names by its key or a header (the first of that name), per
/// `input.job_id`; `None` when that is absent or empty (the envelope's job field or
/// `input.default_job_id` apply then).
pub fn record_job<'a>(
    key: Option<&'a [u8]>,
    headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    from: &JobIdFrom,
) -> Option<&'a [u8]> {
    match from {
        JobIdFrom::Envelope | JobIdFrom::Key => key,
        JobIdFrom::Header(name) => headers
            .into_iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v),
    }
    .filter(|j| !j.is_empty())
}

/// The job of a record's line when the line names none: the key or header that
/// `input.job_id` names says it; under `envelope` the key is only a guess, so that a node's
/// own line (a host and no job, as a shipper keyed by host sends it) stays the node's.
pub(super) fn job_name<'a>(
    named: Option<&'a str>,
    from: &JobIdFrom,
    default_job: &'a str,
) -> JobName<'a> {
    match (named, from) {
        (Some(j), JobIdFrom::Envelope) => JobName::Guessed(j),
        (Some(j), _) => JobName::Given(j),
        (None, _) => JobName::Guessed(default_job),
    }
}

/// A record's headers as [`record_job`] and [`decode_record`] take them.
pub(super) fn header_pairs(r: RecordView<'_>) -> impl Iterator<Item = (&str, Option<&[u8]>)> {
    r.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref()))
}

/// The lines a payload adds to the batch's scan buffer: its newlines, plus one for a last line
/// without one (the buffer gets a `\n` after it).
pub fn payload_lines(payload: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', payload).count() as u64
        + u64::from(payload.last().is_some_and(|&b| b != b'\n'))
}

/// Where a record's lines start in the batch's scan buffer, and how many it has: what the
/// match stage and its unknown-line side map a line of the buffer back to its record with.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    /// The record's index in the batch.
    pub(super) record: usize,
    /// Its first line in the buffer (from 1).
    pub(super) first_line: u64,
    /// Its lines ([`payload_lines`]).
    pub(super) lines: u64,
}

/// What the matcher decides about one consumed record before scanning it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// Whether the record is skipped, dead-lettered or scanned.
    pub disposition: Disposition,
    /// The job named by the key or a header ([`record_job`]).
    pub job: Option<&'a [u8]>,
    /// Lines the payload adds to the scan buffer ([`payload_lines`]); 0 unless `Scan`.
    pub lines: u64,
}

/// Decodes one record's parts (key, headers, payload) under the input settings: the pure part
/// of the matching stage's per-record work, and what the `kafka_record` fuzz target drives.
pub fn decode_record<'a>(
    key: Option<&'a [u8]>,
    headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    payload: Option<&'a [u8]>,
    input: &InputConfig,
    json: &mut JsonLines,
    at: usize,
) -> Decoded<'a> {
    let disposition = classify(payload, input, json, at);
    let lines = match disposition {
        Disposition::Scan => payload.map_or(0, payload_lines),
        _ => 0,
    };
    Decoded {
        disposition,
        job: record_job(key, headers, &input.job_id),
        lines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(ratio: Option<f64>, window: u64, consecutive: Option<u64>) -> InvalidCounter {
        InvalidCounter::new(InvalidLimits {
            max_ratio: ratio,
            window,
            max_consecutive: consecutive,
        })
    }

    #[test]
    fn consecutive_limit_trips_past_the_maximum() {
        let mut c = limits(None, 10, Some(3));
        for _ in 0..3 {
            c.record(false).expect("within the limit");
        }
        c.record(true).expect("valid resets the run");
        for _ in 0..3 {
            c.record(false).expect("within the limit");
        }
        assert_eq!(c.record(false), Err(Trip::Consecutive { count: 4, max: 3 }));
    }

    #[test]
    fn ratio_limit_counts_within_a_window() {
        // 2 of 10 allowed per window.
        let mut c = limits(Some(0.2), 10, None);
        for i in 0..30 {
            // Two invalid records per window of ten: never trips.
            c.record(i % 10 >= 2).expect("at the ratio");
        }
        c.record(false).expect("1");
        c.record(false).expect("2");
        assert!(matches!(
            c.record(false),
            Err(Trip::Ratio {
                invalid: 3,
                seen: 3,
                ..
            })
        ));
    }

    fn input(envelope: EnvelopeMode) -> InputConfig {
        InputConfig {
            envelope,
            job_id: JobIdFrom::Envelope,
            default_job_id: "unknown".into(),
            max_record_bytes: 64,
        }
    }

    #[test]
    fn what_cannot_be_decoded() {
        let mut s = JsonLines::default();
        let auto = input(EnvelopeMode::Auto);
        let text = input(EnvelopeMode::Text);
        let json = input(EnvelopeMode::Json);
        assert_eq!(classify(None, &auto, &mut s, 0), Disposition::Skip);
        assert_eq!(classify(Some(b""), &auto, &mut s, 0), Disposition::Skip);
        assert_eq!(
            classify(Some(b"\xff boom"), &auto, &mut s, 0),
            Disposition::Scan
        );
        assert_eq!(
            classify(Some(&[b'x'; 64]), &auto, &mut s, 0),
            Disposition::Scan,
            "exactly input.max_record_bytes"
        );
        assert_eq!(
            classify(Some(&[b'x'; 65]), &auto, &mut s, 0),
            Disposition::Invalid(Invalid::TooLarge { bytes: 65, max: 64 })
        );
        assert_eq!(
            classify(Some(b"ok \xff"), &text, &mut s, 0),
            Disposition::Invalid(Invalid::NotUtf8 { at: 3 })
        );
        assert_eq!(
            classify(Some(b"{\"log\":\"x\"}\n\n"), &json, &mut s, 0),
            Disposition::Scan
        );
        let d = classify(Some(b"{\"log\":\"x\"}\nplain"), &json, &mut s, 0);
        assert!(
            matches!(
                &d,
                Disposition::Invalid(Invalid::NotEnvelope { line: 2, .. })
            ),
            "{d:?}"
        );
        let d = classify(Some(b"{\"level\":1}"), &json, &mut s, 0);
        assert!(matches!(&d, Disposition::Invalid(i) if i.code() == "not_an_envelope"));
        // Only the decodable records' lines are kept, numbered from where each will start.
        assert_eq!((s.len(), s.parsed()), (1, 4));
        s.clear();
        let two = b"{\"message\":\"a\"}\n\n{\"message\":\"b\"}";
        assert_eq!(classify(Some(two), &json, &mut s, 7), Disposition::Scan);
        assert_eq!((s.len(), s.parsed()), (2, 2));
        assert_eq!(classify(Some(two), &auto, &mut s, 40), Disposition::Scan);
        assert_eq!(s.parsed(), 2, "auto leaves decoding to the engine");
    }

    #[test]
    fn the_job_comes_from_the_key_or_the_first_header_of_its_name() {
        let headers = [
            ("trace", Some(&b"t"[..])),
            ("job", Some(&b""[..])),
            ("job", Some(&b"second"[..])),
        ];
        let header = JobIdFrom::Header("job".into());
        assert_eq!(
            record_job(Some(b"k"), headers, &JobIdFrom::Key),
            Some(&b"k"[..])
        );
        assert_eq!(record_job(Some(b""), headers, &JobIdFrom::Envelope), None);
        assert_eq!(
            record_job(Some(b"k"), headers, &header),
            None,
            "the first is empty"
        );
        let mut s = JsonLines::default();
        let mut input = input(EnvelopeMode::Text);
        input.job_id = JobIdFrom::Header("trace".into());
        let d = decode_record(None, headers, Some(b"a\nb"), &input, &mut s, 0);
        assert_eq!(
            d,
            Decoded {
                disposition: Disposition::Scan,
                job: Some(&b"t"[..]),
                lines: 2
            }
        );
        let d = decode_record(None, headers, Some(b"a\xff\n"), &input, &mut s, 0);
        assert_eq!((d.lines, d.job), (0, Some(&b"t"[..])));
    }
}
