//! cachet-loadgen: a memcached ASCII-protocol load generator for loopback
//! benchmarks of cachetd against memcached.
//!
//! Why our own: the benchmark needs open-loop pacing measured from the
//! intended send time, pipelining and multi-get together, HDR percentiles and
//! JSON, from one pinned core at more than a million requests a second. It
//! only ever talks to 127.0.0.0/8: it is a benchmark tool, not a traffic
//! generator for other machines.

mod proto;
mod runner;
mod search;
mod transport;
mod workload;

use runner::{Pace, Runner, Source, StepResult, StepSpec};
use search::Outcome;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::exit;
use std::time::Duration;
use transport::{Connector, Security};
use workload::{default_key_size, KeyDist, KeyTable, ValueDist, Workload};

const USAGE: &str = "\
usage: cachet-loadgen [options]

target (loopback only: 127.0.0.0/8 or localhost)
  --server HOST:PORT     default 127.0.0.1:11211
  --conns N              connections (default 1)
  --depth N              pipeline depth: requests outstanding per connection (default 1)
  --tls                  TLS on every connection (the handshake is done before the steps);
                         the server's certificate is not verified unless --tls-ca is given
  --tls-ca FILE          with --tls: verify the server's certificate chain against FILE

pacing (each rate in --rate is one step; no --rate means one closed-loop step)
  --rate R[,R2,...]      open loop at R requests/s; k/m suffixes allowed (200k)
  --duration SECS        measured seconds per step (default 10)
  --warmup SECS          unmeasured seconds before each step (default 0)
  --requests N           at most N requests per step (default: no bound but time)
  --stop-p999-us US      stop stepping after a step whose p999 exceeds US (or that fell behind)
  --stop-mean-us US      stop stepping after a step whose mean exceeds US (or that fell behind)
  --stop-when-behind     stop stepping after a step that fell behind its schedule
  --retries N            re-run a step that broke the limit (N re-runs in all) before stopping
                         (a busy shared machine can spoil one step; default 0)
  --bound-p99-us US      a step is within the bound when it kept up, its p99 <= US and
                         (open loop) the generator sent 99% of requests within US of due;
                         the JSON gets the highest rate within it (its search object)
  --refine N             after the --rate steps, up to N more steps bisecting between the
                         highest rate within --bound-p99-us and the lowest one above it that
                         was not (a step over the bound is re-run while --retries remain)

workload
  --keys N               key space size (default 100000)
  --key-size N           bytes per key (default: smallest decimal width)
  --key-prefix STR       key prefix (default none)
  --key-dist D           uniform | zipf:S (default uniform)
  --value-size V         64 | 32-512 | 64:5,256:3,1024:1 (size:weight) (default 64)
  --ratio G:S            get:set request mix (default 100:0)
  --multiget N           keys per get (default 1)
  --set-on-miss          cache-aside: a get that misses is followed by a set of its key
  --prefill              set every key once (closed loop, before the steps)
  --prefill-only         prefill and stop
  --prefill-depth N      pipeline depth for prefill (default 32)
  --seed N               RNG seed (default 1)

output
  --json PATH            write results as JSON (- for stdout)
  --label STR            a name carried into the JSON
  --stats                fetch the server's `stats` and `stats slabs` at the end into the JSON
  --server-pid PID       report how long the server's threads waited for a CPU (shared-machine noise)
  --quiet                no per-second progress
";

struct Opts {
    server: SocketAddrV4,
    conns: usize,
    depth: usize,
    rates: Vec<f64>,
    duration: f64,
    warmup: f64,
    requests: u64,
    stop_p999_us: Option<f64>,
    stop_mean_us: Option<f64>,
    retries: u32,
    stop_when_behind: bool,
    bound_p99_us: Option<f64>,
    refine: u32,
    keys: u64,
    key_size: Option<usize>,
    key_prefix: String,
    key_dist: KeyDist,
    value_size: ValueDist,
    get_weight: u32,
    set_weight: u32,
    multiget: usize,
    set_on_miss: bool,
    prefill: bool,
    prefill_only: bool,
    prefill_depth: usize,
    seed: u64,
    json: Option<String>,
    label: String,
    stats: bool,
    server_pid: Option<u32>,
    quiet: bool,
    security: Security,
}

