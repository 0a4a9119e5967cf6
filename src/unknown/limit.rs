//! When an unknown line becomes an `unknown` event: the job's clock and the two rate limits.
//!
//! - An event is **due** when the line's template is new, or its text changed (it generalised,
//!   or siblings merged into it), or it was never reported, or `template_interval_ms` of log
//!   time passed since its last event. The lines in between are not lost: they are counted, and
//!   the next event carries the template's `count`.
//! - A due event goes out when the job has budget left: at most `max_events_per_minute` per job
//!   in each minute of its clock (a tumbling window that starts at the first event after the
//!   previous window ended). Otherwise it is **held back** and counted once
//!   ([`Decision::Suppressed`]); it goes out with the template's next line that finds budget,
//!   still saying `new` or `changed` when that is what was held back.
//!
//! The clock ([`JobClock`]) is the job's log time: the line's timestamp, else the job's last
//! time. `scan` passes no wall clock, so its output depends on the input only; `faultline run`
//! passes the wall clock, and a job's clock then runs on at wall speed from its last log time
//! (a job whose lines carry no timestamp at all starts at 0), so that a long-running job
//! without timestamps still gets one event per template per interval. The clock never goes
//! back. Without any time (a `scan` of lines without timestamps) no interval ever passes:
//! each template is reported when new or changed, and one window holds the whole input.

use std::time::Instant;

use serde::Serialize;

use crate::time::Millis;

/// A minute: the width of the per-job budget window.
pub const WINDOW_MS: Millis = 60_000;

/// Why an event was emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// The template's interval passed since its last event.
    Recurring,
    /// The template's text changed since its last event.
    Changed,
    /// The template's first event.
    New,
}

/// What to do with one unknown line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing is due: the line is counted into its template.
    Quiet,
    /// Emit an event.
    Emit(Change),
    /// Due, but the job's budget for this minute is spent: held back and counted (once per
    /// held-back event).
    Suppressed,
    /// Due and still held back (already counted).
    Held,
}

/// The rate-limit settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Least log time between two events of one template (text changes aside).
    pub template_interval_ms: Millis,
    /// Events per job per [`WINDOW_MS`].
    pub max_events_per_minute: u32,
}

/// A job's clock: its log time, running on at wall speed when the caller gives a wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobClock {
    now: Option<Millis>,
    at: Option<Instant>,
}

impl JobClock {
    /// Moves the clock for a line with log time `line` (already read), at wall time `wall`
    /// (`None`: no wall clock, `scan`); returns the job's time now.
    pub fn tick(&mut self, line: Option<Millis>, wall: Option<Instant>) -> Option<Millis> {
        let carried = match (self.now, self.at, wall) {
            (Some(t), Some(at), Some(w)) => {
                let ran = w.saturating_duration_since(at).as_millis();
                Some(t.saturating_add(Millis::try_from(ran).unwrap_or(Millis::MAX)))
            }
            (t, _, _) => t,
        };
        let now = match (line, carried) {
            (Some(l), Some(c)) => Some(l.max(c)),
            (Some(l), None) => Some(l),
            (None, Some(c)) => Some(c),
            (None, None) => wall.map(|_| 0),
        };
        self.now = now;
        if wall.is_some() {
            self.at = wall;
        }
        now
    }

    /// The job's time now, as last ticked.
    pub fn now(&self) -> Option<Millis> {
        self.now
    }
}

/// One template's rate-limit state.
#[derive(Debug, Clone, Copy, Default)]
pub struct TemplateLimit {
    /// Log time of its last event (`None`: no time was known then, or never).
    last_event: Option<Millis>,
    /// An event was emitted for it.
    emitted: bool,
    /// A due event held back, with the strongest reason seen since.
    held: Option<Change>,
}

/// A job's event budget: a tumbling window of [`WINDOW_MS`].
#[derive(Debug, Clone, Copy, Default)]
pub struct JobBudget {
    start: Option<Millis>,
    used: u32,
    opened: bool,
}

impl JobBudget {
    /// Takes one event from the budget at time `now`; false when this window's is spent.
    fn take(&mut self, now: Option<Millis>, max: u32) -> bool {
        let expired = match (now, self.start) {
            (Some(now), Some(start)) => now >= start.saturating_add(WINDOW_MS),
            (Some(_), None) => true,
            (None, _) => !self.opened,
        };
        if expired {
            self.start = now;
            self.used = 0;
            self.opened = true;
        }
        if self.used < max {
            self.used += 1;
            true
        } else {
            false
        }
    }
}

