#!/usr/bin/env python3
"""The soak run behind scripts/soak.sh (read its header first).

Two `faultline run` members in one group, with incidents, a webhook (a slow receiver) and
Alertmanager (a receiver that refuses everything), under a steady load and scheduled faults
(KB reloads, the broker down and up, a member SIGKILLed and restarted). Prints a report and
exits 1 when a check fails, 2 when the run itself could not be set up.

Standard library only; talks to the broker through kcat and to faultline over HTTP.
"""

import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

BIN = os.environ["SOAK_BIN"]
MINUTES = float(os.environ["SOAK_MINUTES"])
OUT = os.environ.get("SOAK_OUT", "soak-out")
PARTITIONS = int(os.environ.get("SOAK_PARTITIONS", "64"))
LOAD_FRACTION = float(os.environ.get("SOAK_LOAD_FRACTION", "0.5"))
RSS_TARGET = float(os.environ.get("SOAK_RSS_RATIO", "1.2"))
# How RSS is judged depends on the run's length. The 30-minute run's member grew to its working
# set for about 10 minutes (82 -> 131 MiB) and then stayed within 1.09; shorter runs end while it
# still climbs (1.08 to 1.34 over 2 minutes, docs/development.md), so a max/min ratio there
# measures the climb, not a leak. Runs of RSS_RATIO_MINUTES or more check the ratio; shorter ones
# check that the RSS after warm-up stays under RSS_MAX_MIB: less than the 2-minute run's input
# (about 1.94 million records of 174 bytes, 322 MiB), so a member that kept what it read crosses
# it, and 1.4x the highest seen (85 to 224 MiB in five runs). Both are strict.
RSS_RATIO_MINUTES = float(os.environ.get("SOAK_RSS_RATIO_MINUTES", "10"))
RSS_MAX_MIB = float(os.environ.get("SOAK_RSS_MAX_MIB", "320"))
RECOVERY_S = float(os.environ.get("SOAK_RECOVERY_S", "90"))
# How long the drain waits beyond RECOVERY_S for the KB reload a change started (its check).
RELOAD_CHECK_S = float(os.environ.get("SOAK_RELOAD_CHECK_S", "300"))
# Checks that are reported but do not fail the run (SOAK_REPORT_ONLY, comma-separated: "split",
# "rss"), for investigating one; CI sets none (.ci/run): every check fails the run.
REPORT_ONLY = {c for c in os.environ.get("SOAK_REPORT_ONLY", "").split(",") if c}
FAIL_EVERY_S = float(os.environ.get("SOAK_FAIL_EVERY_S", "2"))
SLOW_RECEIVER_S = float(os.environ.get("SOAK_SLOW_RECEIVER_S", "0.3"))
KB_SRC = os.environ.get("SOAK_KB", "kb")
# An incident resolves this long (log time) after its last line. The correlator's clock stops
# while a member is behind (an outage, a rebalance, a catch-up), so a short quiet period does
# not split a job's two lines into two incidents; it keeps the commits (which an open incident
# holds at its first record) close to the head. A resolved incident holds its records for late
# lines for one more quiet period (resolved_hold_ms), so the drain below sees them committed.
QUIET_MS = 10000
# The mock broker keeps at most 5 MiB a partition (librdkafka's mock cluster has no setting for
# it): the load must leave a member that re-reads from a held commit its records, or librdkafka
# jumps to the oldest record it still has and the records between are lost (a 10-minute run
# with 32 partitions lost 11 jobs that way; faultline now logs such a reset at ERROR and counts
# it in faultline_consumer_offset_resets_total). What a member may have to read again: the
# quiet period, an outage, and a recovery.
BROKER_PARTITION_BYTES = 5 << 20
# Bytes a record takes on the mock broker beyond its key and value (record headers, varints,
# and its share of a batch header).
RECORD_OVERHEAD = 24

