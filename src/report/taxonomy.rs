//! The root-cause taxonomy of `faultline report`: KB error codes and categories mapped to the
//! buckets of the Llama 3 interruption table (Dubey et al. 2024, Table 5), so that a fleet's
//! own table reads like the published one. docs/report.md lists the mapping.
//!
//! The error code decides first where the KB category is too coarse (an SRAM Xid is
//! `gpu_memory_ecc` like an HBM one; Slurm's node failures are `gpu_hardware` in the KB but say
//! nothing about the GPU); the category decides otherwise. An incident whose root is unknown is
//! a collective hang when its headline is a collective timeout or error, else unknown.

use serde::{Deserialize, Serialize};

/// A bucket of the interruption table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bucket {
    /// A GPU failed (fell off the bus, a hardware or thermal fault, NVLink).
    Gpu,
    /// GPU memory (HBM): uncorrectable ECC, row remapping failures.
    GpuMemory,
    /// GPU on-chip SRAM: uncorrectable SRAM errors.
    GpuSram,
    /// The GPU System Processor (GSP) and other GPU firmware.
    GpuSystemProcessor,
    /// The host's network card (HCA): port errors, driver command failures.
    Nic,
    /// The fabric beyond the NIC: switches, cables, remote peers, transport retries.
    Network,
    /// A collective (NCCL, Gloo) hung or failed and nothing said why.
    CollectiveHang,
    /// The host itself: node failures, the driver or environment missing.
    Host,
    /// Storage: file systems, local disks, checkpoint writes.
    Storage,
    /// The scheduler or launcher: preemption, time limits, cancellations, rendezvous.
    Scheduler,
    /// The job's own code: exceptions, CUDA errors in its kernels, out of memory.
    UserCode,
    /// NaN or Inf in the loss or gradients: silent data corruption or the model.
    Numerical,
    /// Nothing known said what failed.
    Unknown,
}

/// Every bucket, in table order.
pub const BUCKETS: [Bucket; 13] = [
    Bucket::Gpu,
    Bucket::GpuMemory,
    Bucket::GpuSram,
    Bucket::GpuSystemProcessor,
    Bucket::Nic,
    Bucket::Network,
    Bucket::CollectiveHang,
    Bucket::Host,
    Bucket::Storage,
    Bucket::Scheduler,
    Bucket::UserCode,
    Bucket::Numerical,
    Bucket::Unknown,
];

impl Bucket {
    /// The row label of the table.
    pub fn label(self) -> &'static str {
        match self {
            Bucket::Gpu => "GPU",
            Bucket::GpuMemory => "GPU memory",
            Bucket::GpuSram => "GPU SRAM",
            Bucket::GpuSystemProcessor => "GPU system processor",
            Bucket::Nic => "NIC",
            Bucket::Network => "network switch/cable",
            Bucket::CollectiveHang => "NCCL/collective hang, root unknown",
            Bucket::Host => "host",
            Bucket::Storage => "storage",
            Bucket::Scheduler => "scheduler",
            Bucket::UserCode => "user code/OOM",
            Bucket::Numerical => "numerical (NaN/Inf)",
            Bucket::Unknown => "unknown",
        }
    }

    /// The snake-case name (JSON, metrics labels).
    pub fn name(self) -> &'static str {
        match self {
            Bucket::Gpu => "gpu",
            Bucket::GpuMemory => "gpu_memory",
            Bucket::GpuSram => "gpu_sram",
            Bucket::GpuSystemProcessor => "gpu_system_processor",
            Bucket::Nic => "nic",
            Bucket::Network => "network",
            Bucket::CollectiveHang => "collective_hang",
            Bucket::Host => "host",
            Bucket::Storage => "storage",
            Bucket::Scheduler => "scheduler",
            Bucket::UserCode => "user_code",
            Bucket::Numerical => "numerical",
            Bucket::Unknown => "unknown",
        }
    }

    /// Whether a failure in this bucket blames its host's hardware (counted for lemon nodes).
    pub fn blames_host(self) -> bool {
        matches!(
            self,
            Bucket::Gpu
                | Bucket::GpuMemory
                | Bucket::GpuSram
                | Bucket::GpuSystemProcessor
                | Bucket::Nic
                | Bucket::Host
        )
    }
}

