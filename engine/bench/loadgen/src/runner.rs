//! The event loop: many non-blocking connections on one thread and one core.
//!
//! Why one thread with raw epoll: the benchmark pins the generator to CPU 0 and
//! the server to CPU 1, so the generator has exactly one core and must spend it
//! on requests, not on locks or a runtime. Requests for a connection are
//! appended to its write buffer and flushed with one write() per wakeup; each
//! read() may complete dozens of pipelined replies.
//!
//! Two ways to pace the load:
//! - closed loop: every connection keeps `depth` requests outstanding and sends
//!   a new one when a reply arrives; latency runs from the actual send.
//! - open loop: request i is *due* at start + i/rate whatever the server does.
//!   If a connection already has `depth` requests outstanding the request waits
//!   in that connection's backlog, and its latency still runs from the time it
//!   was due. A slow server therefore shows up as latency, not as a quietly
//!   lower send rate ("coordinated omission" avoided).
//!
//! What a step's latency charges to the server, and what it does not: the
//! generator shares a busy 2-core machine, and its own thread can be
//! descheduled or busy for milliseconds. Measured from the due time to the
//! moment the generator read the reply, that lateness (sending late, reading
//! late) was charged to the server: against cachet-sink, a server that does no
//! work, 256 connections at 2,000 requests/s showed p99 3.7-15 ms. So a
//! request's latency runs from when its bytes were written to the kernel's
//! receive timestamp of the reply (SO_TIMESTAMPNS; on loopback the server's
//! send, whenever the generator gets to read it), plus, if it had to wait in
//! its connection's backlog, the wait from its due time until the server's
//! previous reply arrived, at most the server's share of that previous
//! request (a frozen server is charged for every request that came due
//! meanwhile; a backlog the generator's own stall built up is not charged as
//! a server stall). The old measure, due time to read, is kept beside it
//! (`hist_due`).

use crate::proto::{Parser, Reply, Status};
use crate::transport::{Connector, Progress, Transport};
use crate::workload::{OpKind, Workload};
use hdrhistogram::Histogram;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

