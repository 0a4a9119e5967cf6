//! The closed label sets of faultline's families. Label values come from these enums (and from
//! the KB's codes, domains and categories), never from job ids, hosts or log text; every value
//! of a set gets its series at zero when the family is registered, so `rate()` sees the first
//! event.

use crate::enrich::MatchEvent;

/// Declares a label enum: its variants, their label text, and `ALL` in declaration order.
macro_rules! label_set {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Parses a label value.
            pub fn parse(text: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == text)
            }
        }
    };
}

label_set!(
    /// Why a record went to the dead-letter topic: the `faultline.reason` header.
    DeadLetterReason {
        /// Over `input.max_record_bytes`.
        TooLarge => "too_large",
        /// Not UTF-8 under `input.envelope = text`.
        InvalidUtf8 => "invalid_utf8",
        /// Not a JSON envelope under `input.envelope = json`.
        NotAnEnvelope => "not_an_envelope",
        /// Processing it panicked, alone, after its batch's retry panicked too.
        Panic => "panic",
        /// Matching it killed the process (an abort, an OOM kill, a stack overflow: what no
        /// panic handler catches), found across restarts by the crash notes.
        CrashedProcess => "crashed_process",
        /// Role `correlate`: an events-topic record that is not a match event faultline can
        /// read.
        InvalidEvent => "invalid_event",
    }
);

label_set!(
    /// Which librdkafka client (`faultline_broker_disconnects_total{client}`).
    KafkaClient {
        /// The consumer of the input topics.
        Consumer => "consumer",
        /// The producer of every output.
        Producer => "producer",
    }
);

label_set!(
    /// Where a caught panic happened (`faultline_panics_total{stage}`).
    PanicStage {
        /// The match stage of `faultline run`.
        Match => "match",
        /// The correlator of role `correlate`.
        Correlate => "correlate",
    }
);

label_set!(
    /// What the correlator of role `correlate` did with an events-topic record
    /// (`faultline_correlator_events_total{result}`).
    CorrelatorResult {
        /// A match event, correlated.
        Correlated => "correlated",
        /// A match event of a KB entry the correlator's KB lacks: correlated with the
        /// diagnosis the event carried (a match member runs another KB version).
        UnknownEntry => "unknown_entry",
        /// A match event seen before: a match member reprocessed its record after a crash or
        /// a rebalance (at-least-once); skipped.
        Duplicate => "duplicate",
        /// An unknown-line event (`type: "unknown"`): its template noted for incidents
        /// without a known root.
        Unknown => "unknown",
        /// A match member's progress note (`type: "progress"`): how far it read an input
        /// partition, which holds expiry while that partition is behind.
        Progress => "progress",
        /// Another `type`, or an unknown-line event while `[unknown]` is off; skipped.
        Skipped => "skipped",
        /// Dead-lettered: unreadable (reason `invalid_event`), or correlating it panicked
        /// (reason `panic`).
        Invalid => "invalid",
    }
);

label_set!(
    /// Where a produce error happened.
    Output {
        /// The match events topic.
        Events => "events",
        /// The dead-letter topic.
        DeadLetter => "dead_letter",
    }
);

label_set!(
    /// The outcome of a KB reload attempt.
    ReloadResult {
        /// A new KB version is in use.
        Success => "success",
        /// The KB did not load or compile; the running one stays.
        Failure => "failure",
        /// The KB loaded but its content did not change.
        Unchanged => "unchanged",
    }
);

label_set!(
    /// Why a span was not exported.
    SpanDrop {
        /// The export queue was full (a burst larger than `max_queue_size`).
        QueueFull => "queue_full",
        /// The exporter failed (collector down, timeout).
        ExportFailed => "export_failed",
    }
);

label_set!(
    /// How an incident resolved (`faultline_incidents_resolved_total{resolution}`).
    ResolutionLabel {
        /// Nothing new for the quiet period.
        Quiet => "quiet",
        /// A later match of the job started a new incident.
        NextIncident => "next_incident",
        /// The job printed a restart marker.
        Restart => "restart",
        /// Dropped to respect a state cap.
        Evicted => "evicted",
        /// The stream ended or the service stopped.
        Shutdown => "shutdown",
    }
);

label_set!(
    /// What the correlator dropped to respect its caps.
    Eviction {
        /// An open incident, resolved as evicted.
        Incident => "incident",
        /// A job's state, forgotten.
        Job => "job",
    }
);

label_set!(
    /// What became of an incident change handed to an output
    /// (`faultline_output_changes_total{output, result}`).
    OutputResult {
        /// Accepted by the receiver.
        Delivered => "delivered",
        /// Not accepted after the retries; the output sends the state again later.
        Failed => "failed",
        /// Given up (retries exhausted or refused): produced to the dead-letter topic.
        DeadLettered => "dead_lettered",
        /// The output's queue was full.
        Dropped => "dropped",
        /// Still queued at shutdown (handled again after the restart).
        Abandoned => "abandoned",
    }
);

label_set!(
    /// An envelope field that may become an extra label of `faultline_matches_total`: a closed
    /// set on purpose, each low-cardinality by nature (a fleet has a handful of clusters, not
    /// thousands of jobs).
    Dimension {
        /// The envelope's `cluster` (or `k8s.cluster.name`).
        Cluster => "cluster",
    }
);

impl Dimension {
    /// The event's value for this dimension.
    pub fn value(self, event: &MatchEvent) -> Option<&str> {
        match self {
            Dimension::Cluster => event.cluster.as_deref(),
        }
    }
}

impl From<crate::incident::Resolution> for ResolutionLabel {
    fn from(r: crate::incident::Resolution) -> Self {
        use crate::incident::Resolution as R;
        match r {
            R::Quiet => ResolutionLabel::Quiet,
            R::NextIncident => ResolutionLabel::NextIncident,
            R::Restart => ResolutionLabel::Restart,
            R::Evicted => ResolutionLabel::Evicted,
            R::Shutdown => ResolutionLabel::Shutdown,
        }
    }
}