/// Codes whose bucket is not their category's.
const BY_CODE: &[(&str, Bucket)] = &[
    ("XID_172", Bucket::GpuSram),
    ("NCCL_IB_ASYNC_EVENT", Bucket::Nic),
    ("NCCL_IBV_CALL_FAILED", Bucket::Nic),
    ("MLX5_CMD_FAILED", Bucket::Nic),
    ("MLX5_CQE_ERROR", Bucket::Nic),
    ("MLX5_PROBE_FAILED", Bucket::Nic),
    ("IB_PORT_NOT_ACTIVE", Bucket::Nic),
    ("NVIDIA_PEERMEM_ERROR", Bucket::Nic),
    ("SLURM_SRUN_NODE_FAILURE", Bucket::Host),
    ("SLURM_NODE_FAIL", Bucket::Host),
];

/// The bucket of an interruption whose root (or headline, when `root_known` is false) has
/// `code` and KB `category`.
pub fn classify(code: &str, category: &str, root_known: bool) -> Bucket {
    if !root_known {
        return match category {
            "collective_timeout" | "collective_error" => Bucket::CollectiveHang,
            _ => Bucket::Unknown,
        };
    }
    if let Some((_, b)) = BY_CODE.iter().find(|(c, _)| *c == code) {
        return *b;
    }
    match category {
        "gpu_hardware" | "interconnect_nvlink" => Bucket::Gpu,
        "gpu_memory_ecc" => Bucket::GpuMemory,
        "gpu_firmware" => Bucket::GpuSystemProcessor,
        "network_ib" | "network_tcp" => Bucket::Network,
        "collective_timeout" | "collective_error" => Bucket::CollectiveHang,
        "env_config" => Bucket::Host,
        "storage" => Bucket::Storage,
        "scheduler" | "rendezvous" => Bucket::Scheduler,
        "device_oom" | "host_oom" | "kernel_bug" | "script_error" | "data_pipeline" | "crash" => {
            Bucket::UserCode
        }
        "numerical" => Bucket::Numerical,
        _ => Bucket::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_decide_before_categories() {
        assert_eq!(classify("XID_172", "gpu_memory_ecc", true), Bucket::GpuSram);
        assert_eq!(
            classify("XID_48", "gpu_memory_ecc", true),
            Bucket::GpuMemory
        );
        assert_eq!(
            classify("SLURM_SRUN_NODE_FAILURE", "gpu_hardware", true),
            Bucket::Host
        );
        assert_eq!(classify("XID_79", "gpu_hardware", true), Bucket::Gpu);
        assert_eq!(
            classify("NCCL_IB_ASYNC_EVENT", "network_ib", true),
            Bucket::Nic
        );
        assert_eq!(
            classify("NCCL_IB_COMPLETION_ERROR", "network_ib", true),
            Bucket::Network
        );
        assert_eq!(classify("CUDA_OOM", "device_oom", true), Bucket::UserCode);
    }

    #[test]
    fn an_unknown_root_is_a_hang_only_when_a_collective_headlines() {
        assert_eq!(
            classify("NCCL_TIMEOUT", "collective_timeout", false),
            Bucket::CollectiveHang
        );
        assert_eq!(
            classify("TORCHELASTIC_CHILD_FAILED", "crash", false),
            Bucket::Unknown
        );
        assert_eq!(classify("WHATEVER", "new_category", true), Bucket::Unknown);
    }

    #[test]
    fn names_are_distinct_and_hosts_are_blamed_for_hardware_only() {
        let mut names: Vec<&str> = BUCKETS.iter().map(|b| b.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), BUCKETS.len());
        assert!(Bucket::GpuMemory.blames_host());
        assert!(!Bucket::UserCode.blames_host());
        assert!(!Bucket::Network.blames_host());
    }
}