fn die(msg: &str) -> ! {
    eprintln!("cachet-loadgen: {msg}");
    exit(2)
}

/// Accepts only loopback targets. A name other than localhost is refused
/// rather than resolved, so a typo can never send load elsewhere.
fn parse_server(s: &str) -> Result<SocketAddrV4, String> {
    let (host, port) = s.rsplit_once(':').ok_or_else(|| format!("--server wants HOST:PORT, got '{s}'"))?;
    let port: u16 = port.parse().map_err(|_| format!("bad port in '{s}'"))?;
    let ip: Ipv4Addr = if host == "localhost" {
        Ipv4Addr::LOCALHOST
    } else {
        host.parse().map_err(|_| format!("'{host}' is not an IPv4 address; only 127.0.0.0/8 and localhost are allowed"))?
    };
    if !ip.is_loopback() {
        return Err(format!("refusing target {ip}: cachet-loadgen only sends load to 127.0.0.0/8"));
    }
    if port == 0 {
        return Err("port 0 is not a server".into());
    }
    Ok(SocketAddrV4::new(ip, port))
}

fn parse_count(s: &str) -> Result<f64, String> {
    let (num, mult) = match s.chars().last() {
        Some('k') | Some('K') => (&s[..s.len() - 1], 1e3),
        Some('m') | Some('M') => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| format!("bad number '{s}'"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("'{s}' must be a positive number"));
    }
    Ok(v * mult)
}

