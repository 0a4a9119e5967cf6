use std::sync::Arc;

use super::*;
use crate::offsets::{RecordId, TopicPartition};
use crate::source::kafka::Batch;

/// A batch of the given (partition, offset) records.
fn batch(records: &[(i32, i64)]) -> Batch {
    let topic: Arc<str> = Arc::from("logs");
    let mut b = Batch::default();
    for &(partition, offset) in records {
        let id = RecordId {
            tp: TopicPartition {
                topic: Arc::clone(&topic),
                partition,
            },
            epoch: 1,
            offset,
        };
        b.push(id, None, Some(b"line"), Vec::new());
    }
    b
}

fn span(partition: i32, first: i64, last: i64) -> Span {
    Span {
        topic: "logs".into(),
        partition,
        first,
        last,
    }
}

fn offsets(first: i64, last: i64) -> Vec<(i32, i64)> {
    (first..=last).map(|o| (0, o)).collect()
}

#[test]
fn crashes_over_overlapping_notes_narrow_the_suspect() {
    let mut n = Notes {
        matching: vec![span(0, 10, 29), span(1, 5, 6)],
        suspects: Vec::new(),
    };
    n.fold_crash();
    assert!(n.matching.is_empty());
    assert_eq!(
        n.suspects,
        vec![
            Suspect {
                span: span(0, 10, 29),
                crashes: 1
            },
            Suspect {
                span: span(1, 5, 6),
                crashes: 1
            }
        ]
    );
    // The next process batched differently: the overlap is what both crashes had in common.
    n.matching = vec![span(0, 20, 40)];
    n.fold_crash();
    assert!(n.suspects.contains(&Suspect {
        span: span(0, 20, 29),
        crashes: 2
    }));
    // A crash elsewhere in the partition: another cause, counted afresh.
    n.matching = vec![span(0, 50, 60)];
    n.fold_crash();
    assert!(n.suspects.contains(&Suspect {
        span: span(0, 50, 60),
        crashes: 1
    }));
    assert_eq!(n.suspects.len(), 2, "one suspect per partition");
}

#[test]
fn suspects_of_two_crashes_are_matched_one_record_at_a_time_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut q = Quarantine::open(dir.path(), "g", None).expect("opens");
    q.notes.suspects = vec![Suspect {
        span: span(0, 3, 4),
        crashes: 2,
    }];
    let b = batch(&[(0, 1), (1, 7), (0, 2), (0, 3), (1, 8), (0, 4), (0, 5)]);
    assert_eq!(
        q.plan(&b.records),
        vec![
            Step::Run(0..3),
            Step::One(3),
            Step::Run(4..5),
            Step::One(5),
            Step::Run(6..7)
        ]
    );
    // One crash only: matched together with the rest.
    q.notes.suspects[0].crashes = 1;
    assert_eq!(q.plan(&b.records), vec![Step::Run(0..7)]);
    // A single record that crashed twice or more is dead-lettered unmatched.
    q.notes.suspects = vec![Suspect {
        span: span(0, 4, 4),
        crashes: 3,
    }];
    assert_eq!(
        q.plan(&b.records),
        vec![
            Step::Run(0..5),
            Step::DeadLetter {
                index: 5,
                crashes: 3
            },
            Step::Run(6..7)
        ]
    );
}

#[test]
fn a_suspect_is_dropped_once_the_partition_reached_its_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut q = Quarantine::open(dir.path(), "g", None).expect("opens");
    q.notes.suspects = vec![
        Suspect {
            span: span(0, 10, 20),
            crashes: 2,
        },
        Suspect {
            span: span(1, 0, 5),
            crashes: 1,
        },
    ];
    q.done(&batch(&offsets(10, 15)).records);
    assert_eq!(q.suspects().len(), 2, "offsets 16 to 20 are still ahead");
    q.done(&batch(&[(0, 16), (0, 20), (2, 99)]).records);
    assert_eq!(q.suspects().len(), 1);
    assert_eq!(q.suspects()[0].span.partition, 1);
}

/// A process that dies while matching leaves its note: the next one opens it.
fn crash_while_matching(dir: &Path, records: &[(i32, i64)]) -> Quarantine {
    let mut q = Quarantine::open(dir, "group/1", Some("pod-0")).expect("opens");
    q.matching(&batch(records).records);
    drop(q);
    Quarantine::open(dir, "group/1", Some("pod-0")).expect("reopens")
}

#[test]
fn three_crashes_on_one_record_dead_letter_it_and_an_idle_kill_is_no_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Crash 1 and 2: the same batch of 30 records.
    let q = crash_while_matching(dir.path(), &offsets(0, 29));
    assert_eq!(q.suspects()[0].crashes, 1);
    assert_eq!(
        q.plan(&batch(&offsets(0, 29)).records),
        vec![Step::Run(0..30)]
    );
    let q = crash_while_matching(dir.path(), &offsets(0, 29));
    assert_eq!(q.suspects()[0].crashes, 2);
    let steps = q.plan(&batch(&offsets(0, 29)).records);
    assert_eq!(steps.len(), 30, "one record at a time: {steps:?}");
    // Crash 3: matching offset 17 alone.
    let mut q = crash_while_matching(dir.path(), &[(0, 17)]);
    assert_eq!(
        q.suspects(),
        &[Suspect {
            span: span(0, 17, 17),
            crashes: 3
        }]
    );
    let b = batch(&offsets(17, 40));
    assert_eq!(
        q.plan(&b.records)[0],
        Step::DeadLetter {
            index: 0,
            crashes: 3
        }
    );
    q.done(&b.records);
    // Killed while idle: the note was cleared, nothing is suspected.
    q.matching(&batch(&offsets(41, 50)).records);
    q.idle();
    drop(q);
    let q = Quarantine::open(dir.path(), "group/1", Some("pod-0")).expect("reopens");
    assert!(q.suspects().is_empty(), "{:?}", q.suspects());
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("lists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.contains(&"crash-notes-group_1-pod-0.json".to_string()),
        "{names:?}"
    );
}

#[test]
fn unreadable_notes_start_afresh_and_an_unwritable_directory_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("crash-notes-g.json"), b"{not json").expect("write");
    let q = Quarantine::open(dir.path(), "g", None).expect("opens");
    assert!(q.suspects().is_empty());
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").expect("write");
    let err = Quarantine::open(&file.join("below"), "g", None).expect_err("not a directory");
    assert!(err.to_string().contains("a-file"), "{err}");
}
