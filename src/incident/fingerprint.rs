//! Incident keys: the fingerprint (`fp2`, "this failure of this job": what tickets, alert
//! labels and idempotency keys are keyed on) and the signature (`fp1`, "this root on this
//! hardware in this job": what restart-loop detection compares across a job's incidents).
//!
//! A given algorithm version must produce the same text for the same inputs forever. A change
//! of inputs or hashing is a new version with a new prefix, never an edit of an old one. `fp1`
//! was the fingerprint of schema_version 1's first releases; it moved to `signature` when a
//! node event learned after the job's own lines could re-elect the root (and so change an
//! `fp1` key) of an incident whose ticket was already raised.
//!
//! # `fp1`
//!
//! Inputs, normalised:
//! 1. the job id, as is;
//! 2. the elected root's error code, as is (error codes are stable KB keys);
//! 3. the root's host, trimmed and lower-cased, or empty;
//! 4. the root's GPU PCI address, lower-cased, a `PCI:` prefix removed, the domain padded to
//!    four hex digits (`3b:00` and `0000:3b:00` are the same GPU) and a trailing `.0` function
//!    removed (`0000:3b:00.0` is the same GPU), or empty.
//!
//! Host and GPU are those of the root event itself, not the inferred culprit: inference
//! sharpens while cascades arrive, and the key must not move with it. An incident whose root is
//! unknown (a cascade or symptom initiated it) has empty host and GPU.
//!
//! Hash: 64-bit FNV-1a over `fp1` followed by each input preceded by a 0x1f unit separator,
//! printed as `fp1:` and sixteen lower-case hex digits.

/// The version tag of the current algorithm, carried as `fingerprint_version`.
pub const VERSION: &str = "fp2";

/// The version tag of the signature ([`fp1`]): what failed where, carried as `signature`.
pub const SIGNATURE_VERSION: &str = "fp1";

/// The `fp2` identity of an incident: its job and its anchor, the earliest of the job's own
/// lines that could open an incident (by log time, then text; lines without a time after those
/// with one). Node events that join later, and re-elections of the root, leave it as it is:
/// a ticket keyed on it follows one failure whatever is learned about its cause.
///
/// Hash: 64-bit FNV-1a over `fp2`, then the job id, the anchor's log time in decimal
/// milliseconds (empty without one) and the anchor's text, each preceded by a 0x1f unit
/// separator; printed as `fp2:` and sixteen lower-case hex digits.
pub fn fp2(job_id: &str, anchor_ms: Option<i64>, anchor_line: &str) -> String {
    let time = anchor_ms.map(|t| t.to_string()).unwrap_or_default();
    let mut hash = crate::record::Fnv::new();
    hash.write(b"fp2");
    for part in [job_id, &time, anchor_line] {
        hash.write(&[0x1f]);
        hash.write(part.as_bytes());
    }
    format!("fp2:{:016x}", hash.finish())
}

/// What a fingerprint is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FingerprintInput<'a> {
    /// The job id, as is.
    pub job_id: &'a str,
    /// The elected root's error code.
    pub error_code: &'a str,
    /// The root event's host, if known; trimmed and lower-cased when hashed.
    pub host: Option<&'a str>,
    /// The root event's GPU PCI address, if known; normalised by [`normalize_pci`] when hashed.
    pub gpu: Option<&'a str>,
}

/// The `fp1` fingerprint of `input`.
pub fn fp1(input: &FingerprintInput<'_>) -> String {
    let host = input
        .host
        .map(|h| h.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let gpu = input.gpu.map(normalize_pci).unwrap_or_default();
    let mut hash = crate::record::Fnv::new();
    hash.write(SIGNATURE_VERSION.as_bytes());
    for part in [input.job_id, input.error_code, &host, &gpu] {
        hash.write(&[0x1f]);
        hash.write(part.as_bytes());
    }
    format!("{SIGNATURE_VERSION}:{:016x}", hash.finish())
}

/// A PCI address as the `fp1` key spells it: `0000:3b:00`.
pub fn normalize_pci(raw: &str) -> String {
    let mut s = raw.trim().to_ascii_lowercase();
    if let Some(rest) = s.strip_prefix("pci:") {
        s = rest.to_string();
    }
    if let Some(rest) = s.strip_suffix(".0") {
        s = rest.to_string();
    }
    // bus:device -> 0000:bus:device
    if s.matches(':').count() == 1 {
        s = format!("0000:{s}");
    }
    // The domain is printed with 4 or 8 hex digits depending on the tool.
    if let Some((domain, rest)) = s.split_once(':') {
        if domain.len() == 8 && domain.starts_with("0000") {
            s = format!("{}:{rest}", &domain[4..]);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xid() -> FingerprintInput<'static> {
        FingerprintInput {
            job_id: "llm-pretrain-7",
            error_code: "XID_79",
            host: Some("node-05"),
            gpu: Some("0000:3b:00"),
        }
    }

    /// The golden values: if this test fails, `fp1` changed, which must never happen. Write
    /// `fp2` instead.
    #[test]
    fn fp1_is_frozen() {
        assert_eq!(fp1(&xid()), "fp1:359a61851ef2a5e2");
        assert_eq!(
            fp1(&FingerprintInput {
                job_id: "j",
                error_code: "NCCL_TIMEOUT",
                host: None,
                gpu: None,
            }),
            "fp1:0f7ece76788cbe9e"
        );
    }

    #[test]
    fn spelling_variants_of_the_same_gpu_and_host_agree() {
        let a = fp1(&xid());
        for gpu in [
            "PCI:0000:3B:00",
            "0000:3b:00.0",
            "3b:00",
            "00000000:3b:00.0",
        ] {
            let b = fp1(&FingerprintInput {
                gpu: Some(gpu),
                host: Some(" NODE-05 "),
                ..xid()
            });
            assert_eq!(a, b, "{gpu}");
        }
    }

    #[test]
    fn every_input_counts() {
        let a = fp1(&xid());
        assert_ne!(
            a,
            fp1(&FingerprintInput {
                job_id: "x",
                ..xid()
            })
        );
        assert_ne!(
            a,
            fp1(&FingerprintInput {
                error_code: "XID_48",
                ..xid()
            })
        );
        assert_ne!(
            a,
            fp1(&FingerprintInput {
                host: Some("node-06"),
                ..xid()
            })
        );
        assert_ne!(a, fp1(&FingerprintInput { gpu: None, ..xid() }));
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(
            fp1(&FingerprintInput {
                job_id: "ab",
                error_code: "c",
                host: None,
                gpu: None
            }),
            fp1(&FingerprintInput {
                job_id: "a",
                error_code: "bc",
                host: None,
                gpu: None
            })
        );
    }
}