fn parse_args() -> Opts {
    let mut o = Opts {
        server: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 11211),
        conns: 1,
        depth: 1,
        rates: Vec::new(),
        duration: 10.0,
        warmup: 0.0,
        requests: 0,
        stop_p999_us: None,
        stop_mean_us: None,
        retries: 0,
        stop_when_behind: false,
        bound_p99_us: None,
        refine: 0,
        keys: 100_000,
        key_size: None,
        key_prefix: String::new(),
        key_dist: KeyDist::Uniform,
        value_size: ValueDist::Fixed(64),
        get_weight: 100,
        set_weight: 0,
        multiget: 1,
        set_on_miss: false,
        prefill: false,
        prefill_only: false,
        prefill_depth: 32,
        seed: 1,
        json: None,
        label: String::new(),
        stats: false,
        server_pid: None,
        quiet: false,
        security: Security::Plain,
    };
    let mut tls_ca: Option<String> = None;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let flag = matches!(a, "--stop-when-behind" | "--set-on-miss" | "--prefill" | "--prefill-only" | "--stats" | "--quiet" | "--tls" | "-h" | "--help");
        let v: &str = if flag {
            ""
        } else {
            i += 1;
            match args.get(i) {
                Some(v) => v,
                None => die(&format!("{a} needs a value\n\n{USAGE}")),
            }
        };
        let num = |v: &str| -> u64 { parse_count(v).unwrap_or_else(|e| die(&format!("{a}: {e}"))) as u64 };
        let secs = |v: &str| -> f64 {
            match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 && x <= 3600.0 => x,
                _ => die(&format!("{a}: seconds must be in 0..3600, got '{v}'")),
            }
        };
        match a {
            "-h" | "--help" => {
                print!("{USAGE}");
                exit(0)
            }
            "--server" => o.server = parse_server(v).unwrap_or_else(|e| die(&e)),
            "--conns" => o.conns = num(v) as usize,
            "--depth" => o.depth = num(v) as usize,
            "--rate" => {
                o.rates = v.split(',').map(|r| parse_count(r).unwrap_or_else(|e| die(&format!("--rate: {e}")))).collect()
            }
            "--duration" => o.duration = secs(v),
            "--warmup" => o.warmup = secs(v),
            "--requests" => o.requests = num(v),
            "--stop-p999-us" => o.stop_p999_us = Some(num(v) as f64),
            "--stop-mean-us" => o.stop_mean_us = Some(num(v) as f64),
            "--retries" => o.retries = num(v) as u32,
            "--bound-p99-us" => o.bound_p99_us = Some(num(v) as f64),
            "--refine" => o.refine = v.parse().unwrap_or_else(|_| die("--refine wants a count")),
            "--stop-when-behind" => o.stop_when_behind = true,
            "--keys" => o.keys = num(v),
            "--key-size" => o.key_size = Some(num(v) as usize),
            "--key-prefix" => o.key_prefix = v.to_string(),
            "--key-dist" => o.key_dist = KeyDist::parse(v).unwrap_or_else(|e| die(&e)),
            "--value-size" => o.value_size = ValueDist::parse(v).unwrap_or_else(|e| die(&e)),
            "--ratio" => {
                let (g, s) = v.split_once(':').unwrap_or_else(|| die("--ratio wants GET:SET, e.g. 80:20"));
                o.get_weight = g.parse().unwrap_or_else(|_| die(&format!("--ratio: bad get weight '{g}'")));
                o.set_weight = s.parse().unwrap_or_else(|_| die(&format!("--ratio: bad set weight '{s}'")));
            }
            "--multiget" => o.multiget = num(v) as usize,
            "--set-on-miss" => o.set_on_miss = true,
            "--prefill" => o.prefill = true,
            "--prefill-only" => {
                o.prefill = true;
                o.prefill_only = true
            }
            "--prefill-depth" => o.prefill_depth = num(v) as usize,
            "--seed" => o.seed = v.parse().unwrap_or_else(|_| die("--seed wants an integer")),
            "--json" => o.json = Some(v.to_string()),
            "--label" => o.label = v.to_string(),
            "--stats" => o.stats = true,
            "--server-pid" => o.server_pid = Some(num(v) as u32),
            "--quiet" => o.quiet = true,
            "--tls" => o.security = Security::Tls { ca_file: None },
            "--tls-ca" => tls_ca = Some(v.to_string()),
            _ => die(&format!("unknown option '{a}'\n\n{USAGE}")),
        }
        i += 1;
    }
    if o.conns == 0 || o.conns > 16384 {
        die("--conns must be in 1..=16384");
    }
    if o.depth == 0 || o.depth > 4096 {
        die("--depth must be in 1..=4096");
    }
    if o.set_on_miss && o.multiget != 1 {
        die("--set-on-miss needs --multiget 1");
    }
    if o.refine > 0 && (o.bound_p99_us.is_none() || o.rates.is_empty()) {
        die("--refine needs --bound-p99-us and --rate steps to bracket the rate");
    }
    if o.refine > 64 {
        die("--refine must be at most 64");
    }
    if o.duration <= 0.0 {
        die("--duration must be positive: every run stops by itself");
    }
    match (&mut o.security, tls_ca) {
        (Security::Tls { ca_file }, ca) => *ca_file = ca,
        (Security::Plain, Some(_)) => die("--tls-ca needs --tls"),
        (Security::Plain, None) => {}
    }
    o
}

fn latency_json(h: &hdrhistogram::Histogram<u64>) -> Value {
    let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
    if h.len() == 0 {
        return json!(null);
    }
    json!({
        "samples": h.len(),
        "mean": (h.mean() / 100.0).round() / 10.0,
        "min": us(h.min()),
        "p50": us(h.value_at_quantile(0.50)),
        "p90": us(h.value_at_quantile(0.90)),
        "p99": us(h.value_at_quantile(0.99)),
        "p999": us(h.value_at_quantile(0.999)),
        "p9999": us(h.value_at_quantile(0.9999)),
        "max": us(h.max()),
    })
}

