//! The simulated fleet's log lines: Vector JSON records in the wordings the KB recognises
//! (NCCL start-up, six frameworks' progress and checkpoint lines, the failures' own lines and
//! the NCCL timeouts of a bounded sample of the other ranks), plus healthy noise.

use serde::Serialize;

use super::{Attempt, Cause, Failure, Fleet, Framework, JobRun, Ms, NCCL_TIMEOUT};
use crate::time::format_ms;

/// A record: its time, its order among records of the same time, and its JSON text.
pub(super) type Record = (Ms, u64, String);

/// PCI bus of each local GPU of a host.
const BUSES: [&str; 8] = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"];
/// Other ranks that print their NCCL timeout after a failure, at most.
const MAX_CASCADE: usize = 16;

/// The KB error code of the line written for `cause` (`variant` picks among software bugs).
pub(super) fn code_for(cause: Cause, variant: usize) -> &'static str {
    match cause {
        Cause::FaultyGpu | Cause::GpuThermal => "XID_79",
        Cause::GpuHbm3 => "XID_48",
        Cause::GpuSram => "XID_172",
        Cause::GpuSystemProcessor => "XID_119",
        Cause::Nic => "NCCL_IB_ASYNC_EVENT",
        Cause::NetworkSwitchCable => "NCCL_IB_COMPLETION_ERROR",
        Cause::HostMaintenance | Cause::PowerSupply | Cause::ServerChassis | Cause::Io => {
            "SLURM_SRUN_NODE_FAILURE"
        }
        Cause::NcclWatchdog => "NCCL_TIMEOUT",
        Cause::SilentDataCorruption => "MEGATRON_NAN_GRAD_NORM",
        Cause::Ssd => "FS_IO_ERROR",
        Cause::SoftwareBug => ["CUDA_OOM", "PYTHON_KEY_ERROR", "CUDA_ILLEGAL_ADDRESS"][variant % 3],
        Cause::Dependency => "PYTHON_IMPORT_ERROR",
        Cause::Other => "TORCHELASTIC_CHILD_FAILED",
    }
}

/// The PCI address of local GPU `gpu`.
pub(super) fn pci(gpu: usize) -> String {
    format!("0000:{}:00", BUSES[gpu % 8])
}

#[derive(Serialize)]
struct Vector<'a> {
    message: &'a str,
    host: &'a str,
    timestamp: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    job_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rank: Option<u32>,
}

/// Collects records in order.
struct Out {
    records: Vec<Record>,
    seq: u64,
}

impl Out {
    fn push(&mut self, t: Ms, host: &str, job: Option<&str>, rank: Option<u32>, message: &str) {
        let v = Vector {
            message,
            host,
            timestamp: format_ms(t),
            job_id: job,
            rank,
        };
        // Serialising a struct of strings and numbers cannot fail.
        let text = serde_json::to_string(&v).unwrap_or_default();
        self.seq += 1;
        self.records.push((t, self.seq, text));
    }
}

/// Every record of the fleet, unsorted.
pub(super) fn render(fleet: &Fleet, seed: u64) -> Vec<Record> {
    let mut out = Out {
        records: Vec::new(),
        seq: 0,
    };
    let mut mix = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        mix ^= mix << 13;
        mix ^= mix >> 7;
        mix ^= mix << 17;
        mix
    };
    for job in &fleet.jobs {
        let mut step_base = 0u64;
        for attempt in &job.attempts {
            startup(&mut out, fleet, job, attempt, next());
            step_base = training(&mut out, fleet, job, attempt, step_base);
            if let Some(f) = &attempt.failure {
                failure(&mut out, fleet, job, attempt, f, next());
            }
        }
    }
    noise(&mut out, fleet, &mut next);
    out.records
}

fn startup(out: &mut Out, fleet: &Fleet, job: &JobRun, a: &Attempt, salt: u64) {
    let id = Some(job.plan_id.as_str());
    let comm = 0x5500_0000 + (salt & 0xff_ffff);
    let comm_id = salt | 1;
    let head = &fleet.hosts[a.hosts[0]];
    let pid = 20_000 + (salt % 30_000);
    out.push(
        a.start - 1500,
        head,
        id,
        Some(0),
        &format!(
            "{head}:{pid}:{} [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
            pid + 100
        ),
    );
    for (i, &h) in a.hosts.iter().enumerate() {
        let host = &fleet.hosts[h];
        let rank = (i * 8) as u32;
        out.push(
            a.start + i as Ms,
            host,
            id,
            Some(rank),
            &format!(
                "{host}:{pid}:{} [0] NCCL INFO comm 0x{comm:x} rank {rank} nranks {} cudaDev 0 nvmlDev 0 busId 18000 commId 0x{comm_id:016x} - Init COMPLETE",
                pid + 100,
                job.gpus
            ),
        );
    }
}