const READ_BUF: usize = 256 * 1024;
/// Grace period for outstanding replies after a step stops sending.
const DRAIN_NS: u64 = 2_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pace {
    Closed,
    /// Requests per second across all connections.
    Open(f64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The get:set mix.
    Mix,
    /// A set of every key once, in order (prefill).
    Fill,
}

#[derive(Clone, Debug)]
pub struct StepSpec {
    pub pace: Pace,
    pub source: Source,
    /// Cache-aside: a get that misses is followed by a set of that key.
    pub set_on_miss: bool,
    pub duration: Duration,
    pub warmup: Duration,
    /// Upper bound on requests sent in this step (0 = none).
    pub max_requests: u64,
    /// Print a progress line to stderr every second.
    pub progress: bool,
    pub label: String,
}

#[derive(Clone, Copy)]
struct Pending {
    /// When the request was due (open loop) or sent (closed loop), ns since base.
    t: u64,
    nkeys: u32,
    kind: OpKind,
    /// Index of the (first) key, for set-on-miss.
    key: u64,
    /// Step that sent it; replies to an earlier, abandoned step are ignored.
    step: u32,
    measured: bool,
    /// When its bytes were handed to send(), ns since base; 0 until then.
    sent: u64,
    /// Open loop: the server's share of its wait in the backlog: from its due
    /// time until the previous reply on its connection arrived, but no more
    /// than the server's share of that previous request. What follows, until
    /// the generator sent it, is the generator's.
    held: u64,
}

impl Pending {
    /// The server's share of this request's latency, given when its reply
    /// arrived: the backlog wait it caused plus written-to-arrived.
    fn server_latency(&self, arrived: u64) -> u64 {
        let from = if self.sent == 0 { self.t } else { self.sent };
        self.held + arrived.saturating_sub(from)
    }
}

struct Conn {
    // Owns the socket: dropping it closes fd.
    transport: Transport,
    fd: RawFd,
    wbuf: Vec<u8>,
    wpos: usize,
    /// EPOLLOUT is armed.
    want_out: bool,
    /// TLS: the last write could not go on until the socket is readable
    /// (WANT_READ), so the next readable event retries it.
    write_waits_read: bool,
    /// TLS: the last read could not go on until the socket is writable
    /// (WANT_WRITE), so the next writable event retries it.
    read_waits_write: bool,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    parser: Parser,
    inflight: VecDeque<Pending>,
    /// Open loop: due times of requests that could not be sent yet.
    backlog: VecDeque<u64>,
}

pub struct StepResult {
    pub label: String,
    pub pace: Pace,
    pub depth: usize,
    pub conns: usize,
    pub measured_seconds: f64,
    /// Latency charged to the server: written to the reply's kernel receive
    /// timestamp, plus the backlog wait the server caused (Pending::held).
    pub hist: Histogram<u64>,
    /// Due time to the moment the generator read the reply: includes the
    /// generator's own lateness; the measure before SO_TIMESTAMPNS.
    pub hist_due: Histogram<u64>,
    /// `hist` for the sets alone: tells a tail the sets carry from one the
    /// gets behind them carry (W2 with 10% sets).
    pub hist_sets: Histogram<u64>,
    /// Replies whose receive timestamp was missing (stamped at read instead).
    pub rx_unstamped: u64,
    /// Open loop: how late the generator itself dispatched each request
    /// after it came due. Large values mean the generator, not the server,
    /// was the bottleneck (busy CPU says nothing here: the open loop
    /// busy-polls between sends by design).
    pub lag: Histogram<u64>,
    /// Replies completed inside the measurement window.
    pub completed: u64,
    pub gets: u64,
    pub sets: u64,
    pub keys_requested: u64,
    pub hits: u64,
    pub misses: u64,
    pub stored: u64,
    pub not_stored: u64,
    pub errors: u64,
    /// VALUE blocks for a key that was not asked for, or of the wrong length.
    pub wrong_values: u64,
    pub sent: u64,
    /// Open loop: requests that came due but could not be sent before the step ended.
    pub unsent: u64,
    /// Requests still unanswered when the drain period ran out.
    pub unanswered: u64,
    /// CPU time (user+system) the generator itself spent on the whole step:
    /// with requests sent, its cost per request, which tells whether the
    /// generator or the server was the limit even on a busy machine.
    pub cpu_seconds: f64,
    /// Wall time of the whole step (warmup and drain included).
    pub wall_seconds: f64,
    /// Share of the step's wall time the generator's / server's threads
    /// spent runnable but waiting for a CPU (/proc/PID/task/*/schedstat).
    /// On a shared machine this says how much other processes disturbed
    /// the measurement; on a quiet one it is near 0.
    pub loadgen_runq_share: Option<f64>,
    pub server_runq_share: Option<f64>,
    /// CPU time the server's threads used during the step. Per request, it
    /// is the server's cost, which other processes on the machine barely
    /// change, unlike its throughput.
    pub server_cpu_seconds: Option<f64>,
    /// The same split into user and system time (/proc/PID/stat, in clock
    /// ticks: 10 ms each, so a step of a few seconds gives about 1%). Over
    /// loopback a send runs the receiver's TCP path in the sender's system
    /// time: what the system share leaves is what an engine can still cut.
    pub server_user_seconds: Option<f64>,
    pub server_sys_seconds: Option<f64>,
    /// Per CPU, the share of the step the hypervisor ran something else
    /// (steal time, /proc/stat): invisible to schedstat, and on a VM a
    /// source of millisecond stalls in the tail.
    pub steal_share: Vec<f64>,
}

impl StepResult {
    pub fn throughput(&self) -> f64 {
        if self.measured_seconds > 0.0 {
            self.completed as f64 / self.measured_seconds
        } else {
            0.0
        }
    }
    pub fn keys_per_second(&self) -> f64 {
        if self.measured_seconds > 0.0 {
            (self.hits + self.misses + self.sets) as f64 / self.measured_seconds
        } else {
            0.0
        }
    }
    /// An open-loop step that fell behind its schedule measured the server's
    /// overload, not its latency at that rate.
    pub fn kept_up(&self) -> bool {
        match self.pace {
            Pace::Closed => self.unanswered == 0,
            Pace::Open(rate) => self.unanswered == 0 && self.unsent == 0 && self.throughput() >= 0.95 * rate,
        }
    }
}

pub struct Runner {
    epfd: RawFd,
    conns: Vec<Conn>,
    pub depth: usize,
    base: Instant,
    step_id: u32,
    pub workload: Workload,
    /// The server's pid, when given, for its run-queue wait.
    pub server_pid: Option<u32>,
}

/// Steal ticks of each CPU (cpu0, cpu1, ...) from /proc/stat.
fn steal_ticks() -> Vec<u64> {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).map_or(false, |b| b.is_ascii_digit()))
        .map(|l| l.split_whitespace().nth(8).and_then(|v| v.parse().ok()).unwrap_or(0))
        .collect()
}

