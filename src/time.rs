//! Log time: the one parser of the timestamps that lines carry, and the conversions around it.
//!
//! [`parse`] reads every form faultline meets and says what the text did not: whether the zone
//! was known and whether the year was. Each caller states its policy on top:
//! the correlator reads a zone-less stamp as UTC and places a year-less one next to the job's
//! other times ([`Stamp::millis_near`]); the latency histogram drops both (a guessed zone would
//! report hours of false delay).
//!
//! Forms: RFC 3339 / ISO 8601 (`2024-05-01T12:00:00.123Z`, `t`/space separators, `.` or `,`
//! fractions, `Z`, `±HH:MM`, `±HHMM`, `±HH` or no zone), syslog (`Nov 29 09:02:41`, no year,
//! no zone) and glog (`E1129 21:42:00.429470054`, month and day, no year, no zone).

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

/// A parsed timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Milliseconds since the epoch, reading a missing zone as UTC and a missing year as 1970.
    millis: Millis,
    /// Nanoseconds within the millisecond, for callers that want more precision.
    sub_ms_nanos: u32,
    /// Month and day of a stamp without a year, to place it in a year later.
    month_day: Option<(i64, i64)>,
    /// The text named its zone (`Z` or an offset).
    pub zone_known: bool,
    /// The text named its year.
    pub year_known: bool,
}

impl Stamp {
    /// Milliseconds since the epoch; a missing zone is read as UTC. `None` when the year is
    /// unknown (use [`Stamp::millis_near`]).
    pub fn millis(&self) -> Option<Millis> {
        self.year_known.then_some(self.millis)
    }

    /// Seconds since the epoch with the full fraction; `None` unless zone and year are known.
    pub fn exact_seconds(&self) -> Option<f64> {
        (self.zone_known && self.year_known)
            .then(|| self.millis as f64 / 1000.0 + f64::from(self.sub_ms_nanos) / 1e9)
    }

    /// Milliseconds since the epoch, a missing year taken from `reference` (the job's other
    /// times): the year that puts the stamp closest to it. Without a reference, the year of
    /// 1970 stays (the caller's clock decides then).
    pub fn millis_near(&self, reference: Option<Millis>) -> Millis {
        let (Some((month, day)), Some(reference)) = (self.month_day, reference) else {
            return self.millis;
        };
        let in_day = self.millis.rem_euclid(86_400_000);
        let ref_year = civil_from_days(reference.div_euclid(86_400_000)).0;
        [ref_year - 1, ref_year, ref_year + 1]
            .into_iter()
            .filter(|&y| day <= days_in_month(y, month))
            .map(|y| days_from_civil(y, month, day) * 86_400_000 + in_day)
            .min_by_key(|t| (t - reference).abs())
            .unwrap_or(self.millis)
    }
}

/// Parses a timestamp in any form the module doc lists; anything else is `None`.
pub fn parse(text: &str) -> Option<Stamp> {
    let b = text.trim().as_bytes();
    parse_iso(b)
        .or_else(|| parse_syslog(b))
        .or_else(|| parse_glog(b))
}

/// Digits of `b[range]` as a number; `None` when empty or not all digits.
fn num(b: &[u8], range: std::ops::Range<usize>) -> Option<i64> {
    let digits = b.get(range)?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0i64, |n, d| n * 10 + i64::from(d - b'0')),
    )
}