/// Progress and checkpoint lines of one attempt; returns the step count it reached.
fn training(out: &mut Out, fleet: &Fleet, job: &JobRun, a: &Attempt, step_base: u64) -> u64 {
    let id = Some(job.plan_id.as_str());
    let host = &fleet.hosts[a.hosts[0]];
    // One optimizer step every 4 s.
    let step_at = |t: Ms| step_base + ((t - a.first_progress).max(0) / 4000) as u64;
    for &t in &a.progress {
        let line = progress_line(job, t, step_at(t));
        out.push(t, host, id, Some(0), &line);
    }
    let mut last_saved = step_base;
    for &t in &a.checkpoints {
        let step = step_at(t);
        let line = checkpoint_line(job, t, step);
        out.push(t, host, id, Some(0), &line);
        last_saved = step;
    }
    last_saved
}

/// `YYYY-MM-DD HH:MM:SS` and the milliseconds, from the RFC 3339 form.
fn clock(t: Ms) -> (String, String) {
    let iso = format_ms(t);
    let date_time = iso.get(..19).unwrap_or_default().replace('T', " ");
    let millis = iso.get(20..23).unwrap_or("000").to_string();
    (date_time, millis)
}

fn progress_line(job: &JobRun, t: Ms, step: u64) -> String {
    let (dt, ms) = clock(t);
    let loss = 2.0 + 4.0 / (1.0 + step as f64 / 2000.0);
    match job.framework {
        Framework::Megatron => format!(
            " [{dt}] iteration {step:>8}/{:>8} | consumed samples: {:>12} | elapsed time per iteration (ms): 4012.5 | learning rate: 3.000000E-04 | global batch size:  1024 | lm loss: {loss:.6}E+00 | loss scale: 1.0 | grad norm: 0.512 | number of skipped iterations:   0 | number of nan iterations:   0 |",
            500_000,
            step * 1024
        ),
        Framework::DeepSpeed => format!(
            "[{dt},{ms}] [INFO] [logging.py:128:log_dist] [Rank 0] step={step}, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]"
        ),
        Framework::Lightning | Framework::NeMo => {
            let n = step % 10_000;
            let pct = n * 100 / 10_000;
            let bar = format!("{:<10}", "#".repeat((pct / 10) as usize));
            format!(
                "Epoch {}: {pct:>3}%|{bar}| {n}/10000 [10:02<14:25, 2.00it/s, v_num=0, train_loss={loss:.3}]",
                step / 10_000
            )
        }
        Framework::HfTrainer => format!(
            "{{'loss': {loss:.4}, 'grad_norm': 0.5123, 'learning_rate': 2e-05, 'epoch': {:.2}}}",
            step as f64 / 10_000.0
        ),
        Framework::Torchtitan => format!(
            "[titan] {dt},{ms} - root - INFO - step: {step}  loss: {loss:7.4}  grad_norm:  0.5123  memory: 62.10GiB(78.44%)  tps: 3,912  tflops: 402.11  mfu: 40.66%"
        ),
    }
}

fn checkpoint_line(job: &JobRun, t: Ms, step: u64) -> String {
    let (dt, ms) = clock(t);
    let id = &job.plan_id;
    match job.framework {
        Framework::Megatron => format!(
            "  successfully saved checkpoint from iteration {step:>7} to /ckpt/{id} [ t 1/8, p 1/4 ]"
        ),
        Framework::DeepSpeed => format!(
            "[{dt},{ms}] [INFO] [torch_checkpoint_engine.py:33:commit] [Torch] Checkpoint global_step{step} is ready now!"
        ),
        Framework::Lightning => format!(
            "Epoch {e}, global step {step}: 'val_loss' reached 1.23456 (best 1.23456), saving model to '/ckpt/{id}/epoch={e}-step={step}.ckpt' as top 3",
            e = step / 10_000
        ),
        Framework::HfTrainer => format!(
            "[INFO|trainer.py:3984] {dt},{ms} >> Saving model checkpoint to /output/{id}/checkpoint-{step}"
        ),
        Framework::Torchtitan => format!(
            "[titan] {dt},{ms} - root - INFO - Finished saving the checkpoint (or staging if async is enabled)in 5.53 seconds."
        ),
        Framework::NeMo => format!(
            "[NeMo I {dt} model_checkpoint:657] Async checkpoint save for step {step} (/results/{id}/checkpoints/megatron_gpt--step={step}.ckpt) finalized successfully."
        ),
    }
}