/// Sums over a process's threads of (time on a CPU, time waiting on a run
/// queue), in ns, from /proc/PID/task/*/schedstat.
fn sched_ns(pid: &str) -> Option<(u64, u64)> {
    let (mut cpu, mut wait) = (0u64, 0u64);
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = t.ok()?.path().join("schedstat");
        if let Ok(text) = std::fs::read_to_string(path) {
            let mut it = text.split_whitespace();
            cpu += it.next()?.parse::<u64>().ok()?;
            wait += it.next()?.parse::<u64>().ok()?;
        }
    }
    Some((cpu, wait))
}

/// A process's (user, system) clock ticks, all threads, from /proc/PID/stat
/// (fields 14 and 15, counted after the command name's closing paren).
fn user_sys_ticks(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut it = text.get(text.rfind(')')? + 1..)?.split_whitespace().skip(11);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn cpu_time() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Runner {
    pub fn connect(
        addr: SocketAddrV4,
        connector: &Connector,
        nconns: usize,
        depth: usize,
        workload: Workload,
    ) -> Result<Runner, String> {
        let epfd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }).map_err(|e| format!("epoll: {e}"))?;
        // Default timer slack (50 us) would make every open-loop sleep late.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
        let mut conns = Vec::with_capacity(nconns);
        for i in 0..nconns {
            let transport = connector
                .connect(addr, Duration::from_secs(5))
                .map_err(|e| format!("connection {} of {nconns} to {addr}: {e}", i + 1))?;
            let on: libc::c_int = 1;
            cvt(unsafe {
                libc::setsockopt(
                    transport.fd(),
                    libc::SOL_SOCKET,
                    libc::SO_TIMESTAMPNS,
                    &on as *const _ as *const libc::c_void,
                    std::mem::size_of_val(&on) as libc::socklen_t,
                )
            })
            .map_err(|e| format!("SO_TIMESTAMPNS: {e}"))?;
            transport.set_nonblocking().map_err(|e| e.to_string())?;
            let fd = transport.fd();
            let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: i as u64 };
            cvt(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) })
                .map_err(|e| format!("epoll_ctl: {e}"))?;
            conns.push(Conn {
                transport,
                fd,
                wbuf: Vec::with_capacity(64 * 1024),
                wpos: 0,
                want_out: false,
                write_waits_read: false,
                read_waits_write: false,
                rbuf: vec![0u8; READ_BUF],
                rstart: 0,
                rend: 0,
                parser: Parser::default(),
                inflight: VecDeque::with_capacity(depth.max(1) * 2),
                backlog: VecDeque::new(),
            });
        }
        // A server that accepts and then drops connections over its limit
        // (memcached's -c) must fail here, not silently measure fewer conns.
        std::thread::sleep(Duration::from_millis(50));
        for (i, c) in conns.iter().enumerate() {
            let mut b = [0u8; 1];
            let r = unsafe { libc::recv(c.fd, b.as_mut_ptr() as *mut _, 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
            if r == 0 {
                return Err(format!("server closed connection {} of {nconns} right after accept (connection limit?)", i + 1));
            }
        }
        Ok(Runner { epfd, conns, depth: depth.max(1), base: Instant::now(), step_id: 0, workload, server_pid: None })
    }

    #[inline]
    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    pub fn run_step(&mut self, spec: &StepSpec) -> Result<StepResult, String> {
        self.step_id += 1;
        let step = self.step_id;
        let nconns = self.conns.len();
        let mut hist = Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 3).unwrap();
        let mut hist_due = hist.clone();
        let mut hist_sets = hist.clone();
        let rx_offset = self.realtime_offset();
        let mut r = StepResult {
            label: spec.label.clone(),
            pace: spec.pace,
            depth: self.depth,
            conns: nconns,
            measured_seconds: 0.0,
            hist: hist.clone(),
            hist_due: hist.clone(),
            hist_sets: hist.clone(),
            rx_unstamped: 0,
            lag: hist.clone(),
            completed: 0,
            gets: 0,
            sets: 0,
            keys_requested: 0,
            hits: 0,
            misses: 0,
            stored: 0,
            not_stored: 0,
            errors: 0,
            wrong_values: 0,
            sent: 0,
            unsent: 0,
            unanswered: 0,
            cpu_seconds: 0.0,
            wall_seconds: 0.0,
            loadgen_runq_share: None,
            server_runq_share: None,
            server_cpu_seconds: None,
            server_user_seconds: None,
            server_sys_seconds: None,
            steal_share: Vec::new(),
        };
        let steal_start = steal_ticks();
        let cpu_start = cpu_time();
        let sched_self_start = sched_ns("self");
        let sched_server_start = self.server_pid.and_then(|p| sched_ns(&p.to_string()));
        let ticks_server_start = self.server_pid.and_then(user_sys_ticks);
        let start = self.now();
        let measure_start = start + spec.warmup.as_nanos() as u64;
        let end = measure_start + spec.duration.as_nanos() as u64;
        let max_requests = if spec.max_requests == 0 { u64::MAX } else { spec.max_requests };
        let mut stop_at: Option<u64> = None;
        let mut sending = true;
        let mut next_progress = start + 1_000_000_000;
        let mut last_progress_completed = 0u64;
        // Open loop schedule.
        let period_ns = match spec.pace {
            Pace::Open(rate) => 1e9 / rate,
            Pace::Closed => 0.0,
        };
        let mut next_index: u64 = 0;
        let mut next_due: u64 = start;
        let mut events: Vec<libc::epoll_event> = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
        let mut replies: Vec<Reply> = Vec::with_capacity(1024);
        let mut reply_rx: Vec<u64> = Vec::with_capacity(1024);
        let mut dirty: Vec<usize> = Vec::with_capacity(nconns);

        // Closed loop starts with every connection's pipeline full.
        if spec.pace == Pace::Closed {
            let now = self.now();
            for ci in 0..nconns {
                while self.conns[ci].inflight.len() < self.depth && r.sent < max_requests {
                    self.send_one(ci, now, now >= measure_start, step, spec.source, &mut r);
                }
                self.flush(ci)?;
            }
        }

        loop {
            let mut now = self.now();
            // The request bound counts requests actually sent, so an open-loop
            // step also sends what its backlog still holds.
            if sending && (now >= end || r.sent >= max_requests) {
                sending = false;
                stop_at = Some(now.min(end));
                // Requests that came due before the end while this thread was
                // descheduled were never scheduled: they count as unsent, so
                // a late wake-up shows as lag, never as a lower offered rate.
                if let Pace::Open(_) = spec.pace {
                    while next_due < end && next_index < max_requests {
                        r.unsent += 1;
                        next_index += 1;
                        next_due = start + (next_index as f64 * period_ns) as u64;
                    }
                }
                for c in self.conns.iter_mut() {
                    r.unsent += c.backlog.len() as u64;
                    c.backlog.clear();
                }
            }
            if let Pace::Open(_) = spec.pace {
                if sending {
                    // next_index counts requests that came due: sent or backlogged.
                    while next_due <= now && next_index < max_requests {
                        if next_due >= measure_start {
                            r.lag.saturating_record((now - next_due).max(1));
                        }
                        let ci = (next_index % nconns as u64) as usize;
                        if self.conns[ci].inflight.len() < self.depth {
                            if self.conns[ci].wbuf.is_empty() {
                                dirty.push(ci);
                            }
                            self.send_one(ci, next_due, next_due >= measure_start, step, spec.source, &mut r);
                        } else {
                            self.conns[ci].backlog.push_back(next_due);
                        }
                        next_index += 1;
                        next_due = start + (next_index as f64 * period_ns) as u64;
                    }
                    for ci in dirty.drain(..) {
                        if !self.conns[ci].want_out {
                            self.flush(ci)?;
                        }
                    }
                }
            }
            if !sending {
                let outstanding: usize = self.conns.iter().map(|c| c.inflight.iter().filter(|p| p.step == step).count()).sum();
                if outstanding == 0 {
                    break;
                }
                if now > stop_at.unwrap() + DRAIN_NS {
                    r.unanswered = outstanding as u64;
                    break;
                }
            }
            if spec.progress && now >= next_progress {
                let done = r.completed - last_progress_completed;
                last_progress_completed = r.completed;
                eprintln!(
                    "    [{}] {:>5.1}s  {:>9.0} req/s  sent {}",
                    spec.label,
                    (now - start) as f64 / 1e9,
                    done as f64,
                    r.sent
                );
                next_progress += 1_000_000_000;
            }

            // How long may we sleep? Open loop wakes for the next due request:
            // busy-polls when it is close (sleep timers are too coarse), sleeps
            // with a nanosecond timeout otherwise.
            let wake_at = if !sending {
                now + 10_000_000
            } else if let Pace::Open(_) = spec.pace {
                next_due.min(end)
            } else {
                end
            };
            let wait_ns = wake_at.saturating_sub(now).min(10_000_000);
            // Sleeping (not spinning) between sends matters on a shared
            // machine: the scheduler favours a thread that sleeps when it
            // wakes, and a spinning one is preempted by every compile job.
            // With a 1 us timer slack (set in connect) sleeps are precise
            // enough that only gaps under 20 us are spun.
            let n = if wait_ns < 20_000 {
                unsafe { libc::epoll_wait(self.epfd, events.as_mut_ptr(), events.len() as i32, 0) }
            } else {
                let ts = libc::timespec { tv_sec: 0, tv_nsec: (wait_ns - 5_000) as i64 };
                unsafe {
                    libc::syscall(
                        libc::SYS_epoll_pwait2,
                        self.epfd,
                        events.as_mut_ptr(),
                        events.len() as i32,
                        &ts as *const libc::timespec,
                        std::ptr::null::<libc::sigset_t>(),
                        0usize,
                    ) as i32
                }
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(format!("epoll_wait: {e}"));
            }
            for ev in &events[..n as usize] {
                let ci = ev.u64 as usize;
                let flags = ev.events;
                let writable = flags & (libc::EPOLLOUT as u32) != 0;
                if writable {
                    self.flush(ci)?;
                }
                let readable = flags & ((libc::EPOLLIN | libc::EPOLLERR | libc::EPOLLHUP) as u32) != 0;
                if !readable && !(writable && self.conns[ci].read_waits_write) {
                    continue;
                }
                self.read_replies(ci, &mut replies, &mut reply_rx)?;
                if replies.is_empty() {
                    if self.conns[ci].write_waits_read {
                        self.flush(ci)?;
                    }
                    continue;
                }
                now = self.now();
                for (rep, rx_real) in replies.drain(..).zip(reply_rx.drain(..)) {
                    let p = self.conns[ci]
                        .inflight
                        .pop_front()
                        .ok_or_else(|| "reply without an outstanding request".to_string())?;
                    if p.step != step {
                        continue;
                    }
                    let fill = if spec.set_on_miss
                        && p.kind == OpKind::Get
                        && p.nkeys == 1
                        && rep.status == Status::Ok
                        && rep.values == 0
                    {
                        Some(p.key)
                    } else {
                        None
                    };
                    r.wrong_values += rep.wrong as u64;
                    let arrived = if rx_real == 0 {
                        r.rx_unstamped += p.measured as u64;
                        now
                    } else {
                        // Never before it was written, nor after it was read.
                        rx_real.saturating_sub(rx_offset).clamp(p.sent.min(now), now)
                    };
                    let answered_server_ns = p.server_latency(arrived);
                    if p.measured {
                        hist_due.saturating_record(now.saturating_sub(p.t).max(1));
                        hist.saturating_record(answered_server_ns.max(1));
                        if p.kind == OpKind::Set {
                            hist_sets.saturating_record(answered_server_ns.max(1));
                        }
                        if now <= stop_at.unwrap_or(end).min(end) {
                            r.completed += 1;
                        }
                        match p.kind {
                            OpKind::Get => {
                                r.gets += 1;
                                r.keys_requested += p.nkeys as u64;
                                if rep.status == Status::Error {
                                    r.errors += 1;
                                } else {
                                    let hits = (rep.values as u64).min(p.nkeys as u64);
                                    r.hits += hits;
                                    r.misses += p.nkeys as u64 - hits;
                                }
                            }
                            OpKind::Set => {
                                r.sets += 1;
                                match rep.status {
                                    Status::Ok => r.stored += 1,
                                    Status::NotStored => r.not_stored += 1,
                                    Status::Error => r.errors += 1,
                                }
                            }
                        }
                    }
                    if sending && r.sent < max_requests {
                        if let Some(k) = fill {
                            // In closed loop the fill takes the place of the next request.
                            self.send_set(ci, k, now, now >= measure_start, step, &mut r);
                            if spec.pace == Pace::Closed {
                                continue;
                            }
                        }
                        match spec.pace {
                            Pace::Closed => self.send_one(ci, now, now >= measure_start, step, spec.source, &mut r),
                            Pace::Open(_) => {
                                if let Some(due) = self.conns[ci].backlog.pop_front() {
                                    self.send_one(ci, due, due >= measure_start, step, spec.source, &mut r);
                                    // It waited from its due time for the reply just read:
                                    // the server's share of that wait is at most the
                                    // server's share of the answered request's whole
                                    // latency (a backlog the generator's own stall built
                                    // up drains at the server's pace, not charged as a
                                    // stall of the server).
                                    let held = arrived.saturating_sub(due).min(answered_server_ns);
                                    if let Some(p) = self.conns[ci].inflight.back_mut() {
                                        p.held = held;
                                    }
                                }
                            }
                        }
                    }
                }
                if !self.conns[ci].want_out {
                    self.flush(ci)?;
                }
            }
        }
        let stop = stop_at.unwrap_or(end).min(end);
        r.measured_seconds = stop.saturating_sub(measure_start) as f64 / 1e9;
        r.hist = hist;
        r.hist_due = hist_due;
        r.hist_sets = hist_sets;
        r.cpu_seconds = cpu_time() - cpu_start;
        r.wall_seconds = (self.now() - start) as f64 / 1e9;
        let wall_ns = r.wall_seconds * 1e9;
        let steal_end = steal_ticks();
        if steal_start.len() == steal_end.len() {
            let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
            r.steal_share = steal_start
                .iter()
                .zip(&steal_end)
                .map(|(a, b)| b.saturating_sub(*a) as f64 / ticks_per_s / r.wall_seconds.max(1e-9))
                .collect();
        }
        if let (Some(a), Some(b)) = (sched_self_start, sched_ns("self")) {
            r.loadgen_runq_share = Some(b.1.saturating_sub(a.1) as f64 / wall_ns);
        }
        if let (Some(a), Some(b)) = (sched_server_start, self.server_pid.and_then(|p| sched_ns(&p.to_string()))) {
            r.server_runq_share = Some(b.1.saturating_sub(a.1) as f64 / wall_ns);
            r.server_cpu_seconds = Some(b.0.saturating_sub(a.0) as f64 / 1e9);
        }
        if let (Some(a), Some(b)) = (ticks_server_start, self.server_pid.and_then(user_sys_ticks)) {
            let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
            r.server_user_seconds = Some(b.0.saturating_sub(a.0) as f64 / hz);
            r.server_sys_seconds = Some(b.1.saturating_sub(a.1) as f64 / hz);
        }
        Ok(r)
    }

    #[inline]
    fn send_one(&mut self, ci: usize, t: u64, measured: bool, step: u32, source: Source, r: &mut StepResult) {
        let c = &mut self.conns[ci];
        let (kind, nkeys, key) = match source {
            Source::Mix => self.workload.encode_next(&mut c.wbuf),
            Source::Fill => self.workload.encode_fill(&mut c.wbuf),
        };
        c.inflight.push_back(Pending { t, nkeys, kind, key, step, measured, sent: 0, held: 0 });
        r.sent += 1;
    }

    fn send_set(&mut self, ci: usize, key: u64, t: u64, measured: bool, step: u32, r: &mut StepResult) {
        let c = &mut self.conns[ci];
        self.workload.encode_set(key, &mut c.wbuf);
        c.inflight.push_back(Pending { t, nkeys: 1, kind: OpKind::Set, key, step, measured, sent: 0, held: 0 });
        r.sent += 1;
    }

    fn flush(&mut self, ci: usize) -> Result<(), String> {
        let epfd = self.epfd;
        let now = self.now();
        let c = &mut self.conns[ci];
        // Requests appended since the last flush are the unsent tail.
        for p in c.inflight.iter_mut().rev() {
            if p.sent != 0 {
                break;
            }
            p.sent = now.max(1);
        }
        c.write_waits_read = false;
        let mut waits_write = false;
        while c.wpos < c.wbuf.len() {
            match c.transport.send(&c.wbuf[c.wpos..]) {
                Ok(Progress::Bytes(n)) => c.wpos += n,
                Ok(Progress::WaitWrite) => {
                    waits_write = true;
                    break;
                }
                Ok(Progress::WaitRead) => {
                    c.write_waits_read = true;
                    break;
                }
                Ok(Progress::Closed) => return Err(format!("server closed connection {ci}")),
                Err(e) => return Err(format!("send on connection {ci}: {e}")),
            }
        }
        if c.wpos == c.wbuf.len() {
            c.wbuf.clear();
            c.wpos = 0;
        }
        arm(epfd, ci, c, waits_write || c.read_waits_write)
    }

    /// CLOCK_REALTIME minus our clock (ns since base), to place the kernel's
    /// receive timestamps on our clock: the tightest of a few bracketed reads.
    fn realtime_offset(&self) -> u64 {
        let mut best = (u64::MAX, 0u64);
        for _ in 0..8 {
            let a = self.now();
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
            let b = self.now();
            let real = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
            if b - a < best.0 {
                best = (b - a, real.saturating_sub(a + (b - a) / 2));
            }
        }
        best.1
    }

    /// Each reply parsed goes to `out`, with beside it in `out_rx` the kernel's
    /// receive timestamp (CLOCK_REALTIME ns, 0 if none) of the recv that
    /// completed it: the first segment of that recv's data, exact at depth 1.
    fn read_replies(&mut self, ci: usize, out: &mut Vec<Reply>, out_rx: &mut Vec<u64>) -> Result<(), String> {
        let keys = &self.workload.keys;
        let fixed_len = self.workload.fixed_value_len();
        let epfd = self.epfd;
        let c = &mut self.conns[ci];
        loop {
            if c.rstart == c.rend {
                c.rstart = 0;
                c.rend = 0;
            } else if c.rend == c.rbuf.len() {
                c.rbuf.copy_within(c.rstart..c.rend, 0);
                c.rend -= c.rstart;
                c.rstart = 0;
            }
            let mut rx = 0u64;
            let n = match c.transport.recv(&mut c.rbuf[c.rend..], &mut rx) {
                Ok(Progress::Bytes(n)) => n,
                Ok(Progress::Closed) => return Err(format!("server closed connection {ci}")),
                Ok(Progress::WaitRead) => return Ok(()),
                Ok(Progress::WaitWrite) => {
                    if !c.read_waits_write {
                        c.read_waits_write = true;
                        arm(epfd, ci, c, true)?;
                    }
                    return Ok(());
                }
                Err(e) => return Err(format!("recv on connection {ci}: {e}")),
            };
            if c.read_waits_write {
                c.read_waits_write = false;
                let waits_write = c.wpos < c.wbuf.len();
                arm(epfd, ci, c, waits_write)?;
            }
            c.rend += n;
            // A short plain read drained the socket; a TLS read returns one
            // record at a time, so only WANT_READ says the socket is drained.
            let filled = c.rend == c.rbuf.len() || c.transport.is_tls();
            // A value must belong to the key that was asked for (single-key
            // gets; the pending request is inflight[replies so far + i]) and
            // have the length every set used, so a fast but wrong server
            // cannot pass for a fast one.
            let base = out.len();
            let inflight = &c.inflight;
            let check = |i: usize, key: &[u8], bytes: u64| match inflight.get(base + i) {
                Some(p) if p.kind == OpKind::Get && p.nkeys == 1 => {
                    keys.key(p.key) == key && fixed_len.map_or(true, |n| n == bytes)
                }
                Some(p) if p.kind == OpKind::Get => fixed_len.map_or(true, |n| n == bytes),
                _ => false,
            };
            let used = c
                .parser
                .feed(&c.rbuf[c.rstart..c.rend], check, |rep| out.push(rep))
                .map_err(|e| format!("connection {ci}: {e}"))?;
            c.rstart += used;
            // Only the first reply this read completed is known to have
            // arrived with its first segment; later ones (depth > 1) arrived
            // between then and now, so they take the read time (0 here):
            // conservative, never earlier than they were.
            if out_rx.len() < out.len() {
                out_rx.push(rx);
                out_rx.resize(out.len(), 0);
            }
            if !filled {
                return Ok(());
            }
        }
    }
}

/// Arms EPOLLOUT on a connection exactly when something waits for the socket
/// to be writable.
fn arm(epfd: RawFd, ci: usize, c: &mut Conn, out: bool) -> Result<(), String> {
    if out == c.want_out {
        return Ok(());
    }
    c.want_out = out;
    let mut ev = libc::epoll_event { events: (libc::EPOLLIN | if out { libc::EPOLLOUT } else { 0 }) as u32, u64: ci as u64 };
    cvt(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_MOD, c.fd, &mut ev) }).map_err(|e| format!("epoll_ctl: {e}"))?;
    Ok(())
}

impl Drop for Runner {
    fn drop(&mut self) {
        unsafe { libc::close(self.epfd) };
    }
}
