//! Log time: the timestamps that lines carry, as milliseconds since the Unix epoch.
//!
//! The correlator runs on the log's own clock, never the wall clock: an event's time is its
//! parsed timestamp, and an event without one takes the correlator's current time (the latest
//! log time seen, or what the caller last passed to [`super::Correlator::advance`]). This is
//! what makes `scan` of last week's files group and resolve exactly as the live service did,
//! and what lets tests move time by writing timestamps instead of sleeping.

use crate::envelope::rfc3339_from_unix_nanos;

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

/// Parses the timestamps faultline's envelopes produce: ISO 8601 / RFC 3339 with `T` or a space
/// between date and time, optional fraction (`.` or `,`), and `Z`, `±HH:MM`, `±HHMM` or no zone
/// (read as UTC). Anything else is `None`: the event then takes the correlator's clock.
pub fn parse_ms(text: &str) -> Option<Millis> {
    let b = text.trim().as_bytes();
    if b.len() < 19 {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let s = b.get(range)?;
        if s.iter().all(u8::is_ascii_digit) {
            std::str::from_utf8(s).ok()?.parse().ok()
        } else {
            None
        }
    };
    if b[4] != b'-' || b[7] != b'-' || !(b[10] == b'T' || b[10] == b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if matches!(b.get(i), Some(b'.' | b',')) {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        // First three digits are milliseconds; the rest is precision we do not need.
        for k in 0..3 {
            let d = b
                .get(start + k)
                .filter(|_| start + k < i)
                .map_or(0, |d| d - b'0');
            millis = millis * 10 + i64::from(d);
        }
    }
    let offset_min = match b.get(i) {
        None => 0,
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) => {
            let rest = &b[i + 1..];
            let (h, m) = match rest.len() {
                5 if rest[2] == b':' => (num(i + 1..i + 3)?, num(i + 4..i + 6)?),
                4 => (num(i + 1..i + 3)?, num(i + 3..i + 5)?),
                2 => (num(i + 1..i + 3)?, 0),
                _ => return None,
            };
            let m = h * 60 + m;
            if sign == b'+' {
                m
            } else {
                -m
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_min * 60;
    Some(secs * 1000 + millis)
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

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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

    #[test]
    fn rfc3339_and_friends() {
        assert_eq!(parse_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_ms("1970-01-01T00:00:01.250Z"), Some(1250));
        assert_eq!(
            parse_ms("2024-05-01T12:00:00.123456789Z"),
            Some(1_714_564_800_123)
        );
        assert_eq!(parse_ms("2024-05-01 12:00:00"), Some(1_714_564_800_000));
        assert_eq!(
            parse_ms("2024-05-01T14:00:00+02:00"),
            Some(1_714_564_800_000)
        );
        assert_eq!(
            parse_ms("2024-05-01T11:00:00-0100"),
            Some(1_714_564_800_000)
        );
        assert_eq!(parse_ms("2024-05-01 12:00:00,5"), Some(1_714_564_800_500));
        assert_eq!(parse_ms("2000-02-29T00:00:00Z"), Some(951_782_400_000));
    }

    #[test]
    fn other_shapes_are_not_guessed() {
        for bad in [
            "",
            "May 18 19:02:39",
            "E1218 20:27:21.426415540",
            "2024-13-01T00:00:00Z",
            "2024-05-01T12:00:00Zjunk",
            "2024-05-01T12:00:00.Z",
        ] {
            assert_eq!(parse_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn format_round_trips() {
        let ms = 1_714_564_800_123;
        assert_eq!(format_ms(ms), "2024-05-01T12:00:00.123Z");
        assert_eq!(parse_ms(&format_ms(ms)), Some(ms));
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