/// Decides about one line of a template: `change` is what the miner said about it (new, or its
/// text changed), `now` the job's clock.
pub fn decide(
    t: &mut TemplateLimit,
    budget: &mut JobBudget,
    change: Option<Change>,
    now: Option<Millis>,
    limits: Limits,
) -> Decision {
    let interval_passed = match (now, t.last_event) {
        (Some(now), Some(last)) => now >= last.saturating_add(limits.template_interval_ms),
        // Reported while the job had no time yet: once more now that it has one.
        (Some(_), None) => t.emitted,
        (None, _) => false,
    };
    let due = change
        .max(t.held)
        .or_else(|| (!t.emitted).then_some(Change::New))
        .or_else(|| interval_passed.then_some(Change::Recurring));
    let Some(why) = due else {
        return Decision::Quiet;
    };
    if budget.take(now, limits.max_events_per_minute) {
        t.emitted = true;
        t.last_event = now;
        t.held = None;
        return Decision::Emit(why);
    }
    let first_hold = t.held.is_none() || change.is_some_and(|c| Some(c) > t.held);
    t.held = Some(why);
    if first_hold {
        Decision::Suppressed
    } else {
        Decision::Held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const LIMITS: Limits = Limits {
        template_interval_ms: 60_000,
        max_events_per_minute: 10,
    };

    #[test]
    fn new_then_one_per_interval_with_the_lines_in_between_quiet() {
        let mut t = TemplateLimit::default();
        let mut b = JobBudget::default();
        let mut d = |change, now| decide(&mut t, &mut b, change, Some(now), LIMITS);
        assert_eq!(d(Some(Change::New), 0), Decision::Emit(Change::New));
        assert_eq!(d(None, 1_000), Decision::Quiet);
        assert_eq!(d(None, 59_999), Decision::Quiet);
        assert_eq!(d(None, 60_000), Decision::Emit(Change::Recurring));
        assert_eq!(d(None, 61_000), Decision::Quiet);
        // A changed text is reported at once, and restarts the interval.
        assert_eq!(
            d(Some(Change::Changed), 62_000),
            Decision::Emit(Change::Changed)
        );
        assert_eq!(d(None, 120_000), Decision::Quiet);
        assert_eq!(d(None, 122_000), Decision::Emit(Change::Recurring));
    }

    #[test]
    fn the_job_budget_holds_back_and_counts_once_then_reports_the_held_change() {
        let mut b = JobBudget::default();
        let mut ts = vec![TemplateLimit::default(); 12];
        let mut out = Vec::new();
        for (i, t) in ts.iter_mut().enumerate() {
            out.push(decide(
                t,
                &mut b,
                Some(Change::New),
                Some(i as Millis),
                LIMITS,
            ));
        }
        let emitted = out
            .iter()
            .filter(|d| matches!(d, Decision::Emit(_)))
            .count();
        assert_eq!(emitted, 10, "{out:?}");
        assert_eq!(out[10], Decision::Suppressed);
        assert_eq!(out[11], Decision::Suppressed);
        // Template 10's next lines in the same minute: held, not counted again.
        assert_eq!(
            decide(&mut ts[10], &mut b, None, Some(30_000), LIMITS),
            Decision::Held
        );
        // The next minute: the held event goes out, still `new`.
        assert_eq!(
            decide(&mut ts[10], &mut b, None, Some(60_000), LIMITS),
            Decision::Emit(Change::New)
        );
        // Template 0 was reported at 0: at 60,000 its interval passed too.
        assert_eq!(
            decide(&mut ts[0], &mut b, None, Some(60_001), LIMITS),
            Decision::Emit(Change::Recurring)
        );
    }

    #[test]
    fn without_time_only_changes_count_and_one_window_holds_all() {
        let mut t = TemplateLimit::default();
        let mut b = JobBudget::default();
        let limits = Limits {
            template_interval_ms: 60_000,
            max_events_per_minute: 2,
        };
        assert_eq!(
            decide(&mut t, &mut b, Some(Change::New), None, limits),
            Decision::Emit(Change::New)
        );
        for _ in 0..100 {
            assert_eq!(decide(&mut t, &mut b, None, None, limits), Decision::Quiet);
        }
        assert_eq!(
            decide(&mut t, &mut b, Some(Change::Changed), None, limits),
            Decision::Emit(Change::Changed)
        );
        assert_eq!(
            decide(&mut t, &mut b, Some(Change::Changed), None, limits),
            Decision::Suppressed,
            "two events in the only window"
        );
    }

    #[test]
    fn the_clock_follows_log_time_never_goes_back_and_runs_on_with_a_wall_clock() {
        let mut c = JobClock::default();
        assert_eq!(c.tick(None, None), None);
        assert_eq!(c.tick(Some(5_000), None), Some(5_000));
        assert_eq!(c.tick(Some(4_000), None), Some(5_000), "never back");
        assert_eq!(
            c.tick(None, None),
            Some(5_000),
            "an untimed line keeps the time"
        );
        let w0 = Instant::now();
        let mut c = JobClock::default();
        assert_eq!(c.tick(None, Some(w0)), Some(0), "no log time: starts at 0");
        assert_eq!(
            c.tick(None, Some(w0 + Duration::from_secs(90))),
            Some(90_000)
        );
        assert_eq!(
            c.tick(Some(1_700_000_000_000), Some(w0 + Duration::from_secs(91))),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            c.tick(None, Some(w0 + Duration::from_secs(92))),
            Some(1_700_000_001_000),
            "runs on at wall speed from the last log time"
        );
        assert_eq!(c.now(), Some(1_700_000_001_000));
    }
}