fn step_json(r: &StepResult) -> Value {
    let (mode, target) = match r.pace {
        Pace::Closed => ("closed", Value::Null),
        Pace::Open(rate) => ("open", json!(rate)),
    };
    let lookups = r.hits + r.misses;
    json!({
        "label": r.label,
        "mode": mode,
        "target_rate": target,
        "conns": r.conns,
        "depth": r.depth,
        "seconds": r.measured_seconds,
        "throughput": r.throughput().round(),
        "keys_per_second": r.keys_per_second().round(),
        "completed": r.completed,
        "sent": r.sent,
        "gets": r.gets,
        "sets": r.sets,
        "hits": r.hits,
        "misses": r.misses,
        "hit_ratio": if lookups > 0 { json!(r.hits as f64 / lookups as f64) } else { Value::Null },
        "stored": r.stored,
        "not_stored": r.not_stored,
        "errors": r.errors,
        "wrong_values": r.wrong_values,
        "unsent": r.unsent,
        "unanswered": r.unanswered,
        "kept_up": r.kept_up(),
        "loadgen_runqueue_wait_share": r.loadgen_runq_share,
        "server_runqueue_wait_share": r.server_runq_share,
        "server_cpu_seconds": r.server_cpu_seconds,
        "server_user_seconds": r.server_user_seconds,
        "server_sys_seconds": r.server_sys_seconds,
        "steal_share_per_cpu": r.steal_share,
        // Whole step (warm-up and drain included) over every reply received.
        "server_cpu_us_per_request": match r.server_cpu_seconds {
            Some(c) if r.sent > 0 => json!(c * 1e6 / r.sent as f64),
            _ => Value::Null,
        },
        "loadgen_cpu_seconds": r.cpu_seconds,
        // Near 1.0 means the generator, not the server, was the limit.
        "loadgen_cpu_busy": if r.wall_seconds > 0.0 { json!(r.cpu_seconds / r.wall_seconds) } else { Value::Null },
        "loadgen_us_per_request": if r.sent > 0 { json!(r.cpu_seconds * 1e6 / r.sent as f64) } else { Value::Null },
        // Charged to the server: written (due, if it waited in the backlog)
        // to the reply's kernel receive timestamp (runner.rs says why).
        "latency_us": latency_json(&r.hist),
        // Due to read by the generator: the generator's lateness included.
        "latency_due_to_read_us": latency_json(&r.hist_due),
        // The same as latency_us, the sets alone.
        "latency_sets_us": latency_json(&r.hist_sets),
        "replies_without_rx_timestamp": r.rx_unstamped,
        "generator_lag_us": if r.lag.len() > 0 {
            json!({
                "p50": r.lag.value_at_quantile(0.5) as f64 / 1000.0,
                "p99": r.lag.value_at_quantile(0.99) as f64 / 1000.0,
                "max": r.lag.max() as f64 / 1000.0,
            })
        } else { Value::Null },
    })
}