# The schedule is for 30 minutes; shorter runs scale it, with floors (see soak.sh).
SCALE = MINUTES / 30.0
RELOAD_S = max(60 * SCALE, 30)
BROKER_S = max(300 * SCALE, 40)
KILL_S = max(180 * SCALE, 45)
BROKER_DOWN_S = min(max(BROKER_S / 10, 5), 30)
REREAD_WINDOW_S = QUIET_MS / 1000 + BROKER_DOWN_S + RECOVERY_S
# RSS is compared once every fault has happened once (a reload holds two KBs for a moment,
# a member takes over its peer's partitions) and the working set is built: a third of the run,
# or the first cycle of each. With 64 partitions the 30-minute run's RSS still grew until about
# 10 minutes (82 -> 131 MiB) and then stayed within 131-144 MiB for 20 minutes; a fifth (6
# minutes) measured that growth as 1.74.
WARMUP_S = max(MINUTES * 60 / 3, max(RELOAD_S, BROKER_S + BROKER_DOWN_S, KILL_S) + 15)

T0 = time.time()


def log(msg):
    print(f"soak [{time.time() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def die(msg):
    log(f"setup failed: {msg}")
    sys.exit(2)


# ---------------------------------------------------------------- receivers


class Receiver(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, status, delay):
        self.status, self.delay = status, delay
        self.lock = threading.Lock()
        self.fingerprints = set()
        self.requests = 0
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.server.delay:
            time.sleep(self.server.delay)  # the slow receiver's latency, not synchronisation
        with self.server.lock:
            self.server.requests += 1
            fp = self.headers.get("X-Faultline-Incident")
            if fp and self.server.status == 200:
                self.server.fingerprints.add(fp)
        del body
        self.send_response(self.server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


# ---------------------------------------------------------------- broker


class Broker:
    def __init__(self):
        self.proc = subprocess.Popen(
            [f"{BIN}/faultline-mock-broker", "--brokers", "1",
             "--group-initial-rebalance-delay-ms", "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("bootstrap="):
            die(f"mock broker said {line!r}")
        self.bootstrap = line.split("=", 1)[1]
        self.lock = threading.Lock()

    def command(self, cmd):
        with self.lock:
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline().strip()
        if reply != "ok":
            die(f"broker command {cmd!r}: {reply}")

    def end_offsets(self, topic):
        """The total of the partitions' end offsets: every record ever produced there."""
        out = subprocess.run(
            ["kcat", "-C", "-b", self.bootstrap, "-t", topic, "-o", "-1", "-e", "-q",
             "-f", "%p %o\n"], capture_output=True, text=True, timeout=120).stdout
        ends = {}
        for line in out.splitlines():
            p, o = line.split()
            ends[int(p)] = int(o) + 1
        return sum(ends.values())

    def read(self, topic, fmt):
        return subprocess.run(
            ["kcat", "-C", "-b", self.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
             "-f", fmt], capture_output=True, timeout=600).stdout


class Tap:
    """Notes where each failing job's records landed (partition and offset), read by a consumer
    group of its own through kcat, restarted if kcat gives up during an outage (its group keeps
    its place): when a record has no event, the members' logs say which of them read (or
    skipped) that offset."""

    def __init__(self, broker, topic, group):
        self.broker, self.topic, self.group = broker, topic, group
        self.where = {}  # job -> {(partition, offset)}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.proc = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            self.proc = subprocess.Popen(
                ["kcat", "-b", self.broker.bootstrap, "-G", self.group, "-o", "beginning",
                 "-q", "-f", "%p\t%o\t%k\n", self.topic],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            for line in self.proc.stdout:
                if "soak-fail-" not in line:
                    continue
                p, o, k = line.rstrip("\n").split("\t", 2)
                with self.lock:
                    self.where.setdefault(k, set()).add((int(p), int(o)))
            self.proc.wait()
            self.stop.wait(1)  # restarting kcat after an outage, not synchronisation

    def finish(self):
        self.stop.set()
        if self.proc is not None:
            self.proc.terminate()
        self.thread.join(timeout=30)


# ---------------------------------------------------------------- load


# Short, so that the mock broker's 5 MiB a partition holds the re-read window (below).
NOISE = "[I1130 09:12:{s:02d}.{ms:03d} train.py:212] step {n} loss {loss:.4f}"
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
       "total capacity of 79.15 GiB of which 1.06 GiB is free.")
WATCHDOG = ("[rank5]:[E1130 21:03:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 5] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum={n}, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before "
            "timing out.")


def stamp(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def envelope(job, host, rank, t, message):
    return json.dumps({"timestamp": stamp(t), "host": host, "job_id": job, "rank": rank,
                       "message": message}, separators=(",", ":"))


def noise_record(n, t):
    job = f"soak-job-{n % 997}"
    msg = NOISE.format(s=n % 60, ms=n % 1000, n=n, loss=2 + (n % 997) / 1000)
    return f"{job}\x1f{envelope(job, f'node-{n % 16:02d}', n % 64, t, msg)}\n"


class Load:
    """Writes records to a kcat producer at a steady rate, and one failing job (an OOM on
    rank 3, then a watchdog timeout on rank 5: one incident) every FAIL_EVERY_S.

    kcat gives up when every broker is down, so around a broker outage the load is paused as a
    log shipper would: kcat is flushed and closed before, what is generated meanwhile is kept,
    and a new kcat sends it after."""

    def __init__(self, broker, topic, rate):
        self.rate, self.topic, self.broker = rate, topic, broker
        self.err = open(f"{OUT}/kcat.err", "w")
        self.lock = threading.Lock()
        self.proc = self.producer()
        self.pending = []
        self.sent = 0
        self.failing = []  # job ids
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def producer(self):
        return subprocess.Popen(
            ["kcat", "-P", "-b", self.broker.bootstrap, "-t", self.topic, "-K", "\x1f",
             "-X", "queue.buffering.max.messages=2000000", "-X", "linger.ms=20"],
            stdin=subprocess.PIPE, stderr=self.err)

    def run(self):
        start = time.time()
        next_fail = start + FAIL_EVERY_S
        while not self.stop.is_set():
            now = time.time()
            due = int((now - start) * self.rate) - self.sent
            chunk = []
            for _ in range(max(due, 0)):
                chunk.append(noise_record(self.sent, now))
                self.sent += 1
            if now >= next_fail:
                next_fail += FAIL_EVERY_S
                job = f"soak-fail-{len(self.failing)}"
                self.failing.append(job)
                chunk.append(f"{job}\x1f{envelope(job, 'node-03', 3, now, OOM)}\n")
                chunk.append(f"{job}\x1f"
                             f"{envelope(job, 'node-05', 5, now + 0.5, WATCHDOG.format(n=len(self.failing)))}\n")
                self.sent += 2
            with self.lock:
                self.pending.extend(chunk)
                if self.proc is not None and self.pending:
                    self.proc.stdin.write("".join(self.pending).encode())
                    self.proc.stdin.flush()
                    self.pending.clear()
            self.stop.wait(0.05)

    def close_producer(self):
        """Flushes and closes kcat (every record written is delivered when it exits 0)."""
        with self.lock:
            proc, self.proc = self.proc, None
        proc.stdin.close()
        if proc.wait(timeout=600) != 0:
            die("kcat could not deliver the load")

    def resume(self):
        with self.lock:
            self.proc = self.producer()

    def finish(self):
        self.stop.set()
        self.thread.join()
        self.close_producer()


def backlog(broker, topic, n):
    """Produces n records at once (the calibration backlog)."""
    now = time.time()
    data = "".join(noise_record(i, now) for i in range(n)).encode()
    subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-K", "\x1f",
                    "-X", "queue.buffering.max.messages=2000000", "-X", "linger.ms=50"],
                   input=data, check=True, timeout=600)
    return len(data) / n


# ---------------------------------------------------------------- members


def http_get(port, path, timeout=5):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.read().decode()
    except Exception as e:  # a 503 from /readyz, a member restarting
        body = getattr(e, "read", None)
        return body().decode() if body else None


def metric_values(text, name):
    """{labels: value} of one family."""
    out = {}
    for line in (text or "").splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, value = line.rsplit(" ", 1)
            out[head[len(name):]] = float(value)
    return out


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Member:
    def __init__(self, name, config, group, topic):
        self.name, self.config, self.group, self.topic = name, config, group, topic
        self.port = free_port()
        self.lives = 0
        self.proc = None
        self.panics_seen = 0
        self.start()

    def start(self):
        self.lives += 1
        err = open(f"{OUT}/{self.name}.{self.lives}.err", "w")
        self.proc = subprocess.Popen(
            [f"{BIN}/faultline", "run", "--config", self.config, "--group-id", self.group,
             "--topic", self.topic, "--admin-listen", f"127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "FAULTLINE_LOG": os.environ.get(
                "SOAK_MEMBER_LOG", "warn,faultline::offsets=info,faultline::source=info")})

    def metrics(self):
        return http_get(self.port, "/metrics")

    def rss_kb(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        except (OSError, AttributeError):
            return None

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def terminate(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return "timeout"


def write_config(path, broker, topics, hook, am):
    with open(path, "w") as f:
        f.write(f"""[kafka]
brokers = "{broker.bootstrap}"
commit_interval_ms = 1000
drain_timeout_ms = 30000
[kafka.consumer_options]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
[output]
topic = "{topics['events']}"
[dead_letter]
topic = "{topics['dead']}"
[kb]
dir = "{topics['kb']}"
watch_interval_ms = 1000
[incidents]
topic = "{topics['incidents']}"
window_ms = {QUIET_MS}
quiet_ms = {QUIET_MS}
resolved_hold_ms = {QUIET_MS}
[webhook]
url = "{hook.url}/tickets"
max_attempts = 3
initial_backoff_ms = 100
max_backoff_ms = 1000
timeout_ms = 5000
[alertmanager]
url = "{am.url}"
max_attempts = 2
initial_backoff_ms = 100
max_backoff_ms = 500
timeout_ms = 2000
resend_interval_ms = 10000
""")


# ---------------------------------------------------------------- the run


def lag_state(members):
    """(total lag, partitions reported) over the live members' assigned partitions."""
    lags = {}
    for m in members:
        for labels, v in metric_values(m.metrics(), "faultline_consumer_lag_records").items():
            p = re.search(r'partition="(\d+)"', labels)
            if p:
                lags[int(p.group(1))] = min(v, lags.get(int(p.group(1)), v))
    return sum(lags.values()), len(lags)


def assigned(members):
    """Partitions assigned over the members, as their /readyz say."""
    total = 0
    for m in members:
        body = http_get(m.port, "/readyz") or ""
        total += int((re.search(r"^assigned_partitions (\d+)", body, re.M) or [0, 0])[1])
    return total


def committed(members):
    """The total of the committed offsets of the partitions, as the members report them."""
    offsets = {}
    for m in members:
        for labels, v in metric_values(m.metrics(), "faultline_committed_offset").items():
            p = re.search(r'partition="(\d+)"', labels)
            if p:
                offsets[int(p.group(1))] = max(v, offsets.get(int(p.group(1)), v))
    return sum(offsets.values())


def main():
    os.makedirs(OUT, exist_ok=True)
    for tool in ("kcat",):
        if not shutil.which(tool):
            die(f"{tool} is required")
    broker = Broker()
    run_id = int(time.time())
    topics = {k: f"soak.{k}.{run_id}" for k in ("logs", "events", "dead", "incidents", "calib",
                                                 "calib-events")}
    for k, name in topics.items():
        broker.command(f"topic {name} {PARTITIONS if k in ('logs', 'calib') else 4}")
    kb = tempfile.mkdtemp(prefix="soak-kb-")
    shutil.copytree(KB_SRC, kb, dirs_exist_ok=True)
    topics["kb"] = kb
    hook = Receiver(200, SLOW_RECEIVER_S)     # the slow receiver: tickets
    am = Receiver(503, 0)                      # the failing one: Alertmanager
    config = f"{OUT}/faultline.toml"
    write_config(config, broker, topics, hook, am)

    # 1. The measured maximum: one member alone through a backlog.
    calib_n = int(os.environ.get("SOAK_CALIBRATION_RECORDS", "200000"))
    record_bytes = backlog(broker, topics["calib"], calib_n)
    calib_cfg = f"{OUT}/calibration.toml"
    with open(config) as f:
        text = f.read()
    with open(calib_cfg, "w") as f:
        f.write(text.replace(topics["events"], topics["calib-events"]))
    c = Member("calibration", calib_cfg, f"soak-calib-{run_id}", topics["calib"])
    first = None
    deadline = time.time() + 600
    while True:
        body = http_get(c.port, "/readyz") or ""
        done = int((re.search(r"^records (\d+)", body, re.M) or [0, 0])[1])
        in_flight = int((re.search(r"^in_flight (\d+)", body, re.M) or [0, 1])[1])
        if first is None and done > 0:
            first = (time.time(), done)
        if done >= calib_n and in_flight == 0:
            break
        if c.proc.poll() is not None or time.time() > deadline:
            die("the calibration member stopped or did not finish")
        time.sleep(0.2)  # polling /readyz
    elapsed = max(time.time() - first[0], 0.1)
    max_rate = (calib_n - first[1]) / elapsed
    c.terminate()
    retention_cap = (PARTITIONS * BROKER_PARTITION_BYTES / (record_bytes + RECORD_OVERHEAD)
                     / REREAD_WINDOW_S)
    rate = min(max_rate * LOAD_FRACTION, retention_cap)
    log(f"measured max {max_rate:.0f} records/s; load {rate:.0f} records/s "
        f"(retention cap {retention_cap:.0f}); {record_bytes:.0f} bytes a record")
    log(f"schedule: KB reload every {RELOAD_S:.0f}s, broker down {BROKER_DOWN_S:.0f}s every "
        f"{BROKER_S:.0f}s, SIGKILL every {KILL_S:.0f}s, warm-up {WARMUP_S:.0f}s")

    # 2. The soak.
    group = f"soak-{run_id}"
    a = Member("member-a", config, group, topics["logs"])   # never killed: RSS is measured here
    b = Member("member-b", config, group, topics["logs"])   # SIGKILLed and restarted
    members = [a, b]
    # The soak starts once the group consumes every partition (loading and checking the KB
    # takes a while): records produced before would only measure the start-up.
    ready_by = time.time() + 300
    while assigned(members) < PARTITIONS:
        if time.time() > ready_by or any(m.proc.poll() is not None for m in members):
            die("the members did not start consuming")
        time.sleep(0.5)  # polling /metrics
    log("both members consume every partition: the soak starts")
    tap = Tap(broker, topics["logs"], f"soak-tap-{run_id}")
    load = Load(broker, topics["logs"], rate)
    start = time.time()
    end = start + MINUTES * 60
    next_reload, next_broker, next_kill = start + RELOAD_S, start + BROKER_S, start + KILL_S
    reloads = kills = broker_cycles = 0
    faults = []  # [name, ended_at, recovered_at]
    rss = []
    rss_log = open(f"{OUT}/rss.tsv", "w")
    rss_log.write("seconds\trss_kb_member_a\tlag\tpartitions_reported\n")
    threshold = max(rate * 2, 1000)
    panics = {}
    reload_counts = {}
    while time.time() < end:
        now = time.time()
        if now >= next_reload:
            next_reload += RELOAD_S
            reloads += 1
            # A real change each time: an entry appears or goes.
            extra = os.path.join(kb, "soak", "extra.toml")
            os.makedirs(os.path.dirname(extra), exist_ok=True)
            if reloads % 2:
                with open(extra, "w") as f:
                    f.write(f'''id = "soak/extra"
title = "soak extra {reloads}"
domain = "soak"
category = "crash"
error_code = "SOAK_EXTRA"
role = "root"
severity = "error"
verification = "ai_generated"
patterns_verified = "unverified"
root_cause = "A soak test entry."
patterns = ['SOAKNEVERPRINTED (?P<n>\\d+)']
examples = ["SOAKNEVERPRINTED 42"]
negative_examples = ["all fine"]
references = ["scripts/soak.py"]
''')
            else:
                os.remove(extra)
        if now >= next_broker:
            next_broker += BROKER_S
            broker_cycles += 1
            log(f"broker down for {BROKER_DOWN_S:.0f}s")
            load.close_producer()
            broker.command("down -1")
            time.sleep(BROKER_DOWN_S)  # the fault's duration, not synchronisation
            broker.command("up -1")
            load.resume()
            faults.append(["broker", time.time(), None])
        if now >= next_kill:
            next_kill += KILL_S
            kills += 1
            log("SIGKILL member-b, restart")
            b.kill()
            b.start()
            faults.append(["sigkill", time.time(), None])
        total, reported = lag_state(members)
        for f in faults:
            if f[2] is None and reported == PARTITIONS and total <= threshold:
                f[2] = time.time()
        r = a.rss_kb()
        if r:
            rss_log.write(f"{now - start:.1f}\t{r}\t{total}\t{reported}\n")
            if now - start >= WARMUP_S:
                rss.append(r)
        for m in members:
            text = m.metrics()
            if text:
                panics[(m.name, m.lives)] = sum(metric_values(text, "faultline_panics_total").values())
                if m is a:
                    reload_counts = metric_values(text, "faultline_knowledge_base_reloads_total")
            if m.proc.poll() is not None:
                log(f"{m.name} exited on its own ({m.proc.returncode}); restarting")
                faults.append([f"{m.name} exited", time.time(), None])
                m.start()
        time.sleep(1)  # the sampling period

    # 3. Drain: stop the load, wait for the lag and every incident to settle.
    load.finish()
    produced = broker.end_offsets(topics["logs"])
    drain_deadline = time.time() + RECOVERY_S + QUIET_MS / 1000 * 2
    # A KB change is checked (`kb check` in a child process, every example in both engines)
    # before it is loaded; under the soak's load on two cores that takes minutes with the KB's
    # size, so the wait for the first reload may run past the drain's deadline, up to this one.
    reload_deadline = time.time() + RECOVERY_S + RELOAD_CHECK_S
    final_lag = None
    while True:
        now = time.time()
        reloads_done = sum(metric_values(a.metrics(),
                                         "faultline_knowledge_base_reloads_total").values())
        if now >= drain_deadline and (reloads_done >= 1 or now >= reload_deadline):
            break
        total, reported = lag_state(members)
        opened = sum(sum(metric_values(m.metrics(), "faultline_incidents_open").values())
                     for m in members)
        for f in faults:
            if f[2] is None and reported == PARTITIONS and total <= threshold:
                f[2] = time.time()
        # Committed up to the end: every record done, every incident resolved and its ticket
        # handled (a resolution holds the commit until then).
        if reported == PARTITIONS and total == 0 and opened == 0 and committed(members) >= produced:
            final_lag = 0
            # And every incident on the topic resolved (a member's gauge may lag behind).
            changes = [json.loads(l) for l in
                       broker.read(topics["incidents"], "%s\n").decode().splitlines()]
            # And the KB reload a change started has finished (reloads_done, above): under the load
            # a member checks and compiles the changed KB slowly, and it goes on after the load stops.
            if {c["id"] for c in changes} <= {
                    c["id"] for c in changes if c["status"] == "resolved"} and reloads_done >= 1:
                break
        final_lag = total
        time.sleep(1)  # the sampling period
    for m in members:
        # A member restarted late may still be loading its KB: let it start before the stop.
        ready_by = time.time() + 120
        while m.metrics() is None and time.time() < ready_by and m.proc.poll() is None:
            time.sleep(0.5)  # polling /metrics
        text = m.metrics()
        if text:
            panics[(m.name, m.lives)] = sum(metric_values(text, "faultline_panics_total").values())
            if m is a:
                reload_counts = metric_values(text, "faultline_knowledge_base_reloads_total")
    exits = [m.terminate() for m in members]
    # A member's own panic is also on its stderr.
    panic_lines = resets = 0
    for name in os.listdir(OUT):
        if name.endswith(".err") and name.startswith("member"):
            with open(os.path.join(OUT, name), errors="replace") as f:
                for l in f:
                    panic_lines += "panicked" in l
                    # librdkafka jumped past records the broker no longer held (ERROR line).
                    resets += "offset reset" in l

    # 4. What came out.
    events = broker.read(topics["events"], "%s\n").decode(errors="replace").splitlines()
    distinct = set()
    fail_hits = set()
    for e in events:
        ev = json.loads(e)
        s = ev.get("source", {})
        distinct.add((s.get("partition"), s.get("offset"), s.get("line"), ev.get("kb_id")))
        if ev.get("job_id", "").startswith("soak-fail-"):
            fail_hits.add((ev["job_id"], ev.get("rank")))
    expected_hits = {(j, r) for j in load.failing for r in (3, 5)}
    missing = sorted({j for j, _ in expected_hits - fail_hits}, key=lambda j: int(j.rsplit("-", 1)[1]))
    tap.finish()
    if missing:
        log("failing jobs without all their events (seconds into the soak; partition@offset of "
            "their records): " + ", ".join(
                f"{j} ({(int(j.rsplit('-', 1)[1]) + 1) * FAIL_EVERY_S:.0f}s; "
                f"{' '.join(f'{p}@{o}' for p, o in sorted(tap.where.get(j, ())))})"
                for j in missing))
    incidents = [json.loads(l) for l in
                 broker.read(topics["incidents"], "%s\n").decode().splitlines()]
    # One identity per failure: incidents are told apart by their id.
    fps = {i["id"] for i in incidents}
    inc_jobs = {i["job_id"] for i in incidents}
    resolved = {i["id"] for i in incidents if i["status"] == "resolved"}
    ticketed = {i["id"] for i in incidents if i["ticket"]["raised"]}
    dead = broker.read(topics["dead"], "%h\t%k\n").decode(errors="replace").splitlines()
    alert_dead = {l.split("\t", 1)[1] for l in dead if "alert_undeliverable" in l}
    rss_ratio = max(rss) / min(rss) if rss else float("nan")
    recoveries = [f[2] - f[1] if f[2] else None for f in faults]
    panics_total = sum(panics.values())
    ok_reloads = reload_counts.get('{result="success"}', 0)
    same_reloads = reload_counts.get('{result="unchanged"}', 0)
    by_job = {}
    for i in incidents:
        by_job.setdefault(i["job_id"], {}).setdefault(i["id"], (
            i["root"]["error_code"], i["root"].get("rank"), i.get("first_seen"), i["status"]))
    for job, f in sorted(by_job.items()):
        if len(f) > 1:
            log(f"{job}: {len(f)} incidents: {f}")
    unresolved = sorted({(i["job_id"], i.get("first_seen"), i["id"]) for i in incidents
                         if i["id"] not in resolved})
    if unresolved:
        log("incidents never resolved (job, first seen, id; the partition@offset of "
            "their records): " + "; ".join(
                f"{j} {t} {fp} ({' '.join(f'{p}@{o}' for p, o in sorted(tap.where.get(j, ())))})"
                for j, t, fp in unresolved))
    bad_reloads = reload_counts.get('{result="failure"}', 0)

    checks = [
        ("every matching line has its event (distinct events of failing jobs)",
         fail_hits == expected_hits, f"{len(fail_hits)} of {len(expected_hits)}"),
        ("one incident per failing job", len(fps) == len(load.failing) and inc_jobs == set(load.failing),
         f"{len(fps)} ids, {len(inc_jobs)} jobs, {len(load.failing)} expected"),
        ("every incident resolved", resolved == fps, f"{len(resolved)} of {len(fps)}"),
        ("every ticketed incident delivered to the slow receiver", ticketed <= hook.fingerprints,
         f"{len(ticketed & hook.fingerprints)} of {len(ticketed)}"),
        ("every incident's alerts dead-lettered (failing Alertmanager)", fps <= alert_dead,
         f"{len(fps & alert_dead)} of {len(fps)}"),
        (f"RSS after warm-up max/min <= {RSS_TARGET}", rss_ratio <= RSS_TARGET,
         f"{rss_ratio:.3f} ({min(rss) // 1024 if rss else 0}-{max(rss) // 1024 if rss else 0} MiB, {len(rss)} samples)")
        if MINUTES >= RSS_RATIO_MINUTES else
        (f"RSS after warm-up <= {RSS_MAX_MIB:.0f} MiB (a run under {RSS_RATIO_MINUTES:g} minutes ends "
         f"before the working set is reached: its max/min is reported above, not judged)",
         bool(rss) and max(rss) / 1024 <= RSS_MAX_MIB,
         f"max {max(rss) // 1024 if rss else 0} MiB ({len(rss)} samples)"),
        ("no offset reset (records the broker dropped before they were read)", resets == 0,
         f"{resets}"),
        ("no panic", panics_total == 0 and panic_lines == 0,
         f"{panics_total:.0f} counted, {panic_lines} on stderr"),
        (f"lag recovered after every fault within {RECOVERY_S:.0f}s",
         all(r is not None and r <= RECOVERY_S for r in recoveries),
         ", ".join(f"{f[0]} {r:.1f}s" if r is not None else f"{f[0]} never"
                   for f, r in zip(faults, recoveries)) or "no fault"),
        ("lag drained to 0 after the load stopped", final_lag == 0, f"{final_lag}"),
        ("KB reloads succeeded", bad_reloads == 0 and ok_reloads >= 1,
         f"{ok_reloads:.0f} reloaded, {same_reloads:.0f} unchanged, {bad_reloads:.0f} failed, "
         f"{reloads} changes"),
        ("graceful stop (exit 0)", exits == [0, 0], f"{exits}"),
    ]
    print(f"""
soak report: {MINUTES:g} minutes, {BIN}
  load: {rate:.0f} records/s ({LOAD_FRACTION:g} x measured max {max_rate:.0f}/s, retention cap {retention_cap:.0f}/s), {PARTITIONS} partitions, 2 members
  faults: {reloads} KB changes (every {RELOAD_S:.0f}s), {broker_cycles} broker down/up ({BROKER_DOWN_S:.0f}s every {BROKER_S:.0f}s), {kills} SIGKILLs (every {KILL_S:.0f}s)
  records in: {produced} (written {load.sent}); events out: {len(events)} ({len(distinct)} distinct, {len(events) - len(distinct)} duplicates)
  incidents: {len(fps)} (expected {len(load.failing)}), {len(incidents)} changes; tickets at the slow receiver: {len(hook.fingerprints)} incidents, {hook.requests} requests; Alertmanager refused {am.requests} requests, {len(alert_dead)} incidents' alerts dead-lettered
  RSS of the member never killed, after warm-up: min {min(rss) // 1024 if rss else 0} MiB, max {max(rss) // 1024 if rss else 0} MiB, ratio {rss_ratio:.3f}
  lag recovery (to <= {threshold:.0f} records on all {PARTITIONS} partitions): {', '.join(f'{r:.1f}s' if r is not None else 'never' for r in recoveries) or 'no fault'}""")
    failed = 0
    report_only = {"one incident per failing job": "split"}
    report_only.update({c[0]: "rss" for c in checks if c[0].startswith("RSS after warm-up")})
    for name, ok, detail in checks:
        known = report_only.get(name) in REPORT_ONLY
        print(f"  [{'ok' if ok else 'reported' if known else 'FAIL'}] {name}: {detail}")
        failed += not ok and not known
    print(f"soak: {'PASS' if not failed else f'FAIL ({failed} checks)'}")
    broker.proc.stdin.close()
    broker.proc.wait(timeout=60)
    shutil.rmtree(kb, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
