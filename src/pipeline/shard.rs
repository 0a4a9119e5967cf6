//! Correlator shards: where a match member puts each event on the events topic so that every
//! match of a job and of its hosts meets in one correlator.
//!
//! The events topic has one partition per correlator shard. Without `incidents.shard_by`
//! there is one shard: every event goes to partition 0, and one correlator (the active member
//! of the correlator group; the others stand by) sees them all. With `shard_by = "cluster"`,
//! an event goes to the partition its cluster hashes to (FNV-1a, modulo the partition count
//! read at start): a cluster's jobs and nodes stay together, and the correlator group spreads
//! the partitions over its members. Events keep their key (the job id, `node:<host>` for a
//! node's own line), so other consumers of the topic key on it as before.

use crate::enrich::MatchEvent;
use crate::incident::config::ShardBy;
use crate::record::Provenance;

/// Picks an event's partition on the events topic.
#[derive(Debug, Clone)]
pub struct EventPartitioner {
    partitions: i32,
    shard_by: Option<ShardBy>,
}

impl EventPartitioner {
    /// A partitioner over `partitions` (at least 1) partitions.
    pub fn new(partitions: i32, shard_by: Option<ShardBy>) -> Self {
        EventPartitioner {
            partitions: partitions.max(1),
            shard_by,
        }
    }

    /// Every shard's partition: where a note that each correlator must hear goes (a progress
    /// note, `pipeline::progress`).
    pub fn shards(&self) -> std::ops::Range<i32> {
        match self.shard_by {
            None => 0..1,
            Some(ShardBy::Cluster) => 0..self.partitions,
        }
    }

    /// The shard key of `event`: its cluster, else the topic its line was read from.
    pub fn shard_key(event: &MatchEvent) -> &str {
        key_of(event.cluster.as_deref(), &event.source)
    }

    /// The partition of `event`.
    pub fn partition(&self, event: &MatchEvent) -> i32 {
        self.partition_of(event.cluster.as_deref(), &event.source)
    }

    /// The partition of an event of a line from `source` in `cluster`: what [`Self::partition`]
    /// gives a match event of that line, so the `unknown` events of a job meet its match events
    /// in one correlator.
    pub fn partition_of(&self, cluster: Option<&str>, source: &Provenance) -> i32 {
        match self.shard_by {
            None => 0,
            Some(ShardBy::Cluster) => shard_of(key_of(cluster, source), self.partitions),
        }
    }
}

/// The shard key of a line from `source` in `cluster`: the cluster, else the input topic.
fn key_of<'a>(cluster: Option<&'a str>, source: &'a Provenance) -> &'a str {
    if let Some(c) = cluster.filter(|c| !c.is_empty()) {
        return c;
    }
    match source {
        Provenance::Kafka { topic, .. } => topic,
        Provenance::File { path, .. } => path,
    }
}

/// The shard (partition) of `key` among `partitions`: FNV-1a 64, stable across versions and
/// machines (a correlator's shard must not move when a match member restarts).
pub fn shard_of(key: &str, partitions: i32) -> i32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % partitions.max(1) as u64) as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incident::testutil::event;
    use crate::kb::Role;

    #[test]
    fn one_shard_without_shard_by_and_a_stable_shard_per_cluster() {
        let mut a = event("XID_79", Role::Root, "gpu_hardware").build();
        a.cluster = Some("cluster-a".into());
        let one = EventPartitioner::new(12, None);
        assert_eq!(one.partition(&a), 0);
        let by = EventPartitioner::new(12, Some(ShardBy::Cluster));
        let p = by.partition(&a);
        assert_eq!(p, shard_of("cluster-a", 12), "the cluster decides");
        // Pinned: the hash may never change (shards must not move across versions).
        assert_eq!(shard_of("cluster-a", 1_000_003), 303_475);
        let mut b = a.clone();
        b.job_id = "another-job".into();
        assert_eq!(by.partition(&b), p, "every job of a cluster in one shard");
        let spread: std::collections::BTreeSet<i32> = (0..64)
            .map(|i| shard_of(&format!("cluster-{i}"), 4))
            .collect();
        assert_eq!(spread.len(), 4, "clusters spread over every shard");
        b.cluster = None;
        assert_eq!(
            EventPartitioner::shard_key(&b),
            match &b.source {
                Provenance::Kafka { topic, .. } => topic.as_str(),
                Provenance::File { path, .. } => path.as_str(),
            },
            "without a cluster, the input topic"
        );
        // An unknown event of the same line lands with the match events.
        assert_eq!(by.partition_of(a.cluster.as_deref(), &a.source), p);
        assert_eq!(by.partition_of(None, &b.source), by.partition(&b));
        assert_eq!(one.partition_of(Some("cluster-a"), &a.source), 0);
    }
}