fn step_line(r: &StepResult) -> String {
    let h = &r.hist;
    let target = match r.pace {
        Pace::Closed => "closed".to_string(),
        Pace::Open(rate) => format!("open {:.0}/s", rate),
    };
    let lookups = r.hits + r.misses;
    let hit = if lookups > 0 { format!(" hit {:.4}", r.hits as f64 / lookups as f64) } else { String::new() };
    format!(
        "  {:<14} {:>10.0} req/s  mean {:>8.1}us  p50 {:>8.1}  p99 {:>8.1}  p999 {:>8.1}  max {:>9.1}  (due-to-read p99 {:.1})  gen {:.2}us/req {}{}{}{}{}",
        target,
        r.throughput(),
        h.mean() / 1000.0,
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.value_at_quantile(0.999) as f64 / 1000.0,
        h.max() as f64 / 1000.0,
        r.hist_due.value_at_quantile(0.99) as f64 / 1000.0,
        if r.sent > 0 { r.cpu_seconds * 1e6 / r.sent as f64 } else { 0.0 },
        match r.pace {
            Pace::Closed => format!("busy {:.0}%", 100.0 * r.cpu_seconds / r.wall_seconds.max(1e-9)),
            Pace::Open(_) => format!("send lag p99 {:.1}us", r.lag.value_at_quantile(0.99) as f64 / 1000.0),
        },
        hit,
        match (r.loadgen_runq_share, r.server_runq_share) {
            (Some(a), Some(b)) if a > 0.05 || b > 0.05 || r.steal_share.iter().any(|&x| x > 0.02) => format!(
                " [waited for CPU: gen {:.0}%, server {:.0}%; steal {}]",
                a * 100.0,
                b * 100.0,
                r.steal_share.iter().map(|x| format!("{:.0}%", x * 100.0)).collect::<Vec<_>>().join("/")
            ),
            (Some(a), None) if a > 0.05 => format!(" [waited for CPU: gen {:.0}%]", a * 100.0),
            _ => String::new(),
        },
        if r.errors > 0 || r.wrong_values > 0 {
            format!(" errors {} WRONG VALUES {}", r.errors, r.wrong_values)
        } else {
            String::new()
        },
        if r.kept_up() { String::new() } else { format!(" FELL-BEHIND (unsent {}, unanswered {})", r.unsent, r.unanswered) },
    )
}

/// Within --bound-p99-us: kept up with its schedule, p99 at or under the
/// bound, and (open loop) the generator itself sent 99% of requests within the
/// bound of their due time. Latency no longer counts the generator's lateness
/// (runner.rs), so a step where the generator fell behind its own schedule
/// would otherwise pass on an arrival pattern it did not deliver: bursts after
/// each of its stalls instead of the rate asked for. None without a bound.
fn within_bound(o: &Opts, r: &StepResult) -> Option<bool> {
    let bound = o.bound_p99_us?;
    let on_schedule = r.lag.len() == 0 || r.lag.value_at_quantile(0.99) as f64 / 1000.0 <= bound;
    Some(r.kept_up() && on_schedule && r.hist.len() > 0 && r.hist.value_at_quantile(0.99) as f64 / 1000.0 <= bound)
}

