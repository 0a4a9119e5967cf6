#!/usr/bin/env python3
"""Capture real failure messages of PyTorch / NCCL / CUDA on a real GPU.

Used to produce the verified fixture logs in tests/fixtures/captured/ for
faultline's knowledge base.  Every scenario is a small Python program that is
run in its own subprocess (own session, hard timeout, killed as a process
group), with stdout and stderr merged into one log file per scenario.

Usage (on a machine with one CUDA GPU and torch + triton + cupy):

    OUT=/some/dir python3 tools/capture/capture.py

Writes $OUT/captures.tar.gz (one <scenario>.log per scenario) and
$OUT/summary.txt.  Total runtime is bounded by CAP_BUDGET_S (default 330 s).

Two-rank scenarios started as two separate processes write rank 0's output
first, then a line '##### faultline-capture: output of rank 1 follows #####'
and rank 1's output.  Same-GPU NCCL runs give each rank its own NCCL_HOSTID
(host0/host1) so NCCL treats them as different hosts and uses sockets.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

T0 = time.time()
BUDGET = float(os.environ.get("CAP_BUDGET_S", "300"))  # no new scenario after this
HARD_STOP = BUDGET + 45  # everything still running is killed at this point
OUT = os.environ.get("OUT") or os.path.abspath("_capture_out")
WORK = tempfile.mkdtemp(prefix="faultline_cap_")
LOGDIR = os.path.join(WORK, "captures")
SCRDIR = os.path.join(WORK, "scripts")
RANKDIR = os.path.join(WORK, "ranks")
for d in (LOGDIR, SCRDIR, RANKDIR, OUT):
    os.makedirs(d, exist_ok=True)
PY = sys.executable or "python3"

# ---------------------------------------------------------------------------
# scenario programs
# ---------------------------------------------------------------------------
S = {}

S["nccl_worker.py"] = r'''
import datetime
import os
import sys
import time


def run_mode(mode):
    rank = int(os.environ["RANK"])
    if os.environ.get("CAP_HOSTID_TRICK", "1") == "1":
        os.environ["NCCL_HOSTID"] = "host%d" % rank
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    tmo = float(os.environ.get("CAP_PG_TIMEOUT", "5"))
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=tmo))
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print(f"rank {rank}: warm-up all_reduce ok ({t[0].item():.0f})", flush=True)

    if mode in ("timeout_allreduce", "timeout_broadcast", "timeout_allgather"):
        if rank == 1:
            time.sleep(float(os.environ.get("CAP_RANK1_SLEEP", "25")))
            print("rank 1: woke up, exiting", flush=True)
            os._exit(0)
        x = torch.ones(1 << 20, device="cuda")
        if mode == "timeout_allreduce":
            dist.all_reduce(x)
        elif mode == "timeout_broadcast":
            dist.broadcast(x, src=1)
        else:
            out = torch.empty(2 * x.numel(), device="cuda")
            dist.all_gather_into_tensor(out, x)
        torch.cuda.synchronize()
        print("rank 0: collective returned, sleeping", flush=True)
        time.sleep(120)
    elif mode == "remote_exit":
        if rank == 1:
            print("rank 1: exiting abruptly with os._exit(1)", flush=True)
            os._exit(1)
        time.sleep(2)
        x = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        print("rank 0: all_reduce returned, sleeping", flush=True)
        time.sleep(120)
    elif mode == "raise":
        if rank == 1:
            torch.load("/checkpoints/run42/step_001000.pt", map_location="cpu")
        time.sleep(120)
    elif mode == "healthy":
        for _ in range(3):
            dist.all_reduce(t)
        dist.barrier()
        torch.cuda.synchronize()
        print(f"rank {rank}: healthy run done ({t[0].item():.0f})", flush=True)
        dist.destroy_process_group()
    elif mode == "dup_gpu":
        pass


if __name__ == "__main__":
    if os.environ.get("CAP_RECORD") == "1":
        from torch.distributed.elastic.multiprocessing.errors import record

        record(run_mode)(sys.argv[1])
    else:
        run_mode(sys.argv[1])
'''

S["spawn_nccl.py"] = r'''
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch.multiprocessing as mp

import nccl_worker


def worker(rank, mode):
    os.environ["RANK"] = str(rank)
    os.environ["LOCAL_RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = "2"
    nccl_worker.run_mode(mode)


if __name__ == "__main__":
    mp.spawn(worker, args=(sys.argv[1],), nprocs=2, join=True)
'''

S["gloo_worker.py"] = r'''
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

mode = sys.argv[1]
rank = int(os.environ["RANK"])
tmo = float(os.environ.get("CAP_PG_TIMEOUT", "5"))
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=tmo))
t = torch.ones(1 << 16)
dist.all_reduce(t)
print(f"rank {rank}: warm-up all_reduce ok ({t[0].item():.0f})", flush=True)
if mode == "peer_exit":
    if rank == 1:
        print("rank 1: exiting abruptly with os._exit(1)", flush=True)
        os._exit(1)
    time.sleep(1)
    dist.all_reduce(t)
elif mode == "timeout":
    if rank == 1:
        time.sleep(30)
        os._exit(0)
    dist.all_reduce(t)
print(f"rank {rank}: second all_reduce returned", flush=True)
'''

S["store.py"] = r'''
import datetime
import sys

import torch.distributed as dist

mode, port = sys.argv[1], int(sys.argv[2])
T = datetime.timedelta(seconds=5)
if mode == "client_no_master":
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            world_size=2, rank=1, timeout=T)
elif mode == "master_no_worker":
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            world_size=2, rank=0, timeout=T)
elif mode == "wait_for_workers":
    store = dist.TCPStore("127.0.0.1", port, world_size=2, is_master=True,
                          timeout=T, wait_for_workers=True)
elif mode == "get_missing":
    store = dist.TCPStore("127.0.0.1", port, world_size=1, is_master=True,
                          timeout=datetime.timedelta(seconds=3))
    store.set("present", "x")
    store.get("missing")
print("store scenario finished without error", flush=True)
'''

S["oom.py"] = r'''
import sys

import torch

GiB = 1 << 30
mode = sys.argv[1]
torch.cuda.init()
if mode == "uncaught":
    x = torch.empty(200 * GiB * 2, dtype=torch.uint8, device="cuda")
else:
    try:
        x = torch.empty(200 * GiB * 2, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as e:
        print("caught torch.OutOfMemoryError:", flush=True)
        print(str(e), flush=True)
    held = torch.empty(20 * GiB, dtype=torch.uint8, device="cuda")
    try:
        y = torch.empty(130 * GiB, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as e:
        print("caught torch.OutOfMemoryError with 20 GiB held:", flush=True)
        print(str(e), flush=True)
    del held
    try:
        w = torch.randn(200000, 200000, device="cuda")
    except RuntimeError as e:
        print(f"caught {type(e).__module__}.{type(e).__name__} from torch.randn:", flush=True)
        print(str(e), flush=True)
'''

S["device_assert.py"] = r'''
import sys

import torch
import torch.nn.functional as F

mode = sys.argv[1]
if mode == "index":
    x = torch.tensor([0, 1], device="cuda")
    idx = torch.tensor([5], device="cuda")
    y = x[idx]
    print("indexing kernel launched", flush=True)
    print(y.sum().item())
elif mode == "nll":
    logits = torch.randn(4, 10, device="cuda")
    target = torch.tensor([1, 2, 3, 10], device="cuda")
    loss = F.cross_entropy(logits, target)
    print(loss.item())
elif mode == "embedding":
    emb = torch.nn.Embedding(100, 16).cuda()
    tokens = torch.tensor([[1, 2, 150]], device="cuda")
    out = emb(tokens)
    print(out.sum().item())
'''

S["ima_triton.py"] = r'''
import torch
import triton
import triton.language as tl


@triton.jit
def bad_store_kernel(out_ptr, offset, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offset + offs, tl.full((BLOCK,), 1.0, tl.float32))


out = torch.zeros(16, device="cuda")
bad_store_kernel[(1,)](out, 1 << 40, BLOCK=16)
print("triton kernel launched", flush=True)
try:
    torch.cuda.synchronize()
except Exception as e:
    print(f"first error: {type(e).__module__}.{type(e).__name__}: {e}", flush=True)
print("next CUDA call after the error:", flush=True)
z = torch.zeros(4, device="cuda") + 1
print(z.sum().item())
'''

S["ima_cupy.py"] = r'''
import cupy as cp

k = cp.RawKernel(r"""
extern "C" __global__ void bad_store(int* p) {
    *(int*)((char*)p + (1ULL << 40)) = 1;
}
""", "bad_store")
buf = cp.zeros(16, dtype=cp.int32)
k((1,), (1,), (buf,))
print("cupy kernel launched", flush=True)
cp.cuda.Device().synchronize()
'''

S["misaligned_cupy_torch.py"] = r'''
import cupy as cp
import torch

buf = torch.zeros(16, dtype=torch.int32, device="cuda")
torch.cuda.synchronize()
k = cp.RawKernel(r"""
extern "C" __global__ void misaligned_store(char* p) {
    *(int*)(p + 1) = 42;
}
""", "misaligned_store")
k((1,), (1,), (cp.asarray(buf),))
print("misaligned kernel launched", flush=True)
torch.cuda.synchronize()
print(buf.sum().item())
'''

S["dataloader_kill.py"] = r'''
import os
import signal
import sys

import torch
from torch.utils.data import DataLoader, Dataset

SIG = getattr(signal, sys.argv[1])


class PoisonDataset(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        if i == 37:
            os.kill(os.getpid(), SIG)
        return torch.full((8,), float(i))


def main():
    loader = DataLoader(PoisonDataset(), batch_size=4, num_workers=2)
    for step, batch in enumerate(loader):
        pass
    print("epoch finished", flush=True)


if __name__ == "__main__":
    main()
'''

# --- plain Python / torch tracebacks ---------------------------------------
S["py_modulenotfound.py"] = r'''
import os
import sys

from apex.optimizers import FusedAdam
'''
S["py_importerror.py"] = r'''
import torch
from torch.utils.data import DistributedLoader
'''
S["py_filenotfound.py"] = r'''
import torch


def load_checkpoint(path):
    return torch.load(path, map_location="cpu")


def main():
    state = load_checkpoint("/checkpoints/run42/step_001000.pt")


main()
'''
S["py_keyerror.py"] = r'''
import torch


def restore(model, state):
    model.weight.data.copy_(state["model"]["encoder.layer.0.weight"])


model = torch.nn.Linear(4, 4)
state = {"model": {"encoder.layer.0.bias": torch.zeros(4)}}
restore(model, state)
'''
S["py_state_dict_mismatch.py"] = r'''
import torch

model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
state = {"module.0.weight": torch.zeros(8, 4), "0.bias": torch.zeros(8),
         "1.weight": torch.zeros(3, 8), "1.bias": torch.zeros(2)}
model.load_state_dict(state)
'''
S["py_attributeerror.py"] = r'''
import torch

model = torch.nn.Linear(4, 4)
torch.save(model.module.state_dict(), "/tmp/ckpt.pt")
'''
S["py_typeerror.py"] = r'''
import torch
import torch.nn.functional as F

logits = torch.randn(4, 10)
loss = F.cross_entropy(logits)
'''
S["py_valueerror.py"] = r'''
import torch
import torch.nn.functional as F


def train_step(logits, labels):
    return F.cross_entropy(logits, labels)


loss = train_step(torch.randn(4, 10), torch.tensor([1, 2, 3]))
'''
S["py_assertionerror.py"] = r'''
def shard_batch(global_batch, world_size):
    assert global_batch % world_size == 0, f"global batch size {global_batch} is not divisible by world size {world_size}"
    return global_batch // world_size


per_rank = shard_batch(30, 4)
'''
S["py_nameerror.py"] = r'''
optimizer = object()
for step in range(3):
    optimzer.zero_grad()
'''
S["py_indexerror.py"] = r'''
def first_batch(batches):
    return batches[0]


batch = first_batch([])
'''
S["py_chained_context.py"] = r'''
import json


def read_config(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise RuntimeError(f"could not read training config {path}")


cfg = read_config("/configs/train.json")
'''
S["py_chained_cause.py"] = r'''
def parse_lr(text):
    try:
        return float(text)
    except ValueError as e:
        raise ValueError(f"invalid learning rate in config: {text!r}") from e


lr = parse_lr("3e-4x")
'''
S["torch_view_error.py"] = r'''
import torch

x = torch.ones(2)
y = x.view(3)
'''
S["torch_matmul_shape.py"] = r'''
import torch

layer = torch.nn.Linear(3, 5)
out = layer(torch.randn(4, 4))
'''
S["torch_bad_op.py"] = r'''
import torch

torch.ops.aten.no_such_op(torch.ones(2))
'''

S["env_info.sh"] = r'''
echo "### python3 -c 'import torch;print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())'"
python3 -c 'import torch;print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())' 2>&1
python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0]); print("triton", triton.__version__); print("device", torch.cuda.get_device_name(0)); print("capability", torch.cuda.get_device_capability(0))' 2>&1
python3 -c 'import cupy; print("cupy", cupy.__version__)' 2>&1
echo "### nvidia-smi"
nvidia-smi 2>&1
echo "### nvidia-smi -q | head -80"
nvidia-smi -q 2>&1 | head -80
echo "### dmesg | grep -i -E 'xid|nvrm' | tail -20"
dmesg 2>&1 | grep -i -E 'xid|nvrm|denied|not permitted' | tail -20
echo "### uname -a"
uname -a
echo "### date -u"
date -u
'''

# ---------------------------------------------------------------------------
# runner
# ---------------------------------------------------------------------------
LOCK = threading.Lock()
RESULTS = []
ACTIVE = set()


def elapsed():
    return time.time() - T0


def base_env(extra=None):
    env = dict(os.environ)
    for k in ("CUDA_LAUNCH_BLOCKING", "NCCL_HOSTID", "TORCH_SHOW_CPP_STACKTRACES"):
        env.pop(k, None)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def nccl_env(port, extra=None):
    e = {
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "lo",
        "TORCH_CPP_LOG_LEVEL": "INFO",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": port,
        "WORLD_SIZE": 2,
    }
    e.update(extra or {})
    return e


def _popen(argv, env, logf):
    p = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, cwd=SCRDIR, env=env,
                         start_new_session=True)
    with LOCK:
        ACTIVE.add(p)
    return p


def _kill(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        pass
    with LOCK:
        ACTIVE.discard(p)


def _budget_timeout(t):
    return max(3.0, min(t, HARD_STOP - 5 - elapsed()))


def record(name, **kw):
    kw["name"] = name
    with LOCK:
        RESULTS.append(kw)
    print(f"[{elapsed():6.1f}s] {name}: " +
          ", ".join(f"{k}={v}" for k, v in kw.items() if k != "name"), flush=True)


def run_one(name, argv, env_extra=None, timeout=40):
    if elapsed() > BUDGET:
        record(name, status="skipped (budget)")
        return
    t = _budget_timeout(timeout)
    path = os.path.join(LOGDIR, name + ".log")
    start = time.time()
    with open(path, "wb") as f:
        p = _popen(argv, base_env(env_extra), f)
        timed_out = False
        try:
            p.wait(t)
        except subprocess.TimeoutExpired:
            timed_out = True
        _kill(p)  # also reaps leftover children in the process group
    record(name, rc=p.returncode, timed_out=timed_out, secs=round(time.time() - start, 1),
           bytes=os.path.getsize(path))


def run_two(name, argv, env_extra, timeout=50, primary=0, grace=4):
    """Two ranks as two processes; wait for `primary`, then give the other `grace` s."""
    if elapsed() > BUDGET:
        record(name, status="skipped (budget)")
        return
    t = _budget_timeout(timeout)
    start = time.time()
    procs, files, paths = [], [], []
    for r in (0, 1):
        pth = os.path.join(RANKDIR, f"{name}.rank{r}.txt")
        f = open(pth, "wb")
        extra = dict(env_extra)
        extra.update(RANK=r, LOCAL_RANK=r)
        procs.append(_popen(argv, base_env(extra), f))
        files.append(f)
        paths.append(pth)
    timed_out = False
    try:
        procs[primary].wait(t)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill(procs[primary])
    killed_other = []
    for r, p in enumerate(procs):
        if r == primary:
            continue
        try:
            p.wait(max(0.5, min(grace, HARD_STOP - 5 - elapsed())))
        except subprocess.TimeoutExpired:
            killed_other.append(r)
    rcs = []
    for p in procs:
        _kill(p)
        rcs.append(p.returncode)
    for f in files:
        f.close()
    path = os.path.join(LOGDIR, name + ".log")
    with open(path, "wb") as out:
        for r, pth in enumerate(paths):
            if r:
                out.write(f"##### faultline-capture: output of rank {r} follows #####\n".encode())
            with open(pth, "rb") as f:
                out.write(f.read())
    record(name, rcs=rcs, timed_out=timed_out, killed_after_primary=killed_other,
           secs=round(time.time() - start, 1), bytes=os.path.getsize(path))


def script(n):
    return os.path.join(SCRDIR, n)


TORCHRUN = [PY, "-m", "torch.distributed.run"]


def lane_nccl_a():
    run_one("nccl_watchdog_timeout_allreduce_spawn",
            [PY, script("spawn_nccl.py"), "timeout_allreduce"],
            nccl_env(29510, {"TORCH_NCCL_ASYNC_ERROR_HANDLING": 1,
                             "TORCH_NCCL_TRACE_BUFFER_SIZE": 2000,
                             "CAP_PG_TIMEOUT": 5, "CAP_RANK1_SLEEP": 25}), timeout=55)
    run_two("nccl_remote_exit", [PY, script("nccl_worker.py"), "remote_exit"],
            nccl_env(29520, {"CAP_PG_TIMEOUT": 30}), timeout=55, primary=0)
    run_two("nccl_healthy_2rank", [PY, script("nccl_worker.py"), "healthy"],
            nccl_env(29530, {"CAP_PG_TIMEOUT": 60}), timeout=45, primary=0, grace=15)
    hp = os.path.join(LOGDIR, "nccl_healthy_2rank.log")
    healthy_ok = True
    if os.path.exists(hp):
        with open(hp, errors="replace") as f:
            healthy_ok = f.read().count("healthy run done") == 2
    if not healthy_ok:  # diagnostic: does NCCL work here with the fancier transports off?
        run_two("nccl_healthy_2rank_safe_env", [PY, script("nccl_worker.py"), "healthy"],
                nccl_env(29535, {"CAP_PG_TIMEOUT": 60, "NCCL_CUMEM_ENABLE": 0,
                                 "NCCL_NVLS_ENABLE": 0, "NCCL_SHM_DISABLE": 1,
                                 "NCCL_P2P_DISABLE": 1}),
                timeout=45, primary=0, grace=15)
    run_two("nccl_watchdog_timeout_allgather_blocking_wait",
            [PY, script("nccl_worker.py"), "timeout_allgather"],
            nccl_env(29540, {"TORCH_NCCL_BLOCKING_WAIT": 1, "CAP_PG_TIMEOUT": 5,
                             "CAP_RANK1_SLEEP": 25}), timeout=50, primary=0)
    run_one("torchrun_python_exception_record",
            TORCHRUN + ["--nproc_per_node=2", "--master_addr=127.0.0.1",
                        "--master_port=29550", "--role", "trainer", "--tee", "3",
                        script("nccl_worker.py"), "raise"],
            nccl_env(29550, {"CAP_PG_TIMEOUT": 60, "CAP_RECORD": 1}), timeout=50)


def lane_nccl_b():
    run_one("torchrun_nccl_watchdog_timeout",
            TORCHRUN + ["--nproc_per_node=2", "--master_addr=127.0.0.1",
                        "--master_port=29610", script("nccl_worker.py"), "timeout_allreduce"],
            nccl_env(29610, {"CAP_PG_TIMEOUT": 5, "CAP_RANK1_SLEEP": 25}), timeout=60)
    run_two("nccl_duplicate_gpu", [PY, script("nccl_worker.py"), "dup_gpu"],
            nccl_env(29620, {"CAP_HOSTID_TRICK": 0, "CAP_PG_TIMEOUT": 20}),
            timeout=40, primary=0, grace=10)
    run_two("nccl_watchdog_timeout_broadcast",
            [PY, script("nccl_worker.py"), "timeout_broadcast"],
            nccl_env(29630, {"TORCH_NCCL_ASYNC_ERROR_HANDLING": 1,
                             "TORCH_NCCL_DUMP_ON_TIMEOUT": 0,
                             "CAP_PG_TIMEOUT": 5, "CAP_RANK1_SLEEP": 25}),
            timeout=50, primary=0)
    run_one("torchrun_nccl_healthy",
            TORCHRUN + ["--nproc_per_node=2", "--master_addr=127.0.0.1",
                        "--master_port=29640", script("nccl_worker.py"), "healthy"],
            nccl_env(29640, {"CAP_PG_TIMEOUT": 60}), timeout=45)


def lane_gpu_single():
    run_one("cuda_oom_uncaught", [PY, script("oom.py"), "uncaught"], timeout=40)
    run_one("cuda_oom_caught", [PY, script("oom.py"), "caught"], timeout=40)
    run_one("cuda_device_assert_index", [PY, script("device_assert.py"), "index"], timeout=40)
    run_one("cuda_device_assert_index_launch_blocking",
            [PY, script("device_assert.py"), "index"], {"CUDA_LAUNCH_BLOCKING": 1}, timeout=40)
    run_one("cuda_device_assert_nll_loss", [PY, script("device_assert.py"), "nll"], timeout=40)
    run_one("cuda_device_assert_embedding", [PY, script("device_assert.py"), "embedding"],
            timeout=40)
    run_one("cuda_illegal_memory_access_triton", [PY, script("ima_triton.py")], timeout=60)
    run_one("cuda_misaligned_address_cupy_torch", [PY, script("misaligned_cupy_torch.py")],
            timeout=50)
    run_one("cuda_illegal_memory_access_cupy", [PY, script("ima_cupy.py")], timeout=50)


def lane_cpu_dist():
    d = {"TORCH_CPP_LOG_LEVEL": "INFO"}
    run_one("dataloader_worker_sigkill", [PY, script("dataloader_kill.py"), "SIGKILL"], timeout=40)
    run_one("dataloader_worker_sigsegv", [PY, script("dataloader_kill.py"), "SIGSEGV"], timeout=40)
    run_one("dataloader_worker_sigbus", [PY, script("dataloader_kill.py"), "SIGBUS"], timeout=40)
    run_one("tcpstore_client_connect_timeout",
            [PY, script("store.py"), "client_no_master", "29710"], d, timeout=40)
    run_one("tcpstore_master_worker_never_joins",
            [PY, script("store.py"), "master_no_worker", "29720"], d, timeout=40)
    run_one("tcpstore_wait_for_workers_timeout",
            [PY, script("store.py"), "wait_for_workers", "29730"], d, timeout=40)
    run_one("tcpstore_get_missing_key_timeout",
            [PY, script("store.py"), "get_missing", "29740"], d, timeout=30)
    run_two("gloo_peer_exit", [PY, script("gloo_worker.py"), "peer_exit"],
            dict(d, MASTER_ADDR="127.0.0.1", MASTER_PORT=29750, WORLD_SIZE=2,
                 CAP_PG_TIMEOUT=20), timeout=40, primary=0)
    run_two("gloo_collective_timeout", [PY, script("gloo_worker.py"), "timeout"],
            dict(d, MASTER_ADDR="127.0.0.1", MASTER_PORT=29760, WORLD_SIZE=2,
                 CAP_PG_TIMEOUT=5), timeout=40, primary=0)
    run_one("torchrun_rendezvous_join_timeout",
            TORCHRUN + ["--nnodes=2", "--nproc_per_node=1", "--rdzv-backend=c10d",
                        "--rdzv-endpoint=127.0.0.1:29770", "--rdzv-conf", "join_timeout=10",
                        script("nccl_worker.py"), "healthy"],
            nccl_env(29770), timeout=45)


def lane_tracebacks():
    run_one("env_versions_nvidia_smi", ["bash", script("env_info.sh")], timeout=60)
    for n in ("py_modulenotfound", "py_importerror", "py_filenotfound", "py_keyerror",
              "py_state_dict_mismatch", "py_attributeerror", "py_typeerror",
              "py_valueerror", "py_assertionerror", "py_nameerror", "py_indexerror",
              "py_chained_context", "py_chained_cause", "torch_view_error",
              "torch_matmul_shape", "torch_bad_op"):
        run_one(n, [PY, script(n + ".py")], timeout=30)
    run_one("torch_view_error_cpp_stacktrace", [PY, script("torch_view_error.py")],
            {"TORCH_SHOW_CPP_STACKTRACES": 1}, timeout=30)


# Second pass (CAP_MODE=long): the NCCL timeout scenarios again, each in its own
# lane and with a long timeout, because on the capture machine ProcessGroupNCCL
# took about 60 s after "Watchdog caught collective operation timeout" before it
# took the process down, which the first pass's 50-60 s limits cut off.
LONG = float(os.environ.get("CAP_LONG_TIMEOUT", "170"))


def long_spawn_allreduce():
    run_one("nccl_watchdog_timeout_allreduce_spawn",
            [PY, script("spawn_nccl.py"), "timeout_allreduce"],
            nccl_env(29810, {"TORCH_NCCL_ASYNC_ERROR_HANDLING": 1,
                             "TORCH_NCCL_TRACE_BUFFER_SIZE": 2000,
                             "CAP_PG_TIMEOUT": 5, "CAP_RANK1_SLEEP": 25}), timeout=LONG)


def long_torchrun_watchdog():
    run_one("torchrun_nccl_watchdog_timeout",
            TORCHRUN + ["--nproc_per_node=2", "--master_addr=127.0.0.1",
                        "--master_port=29820", script("nccl_worker.py"), "timeout_allreduce"],
            nccl_env(29820, {"CAP_PG_TIMEOUT": 5, "CAP_RANK1_SLEEP": 25}), timeout=LONG)


def long_torchrun_watchdog_default_env():
    # what a user sees with no debug variables set at all
    run_one("torchrun_nccl_watchdog_timeout_default_env",
            TORCHRUN + ["--nproc_per_node=2", "--master_addr=127.0.0.1",
                        "--master_port=29830", script("nccl_worker.py"), "timeout_allreduce"],
            {"NCCL_IB_DISABLE": 1, "NCCL_SOCKET_IFNAME": "lo",
             "CAP_PG_TIMEOUT": 5, "CAP_RANK1_SLEEP": 25}, timeout=LONG)


def long_remote_exit():
    run_two("nccl_remote_exit", [PY, script("nccl_worker.py"), "remote_exit"],
            nccl_env(29840, {"CAP_PG_TIMEOUT": 30}), timeout=LONG, primary=0)


def long_broadcast():
    run_two("nccl_watchdog_timeout_broadcast",
            [PY, script("nccl_worker.py"), "timeout_broadcast"],
            nccl_env(29850, {"TORCH_NCCL_ASYNC_ERROR_HANDLING": 1,
                             "TORCH_NCCL_DUMP_ON_TIMEOUT": 0,
                             "CAP_PG_TIMEOUT": 5, "CAP_RANK1_SLEEP": 25}),
            timeout=LONG, primary=0)


def long_allgather_blocking():
    run_two("nccl_watchdog_timeout_allgather_blocking_wait",
            [PY, script("nccl_worker.py"), "timeout_allgather"],
            nccl_env(29860, {"TORCH_NCCL_BLOCKING_WAIT": 1, "CAP_PG_TIMEOUT": 5,
                             "CAP_RANK1_SLEEP": 25}), timeout=LONG, primary=0)


def main():
    for n, src in S.items():
        with open(os.path.join(SCRDIR, n), "w") as f:
            f.write(src.lstrip("\n"))
    if os.environ.get("CAP_MODE") == "long":
        lanes = [long_spawn_allreduce, long_torchrun_watchdog, long_torchrun_watchdog_default_env,
                 long_remote_exit, long_broadcast, long_allgather_blocking]
    else:
        lanes = [lane_nccl_a, lane_nccl_b, lane_gpu_single, lane_cpu_dist, lane_tracebacks]
    threads = [threading.Thread(target=fn, name=fn.__name__, daemon=True) for fn in lanes]
    for th in threads:
        th.start()
    for th in threads:
        th.join(max(0.1, HARD_STOP - elapsed()))
    with LOCK:
        leftovers = list(ACTIVE)
    for p in leftovers:
        _kill(p)
    stuck = [th.name for th in threads if th.is_alive()]
    time.sleep(1 if stuck else 0)

    tar_path = os.path.join(OUT, "captures.tar.gz")
    with tarfile.open(tar_path, "w:gz") as tf:
        tf.add(LOGDIR, arcname="captures")
        tf.add(SCRDIR, arcname="scripts")
    with open(os.path.join(OUT, "summary.txt"), "w") as f:
        f.write(f"hostname={socket.gethostname()}\n")
        f.write(f"nodename={os.uname().nodename}\n")
        f.write(f"python={PY} {sys.version.split()[0]}\n")
        f.write(f"total_secs={elapsed():.1f} budget={BUDGET} stuck_lanes={stuck}\n")
        for r in sorted(RESULTS, key=lambda r: r["name"]):
            f.write(r["name"] + ": " + ", ".join(f"{k}={v}" for k, v in r.items()
                                                 if k != "name") + "\n")
    print(f"done in {elapsed():.1f}s; wrote {tar_path}", flush=True)
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