/// The failure's own line(s), then the NCCL timeouts of a sample of the other ranks.
fn failure(out: &mut Out, fleet: &Fleet, job: &JobRun, a: &Attempt, f: &Failure, salt: u64) {
    let id = Some(job.plan_id.as_str());
    let culprit = &fleet.hosts[a.hosts[f.host_index]];
    let rank_host = |r: u32| &fleet.hosts[a.hosts[(r / 8) as usize % a.hosts.len()]];
    let r = f.rank;
    let g = f.gpu;
    let pid = 30_000 + salt % 20_000;
    let xid = |n: u32, text: &str| {
        format!(
            "NVRM: Xid (PCI:{}): {n}, pid={pid}, name=python, {text}",
            pci(g)
        )
    };
    match f.cause {
        Cause::FaultyGpu | Cause::GpuThermal => {
            out.push(f.at, culprit, None, None, &xid(79, "GPU has fallen off the bus."));
        }
        Cause::GpuHbm3 => out.push(
            f.at,
            culprit,
            None,
            None,
            &xid(48, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 2, subpartition 0."),
        ),
        Cause::GpuSram => out.push(f.at, culprit, None, None, &xid(172, "Ch 00000008")),
        Cause::GpuSystemProcessor => out.push(
            f.at,
            culprit,
            None,
            None,
            &xid(119, "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4)."),
        ),
        Cause::Nic => out.push(
            f.at,
            culprit,
            id,
            Some(r),
            &format!("{culprit}:{pid}:{} [{g}] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_{g}:1 Got async event : port error", pid + 90),
        ),
        Cause::NetworkSwitchCable => out.push(
            f.at,
            culprit,
            id,
            Some(r),
            &format!(
                "{culprit}:{pid}:{} [{g}] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.2.{}.{}<{}> with error 12, opcode 0, len 0, vendor err 129 (Recv)",
                pid + 90,
                salt % 200,
                salt % 250 + 1,
                30_000 + salt % 20_000
            ),
        ),
        Cause::HostMaintenance | Cause::PowerSupply | Cause::ServerChassis | Cause::Io => {
            let head = &fleet.hosts[a.hosts[0]];
            out.push(f.at, head, id, None, &format!("srun: error: Node failure on {culprit}"));
        }
        Cause::NcclWatchdog => {}
        Cause::Other => {
            let host = rank_host(r);
            out.push(f.at, host, id, Some(r), &format!("[rank{r}]: ckptfs: lease renewal for /scratch/{} failed (code 121)", job.plan_id));
            let head = &fleet.hosts[a.hosts[0]];
            out.push(f.at, head, id, None, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ");
            requeue(out, fleet, job, a, f);
            return;
        }
        Cause::SoftwareBug | Cause::Dependency | Cause::SilentDataCorruption | Cause::Ssd => {
            let host = rank_host(r);
            out.push(f.at, host, id, Some(r), &format!("[rank{r}]: Traceback (most recent call last):"));
            out.push(f.at, host, id, Some(r), &exception_line(f, r, g, host, salt));
        }
    }
    cascade(out, fleet, job, a, f, salt);
    requeue(out, fleet, job, a, f);
}

/// Slurm's requeue of the job once its ranks have timed out (a restart marker).
fn requeue(out: &mut Out, fleet: &Fleet, job: &JobRun, a: &Attempt, f: &Failure) {
    let head = &fleet.hosts[a.hosts[0]];
    let t = f.at + NCCL_TIMEOUT + 60_000;
    let number: u32 = job
        .plan_id
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let at = format_ms(t);
    out.push(
        t,
        head,
        Some(job.plan_id.as_str()),
        None,
        &format!(
            "slurmstepd: error: *** JOB {} ON {head} CANCELLED AT {} DUE TO JOB REQUEUE ***",
            700_000 + number,
            at.get(..19).unwrap_or_default()
        ),
    );
}

fn exception_line(f: &Failure, r: u32, g: usize, host: &str, salt: u64) -> String {
    match f.code {
        "CUDA_OOM" => format!("[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU {g} has a total capacity of 79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use. Of the allocated memory 75.20 GiB is allocated by PyTorch, and 1.31 GiB is reserved by PyTorch but unallocated."),
        "PYTHON_KEY_ERROR" => format!("[rank{r}]: KeyError: 'attention_mask'"),
        "CUDA_ILLEGAL_ADDRESS" => format!("[rank{r}]: RuntimeError: CUDA error: an illegal memory access was encountered"),
        "PYTHON_IMPORT_ERROR" => format!("[rank{r}]: ModuleNotFoundError: No module named 'flash_attn'"),
        "MEGATRON_NAN_GRAD_NORM" => format!("[rank{r}]: RuntimeError: Rank {r}, node {host}, device {g}, iteration {}: Unexpected result nan (message='found NaN in local grad norm for bucket #0 in backward pass before data-parallel communication collective')", 1000 + salt % 90_000),
        _ => format!("[rank{r}]: OSError: [Errno 5] Input/output error: '/local_nvme/cache/shard-{:05}.bin'", salt % 100_000),
    }
}

/// NCCL watchdog timeouts from a bounded sample of the other ranks, each printed when its
/// collective has waited the timeout since the failure (so it dates back to the failure).
fn cascade(out: &mut Out, fleet: &Fleet, job: &JobRun, a: &Attempt, f: &Failure, salt: u64) {
    let id = Some(job.plan_id.as_str());
    let own_host = f.cause.host_fault();
    let want = (4 + (salt % 12) as usize).min(MAX_CASCADE);
    let mut ranks = Vec::new();
    let mut r = (salt % u64::from(job.gpus)) as u32;
    let step = (job.gpus / want as u32).max(1) | 1;
    for _ in 0..job.gpus {
        let on_culprit = (r / 8) as usize == f.host_index;
        if r != f.rank && !(own_host && on_culprit) && !ranks.contains(&r) {
            ranks.push(r);
            if ranks.len() >= want {
                break;
            }
        }
        r = (r + step) % job.gpus;
    }
    let seq = 4000 + salt % 100_000;
    for (i, &r) in ranks.iter().enumerate() {
        let elapsed = NCCL_TIMEOUT + ((salt >> 8) % 2000) as Ms + i as Ms * 37;
        let t = f.at + elapsed;
        let host = &fleet.hosts[a.hosts[(r / 8) as usize % a.hosts.len()]];
        let iso = format_ms(t);
        let glog = format!(
            "{}{} {}",
            iso.get(5..7).unwrap_or("01"),
            iso.get(8..10).unwrap_or("01"),
            iso.get(11..23).unwrap_or("00:00:00.000")
        );
        out.push(
            t,
            host,
            id,
            Some(r),
            &format!(
                "[rank{r}]:[E{glog} ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for {elapsed} milliseconds before timing out."
            ),
        );
    }
}

/// Healthy lines that match nothing: kernel chatter on random hosts, a few per hour.
fn noise(out: &mut Out, fleet: &Fleet, next: &mut impl FnMut() -> u64) {
    let Some(first) = fleet
        .jobs
        .iter()
        .filter_map(|j| j.attempts.first())
        .map(|a| a.start)
        .min()
    else {
        return;
    };
    let last = fleet
        .jobs
        .iter()
        .filter_map(|j| j.attempts.last())
        .map(|a| a.end)
        .max()
        .unwrap_or(first);
    let mut t = first;
    while t < last {
        let h = (next() % fleet.hosts.len() as u64) as usize;
        let host = &fleet.hosts[h];
        let line = match next() % 3 {
            0 => "nvidia-nvswitch0: open (major=508)".to_string(),
            1 => format!("mlx5_core 0000:{}:00.0: mlx5_pcie_event:301:(pid 0): PCIe slot advertised sufficient power (27W).", BUSES[h % 8]),
            _ => "systemd[1]: Started Session 42 of user slurm.".to_string(),
        };
        out.push(t, host, None, None, &line);
        t += 10 * 60_000 + (next() % 600_000) as Ms;
    }
}