/// `stats` (or `stats SUB`, e.g. slabs) over a separate short-lived connection.
fn fetch_stats(addr: SocketAddrV4, connector: &Connector, sub: &str) -> Result<Value, String> {
    let mut s = connector.connect(addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let cmd = if sub.is_empty() { "stats\r\n".to_string() } else { format!("stats {sub}\r\n") };
    s.write_all(cmd.as_bytes()).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    while !buf.ends_with(b"END\r\n") {
        let n = s.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("server closed the stats connection".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 1 << 20 {
            return Err("stats reply too long".into());
        }
    }
    let mut m = serde_json::Map::new();
    for line in String::from_utf8_lossy(&buf).lines() {
        let mut it = line.splitn(3, ' ');
        if it.next() == Some("STAT") {
            if let (Some(k), Some(v)) = (it.next(), it.next()) {
                let val = v.parse::<i64>().map(Value::from).unwrap_or_else(|_| Value::from(v));
                m.insert(k.to_string(), val);
            }
        }
    }
    Ok(Value::Object(m))
}

fn main() {
    let o = parse_args();
    let key_size = o.key_size.unwrap_or_else(|| default_key_size(o.keys, &o.key_prefix));
    let keys = KeyTable::new(o.keys, key_size, &o.key_prefix).unwrap_or_else(|e| die(&e));
    let workload = Workload::new(
        keys,
        o.key_dist.clone(),
        o.value_size.clone(),
        o.get_weight,
        o.set_weight,
        o.multiget,
        o.seed,
    )
    .unwrap_or_else(|e| die(&e));
    let progress = !o.quiet;
    let connector = Connector::new(&o.security).unwrap_or_else(|e| die(&e));
    let mut runner = Runner::connect(o.server, &connector, o.conns, o.depth, workload).unwrap_or_else(|e| {
        eprintln!("cachet-loadgen: {e}");
        exit(1)
    });
    runner.server_pid = o.server_pid;
    let fail = |e: String| -> ! {
        eprintln!("cachet-loadgen: {e}");
        exit(1)
    };
    let label = if o.label.is_empty() { o.server.to_string() } else { o.label.clone() };

    let mut prefill_json = Value::Null;
    if o.prefill {
        let depth = runner.depth;
        runner.depth = o.prefill_depth.max(1);
        eprintln!("  prefill: setting {} keys ({} conns x depth {})", o.keys, o.conns, runner.depth);
        let spec = StepSpec {
            pace: Pace::Closed,
            source: Source::Fill,
            set_on_miss: false,
            duration: Duration::from_secs(600),
            warmup: Duration::ZERO,
            max_requests: o.keys,
            progress,
            label: format!("{label} prefill"),
        };
        let r = runner.run_step(&spec).unwrap_or_else(|e| fail(e));
        eprintln!(
            "  prefill: {} stored, {} not stored, {} errors in {:.1}s",
            r.stored, r.not_stored, r.errors, r.measured_seconds
        );
        if r.sets < o.keys {
            fail(format!("prefill did not finish: {} of {} sets answered within its time bound", r.sets, o.keys));
        }
        prefill_json = json!({
            "items": o.keys, "stored": r.stored, "not_stored": r.not_stored, "errors": r.errors,
            "seconds": r.measured_seconds,
        });
        runner.depth = depth;
    }

    let mut steps: Vec<Value> = Vec::new();
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut refined = 0u32;
    if !o.prefill_only {
        let step_spec = |pace: Pace| StepSpec {
            pace,
            source: Source::Mix,
            set_on_miss: o.set_on_miss,
            duration: Duration::from_secs_f64(o.duration),
            warmup: Duration::from_secs_f64(o.warmup),
            max_requests: o.requests,
            progress,
            label: label.clone(),
        };
        let paces: Vec<Pace> = if o.rates.is_empty() { vec![Pace::Closed] } else { o.rates.iter().map(|&r| Pace::Open(r)).collect() };
        let mut i = 0;
        let mut retries_left = o.retries;
        while i < paces.len() {
            let r = runner.run_step(&step_spec(paces[i])).unwrap_or_else(|e| fail(e));
            eprintln!("{}", step_line(&r));
            let mut sj = step_json(&r);
            let within = within_bound(&o, &r);
            if let Some(w) = within {
                sj["within_bound"] = json!(w);
            }
            let mean_us = r.hist.mean() / 1000.0;
            let p999_us = r.hist.value_at_quantile(0.999) as f64 / 1000.0;
            let over = o.stop_p999_us.map_or(false, |l| p999_us > l) || o.stop_mean_us.map_or(false, |l| mean_us > l);
            let limited = o.stop_p999_us.is_some() || o.stop_mean_us.is_some();
            if (limited && (over || !r.kept_up())) || (o.stop_when_behind && !r.kept_up()) {
                if retries_left > 0 {
                    retries_left -= 1;
                    eprintln!("  limit exceeded at this rate: running the step again ({retries_left} retries left)");
                    // Kept in the JSON for the record, but the retry decides.
                    sj["superseded"] = json!(true);
                    steps.push(sj);
                    continue;
                }
                if let (Pace::Open(rate), Some(w)) = (r.pace, within) {
                    outcomes.push(Outcome { rate, within: w });
                }
                steps.push(sj);
                eprintln!("  stopping: limit exceeded at this rate");
                break;
            }
            if let (Pace::Open(rate), Some(w)) = (r.pace, within) {
                outcomes.push(Outcome { rate, within: w });
            }
            steps.push(sj);
            i += 1;
        }
        // Bisect the bracket the listed steps found. A step over the bound
        // is re-run while retries remain, as a listed step that broke its
        // limit is: one noisy second must not pull the figure down.
        while refined < o.refine {
            let (Some(lo), Some(hi)) = search::bracket(&outcomes) else { break };
            let Some(rate) = search::next_rate(lo, hi) else { break };
            refined += 1;
            eprintln!("  refining: {lo:.0}/s was within p99 <= {:.0} us, {hi:.0}/s was not; trying {rate:.0}/s", o.bound_p99_us.unwrap());
            loop {
                let r = runner.run_step(&step_spec(Pace::Open(rate))).unwrap_or_else(|e| fail(e));
                eprintln!("{}", step_line(&r));
                let w = within_bound(&o, &r).unwrap_or(false);
                let mut sj = step_json(&r);
                sj["within_bound"] = json!(w);
                sj["refine"] = json!(true);
                if !w && retries_left > 0 {
                    retries_left -= 1;
                    eprintln!("  over the bound: running the step again ({retries_left} retries left)");
                    sj["superseded"] = json!(true);
                    steps.push(sj);
                    continue;
                }
                outcomes.push(Outcome { rate, within: w });
                steps.push(sj);
                break;
            }
        }
    }
    let search_json = match o.bound_p99_us {
        Some(bound) => {
            let (lo, hi) = search::bracket(&outcomes);
            json!({ "bound_p99_us": bound, "highest_rate_within": lo, "lowest_rate_over": hi, "refine_steps": refined })
        }
        None => Value::Null,
    };

    // `stats slabs` too: where an item's bytes go (its chunk size) is part
    // of the memory figures.
    let (stats, stats_slabs) = if o.stats {
        (
            fetch_stats(o.server, &connector, "").unwrap_or_else(|e| json!({ "error": e })),
            fetch_stats(o.server, &connector, "slabs").unwrap_or_else(|e| json!({ "error": e })),
        )
    } else {
        (Value::Null, Value::Null)
    };
    let out = json!({
        "tool": "cachet-loadgen",
        "label": label,
        "server": o.server.to_string(),
        "config": {
            "conns": o.conns, "depth": o.depth, "keys": o.keys, "key_size": key_size,
            "key_dist": o.key_dist.describe(), "value_size": o.value_size.describe(),
            "ratio": format!("{}:{}", o.get_weight, o.set_weight), "multiget": o.multiget,
            "set_on_miss": o.set_on_miss, "tls": connector.is_tls(),
            "duration": o.duration, "warmup": o.warmup, "requests": o.requests, "seed": o.seed,
        },
        "prefill": prefill_json,
        "steps": steps,
        "search": search_json,
        "server_stats": stats,
        "server_stats_slabs": stats_slabs,
    });
    if let Some(path) = &o.json {
        let text = serde_json::to_string_pretty(&out).unwrap();
        if path == "-" {
            println!("{text}");
        } else if let Err(e) = std::fs::write(path, text + "\n") {
            fail(format!("writing {path}: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_targets_are_accepted() {
        assert!(parse_server("127.0.0.1:11211").is_ok());
        assert!(parse_server("127.1.2.3:23000").is_ok());
        assert_eq!(parse_server("localhost:9").unwrap(), SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9));
        for bad in ["10.0.0.1:11211", "8.8.8.8:53", "192.168.1.1:1", "example.com:80", "0.0.0.0:11211", "127.0.0.1:0", "127.0.0.1"] {
            assert!(parse_server(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn counts_take_suffixes() {
        assert_eq!(parse_count("200k").unwrap(), 200_000.0);
        assert_eq!(parse_count("1.5M").unwrap(), 1_500_000.0);
        assert!(parse_count("-1").is_err());
        assert!(parse_count("abc").is_err());
    }
}