/// `HH:MM:SS[.frac]` at `b[at..]`: (seconds of the day, nanoseconds, index after).
fn clock(b: &[u8], at: usize) -> Option<(i64, u32, usize)> {
    let (hour, minute, second) = (
        num(b, at..at + 2)?,
        num(b, at + 3..at + 5)?,
        num(b, at + 6..at + 8)?,
    );
    if b.get(at + 2) != Some(&b':') || b.get(at + 5) != Some(&b':') {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut i = at + 8;
    let mut nanos = 0u32;
    if matches!(b.get(i), Some(b'.' | b',')) {
        let start = i + 1;
        let mut end = start;
        while b.get(end).is_some_and(u8::is_ascii_digit) {
            end += 1;
        }
        if end == start {
            return None;
        }
        // Nanoseconds matter at most; further digits are read and ignored.
        for k in 0..9 {
            let d = if start + k < end {
                b[start + k] - b'0'
            } else {
                0
            };
            nanos = nanos * 10 + u32::from(d);
        }
        i = end;
    }
    Some((hour * 3600 + minute * 60 + second, nanos, i))
}

fn stamp(days: i64, secs: i64, nanos: u32, offset_s: i64, zone: bool, year: bool) -> Stamp {
    let total_ms = (days * 86_400 + secs - offset_s) * 1000 + i64::from(nanos / 1_000_000);
    Stamp {
        millis: total_ms,
        sub_ms_nanos: nanos % 1_000_000,
        month_day: None,
        zone_known: zone,
        year_known: year,
    }
}

fn parse_iso(b: &[u8]) -> Option<Stamp> {
    let (year, month, day) = (num(b, 0..4)?, num(b, 5..7)?, num(b, 8..10)?);
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
    {
        return None;
    }
    if !(1..=12).contains(&month) || !(1..=days_in_month(year, month)).contains(&day) {
        return None;
    }
    let (secs, nanos, i) = clock(b, 11)?;
    let (offset, zone) = match b.get(i) {
        None => (0, false),
        Some(b'Z' | b'z') if i + 1 == b.len() => (0, true),
        Some(&sign @ (b'+' | b'-')) => {
            let rest = &b[i + 1..];
            let (h, m) = match rest.len() {
                5 if rest[2] == b':' => (num(b, i + 1..i + 3)?, num(b, i + 4..i + 6)?),
                4 => (num(b, i + 1..i + 3)?, num(b, i + 3..i + 5)?),
                2 => (num(b, i + 1..i + 3)?, 0),
                _ => return None,
            };
            if h > 23 || m > 59 {
                return None;
            }
            let off = h * 3600 + m * 60;
            (if sign == b'+' { off } else { -off }, true)
        }
        _ => return None,
    };
    Some(stamp(
        days_from_civil(year, month, day),
        secs,
        nanos,
        offset,
        zone,
        true,
    ))
}

const MONTHS: [&[u8]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// `Nov 29 09:02:41` or `Nov  9 09:02:41` (RFC 3164): no year, no zone.
fn parse_syslog(b: &[u8]) -> Option<Stamp> {
    let month = MONTHS.iter().position(|m| b.get(0..3) == Some(*m))? as i64 + 1;
    if b.get(3) != Some(&b' ') {
        return None;
    }
    let day = match (b.get(4), b.get(5)) {
        (Some(b' '), Some(d)) if d.is_ascii_digit() => i64::from(d - b'0'),
        _ => num(b, 4..6)?,
    };
    if b.get(6) != Some(&b' ') || !(1..=days_in_month(2000, month)).contains(&day) {
        return None;
    }
    let (secs, nanos, i) = clock(b, 7)?;
    if i != b.len() {
        return None;
    }
    Some(Stamp {
        month_day: Some((month, day)),
        ..stamp(
            days_from_civil(1970, month, day.min(days_in_month(1970, month))),
            secs,
            nanos,
            0,
            false,
            false,
        )
    })
}

/// glog's `E1129 21:42:00.429470054` (level, MMDD, time): no year, no zone.
fn parse_glog(b: &[u8]) -> Option<Stamp> {
    if !matches!(b.first(), Some(b'I' | b'W' | b'E' | b'F')) {
        return None;
    }
    let (month, day) = (num(b, 1..3)?, num(b, 3..5)?);
    if b.get(5) != Some(&b' ') || !(1..=12).contains(&month) {
        return None;
    }
    if !(1..=days_in_month(2000, month)).contains(&day) {
        return None;
    }
    let (secs, nanos, i) = clock(b, 6)?;
    if i != b.len() {
        return None;
    }
    Some(Stamp {
        month_day: Some((month, day)),
        ..stamp(
            days_from_civil(1970, month, day.min(days_in_month(1970, month))),
            secs,
            nanos,
            0,
            false,
            false,
        )
    })
}

/// RFC 3339 with milliseconds, UTC: how incidents print their times.
pub fn format_ms(ms: Millis) -> String {
    let nanos = u128::try_from(ms.max(0)).unwrap_or(0) * 1_000_000;
    // `rfc3339_from_unix_nanos` prints nine fraction digits; keep three.
    let full = rfc3339_from_unix_nanos(nanos);
    match full.split_once('.') {
        Some((head, frac)) => format!("{head}.{}Z", &frac[..3]),
        None => full,
    }
}

/// Formats Unix nanoseconds as `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` (UTC).
pub fn rfc3339_from_unix_nanos(nanos: u128) -> String {
    let secs = (nanos / 1_000_000_000) as i64;
    let frac = (nanos % 1_000_000_000) as u32;
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{frac:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01 (the inverse of [`days_from_civil`]).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Days in a month of a year.
pub fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses a duration as people write it in flags and config: `90s`, `5m`, `1h30m`, `250ms`,
/// `2d`, or a bare number of seconds.
pub fn parse_duration_ms(text: &str) -> Option<Millis> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Ok(secs) = text.parse::<u64>() {
        return i64::try_from(secs).ok()?.checked_mul(1000);
    }
    let mut total: i64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let factor = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(n.checked_mul(factor)?)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> Option<Millis> {
        parse(text).and_then(|s| s.millis())
    }

    #[test]
    fn rfc3339_and_iso_forms() {
        assert_eq!(ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(ms("1970-01-01T00:00:01.250Z"), Some(1250));
        assert_eq!(
            ms("2024-05-01T12:00:00.123456789Z"),
            Some(1_714_564_800_123)
        );
        assert_eq!(ms("2024-05-01T14:00:00+02:00"), Some(1_714_564_800_000));
        assert_eq!(ms("2024-05-01T11:00:00-0100"), Some(1_714_564_800_000));
        assert_eq!(ms("2024-05-01T13:00:00+01"), Some(1_714_564_800_000));
        assert_eq!(ms("2024-02-29t00:00:00z"), Some(1_709_164_800_000));
        let s = parse("2024-05-01T00:00:00.123456789123Z").expect("parses");
        let exact = s.exact_seconds().expect("zone and year known");
        assert!((exact - 1_714_521_600.123_457).abs() < 1e-6, "{exact}");
    }

    #[test]
    fn a_zone_less_stamp_says_so_and_each_caller_decides() {
        let s = parse("2024-05-01 12:00:00").expect("parses");
        assert!(!s.zone_known && s.year_known);
        // The correlator reads it as UTC ...
        assert_eq!(s.millis(), Some(1_714_564_800_000));
        // ... the latency histogram does not guess.
        assert_eq!(s.exact_seconds(), None);
    }

    #[test]
    fn comma_fractions() {
        assert_eq!(ms("2024-05-01 12:00:00,5"), Some(1_714_564_800_500));
        assert_eq!(ms("2024-05-01 12:00:00,123456"), Some(1_714_564_800_123));
    }

    #[test]
    fn days_per_month_are_checked() {
        assert_eq!(ms("2000-02-29T00:00:00Z"), Some(951_782_400_000));
        for bad in [
            "2023-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2024-04-31T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-05-01T24:00:00Z",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(2100, 2), 28);
        assert_eq!(days_in_month(2000, 2), 29);
    }

    #[test]
    fn syslog_and_glog_have_no_year_and_are_placed_near_the_job() {
        let job = ms("2024-11-29T09:00:00Z");
        let s = parse("Nov 29 09:02:41").expect("syslog");
        assert!(!s.year_known && !s.zone_known);
        assert_eq!(s.millis(), None);
        assert_eq!(Some(s.millis_near(job)), ms("2024-11-29T09:02:41Z"));
        let s = parse("Nov  9 09:02:41").expect("one-digit day");
        assert_eq!(Some(s.millis_near(job)), ms("2024-11-09T09:02:41Z"));
        // A December line next to January times belongs to the year before.
        let s = parse("Dec 31 23:59:59").expect("syslog");
        assert_eq!(
            Some(s.millis_near(ms("2025-01-01T00:00:10Z"))),
            ms("2024-12-31T23:59:59Z")
        );
        let g = parse("E1129 21:42:00.429470054").expect("glog");
        assert!(!g.year_known);
        assert_eq!(Some(g.millis_near(job)), ms("2024-11-29T21:42:00.429Z"));
        let leap = parse("Feb 29 00:00:00").expect("a leap day parses without a year");
        assert_eq!(
            Some(leap.millis_near(ms("2024-03-01T00:00:00Z"))),
            ms("2024-02-29T00:00:00Z")
        );
    }

    #[test]
    fn other_shapes_are_not_guessed() {
        for bad in [
            "",
            "2024-05-01T12:00:00Zjunk",
            "2024-05-01T12:00:00.Z",
            "Foo 29 09:02:41",
            "Nov 32 09:02:41",
            "X1129 21:42:00",
            "E1329 21:42:00",
            "12:00:00",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn format_round_trips() {
        let t = 1_714_564_800_123;
        assert_eq!(format_ms(t), "2024-05-01T12:00:00.123Z");
        assert_eq!(ms(&format_ms(t)), Some(t));
        assert_eq!(rfc3339_from_unix_nanos(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            rfc3339_from_unix_nanos(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000000Z"
        );
        for d in [-1000, 0, 59, 11_016, 20_000] {
            let (y, m, day) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, day), d);
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("90"), Some(90_000));
        assert_eq!(parse_duration_ms("250ms"), Some(250));
        assert_eq!(parse_duration_ms("5m"), Some(300_000));
        assert_eq!(parse_duration_ms("1h30m"), Some(5_400_000));
        assert_eq!(parse_duration_ms("2d"), Some(172_800_000));
        assert_eq!(parse_duration_ms("5 minutes"), None);
        assert_eq!(parse_duration_ms("m"), None);
    }
}
