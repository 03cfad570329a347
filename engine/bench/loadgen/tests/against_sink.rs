//! End-to-end checks of cachet-loadgen against cachet-sink on loopback:
//! counts add up, the open loop holds its rate, latency of a frozen server is
//! charged to every request that came due meanwhile (no coordinated
//! omission), the rate search brackets and bisects, non-loopback targets
//! are refused, and `--tls` works through a TLS terminator in front of the
//! sink and fails cleanly on a plaintext server or a certificate it does not
//! trust; the server CPU it reads is split into user and system time.
//! Ports 23050-23061, or from CACHET_LOADGEN_TEST_PORT_BASE on
//! (so that runs on a shared machine can keep to their own range).

use serde_json::Value;
use std::net::TcpStream;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

struct Sink(Child);
impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The test's port: its offset from the base (default 23050).
fn port(offset: u16) -> u16 {
    let base = std::env::var("CACHET_LOADGEN_TEST_PORT_BASE").ok().and_then(|v| v.parse().ok()).unwrap_or(23050u16);
    base + offset
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

fn sink(port: u16, stall: Option<&str>) -> Sink {
    sink_with_cost(port, stall, 0)
}

/// A sink that spends `cost_us` of wall time on every request.
fn sink_with_cost(port: u16, stall: Option<&str>, cost_us: u32) -> Sink {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cachet-sink"));
    cmd.args([port.to_string(), "32".into(), "60".into()]);
    cmd.arg(stall.unwrap_or("-"));
    cmd.arg(cost_us.to_string());
    let child = Sink(cmd.spawn().expect("start cachet-sink"));
    let t = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < Duration::from_secs(5), "sink did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

static RUN: AtomicUsize = AtomicUsize::new(0);

fn loadgen(args: &[&str]) -> (i32, Value) {
    let n = RUN.fetch_add(1, Ordering::SeqCst);
    let json = std::env::temp_dir().join(format!("cachet-loadgen-test-{}-{n}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_cachet-loadgen"))
        .args(args)
        .args(["--quiet", "--json", json.to_str().unwrap()])
        .output()
        .expect("run cachet-loadgen");
    let code = out.status.code().unwrap_or(-1);
    let v = std::fs::read_to_string(&json).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(Value::Null);
    let _ = std::fs::remove_file(&json);
    if code != 0 {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    }
    (code, v)
}

#[test]
fn closed_loop_counts_add_up() {
    let p = port(0);
    let _s = sink(p, None);
    let (code, j) = loadgen(&["--server", &addr(p), "--conns", "4", "--depth", "8", "--duration", "1",
        "--multiget", "3", "--ratio", "70:30", "--keys", "1000", "--value-size", "32"]);
    assert_eq!(code, 0);
    let st = &j["steps"][0];
    let (gets, sets, hits, misses) = (st["gets"].as_u64().unwrap(), st["sets"].as_u64().unwrap(),
        st["hits"].as_u64().unwrap(), st["misses"].as_u64().unwrap());
    assert!(gets > 100 && sets > 30, "gets {gets} sets {sets}");
    // The sink answers every key of every get.
    assert_eq!(hits, gets * 3);
    assert_eq!(misses, 0);
    assert_eq!(st["stored"].as_u64().unwrap(), sets);
    assert_eq!(st["errors"].as_u64().unwrap(), 0);
    assert_eq!(st["wrong_values"].as_u64().unwrap(), 0);
    assert_eq!(st["latency_us"]["samples"].as_u64().unwrap(), gets + sets);
    let share = sets as f64 / (gets + sets) as f64;
    assert!((0.25..0.35).contains(&share), "set share {share}");
}

#[test]
fn values_of_the_wrong_length_are_counted() {
    // The sink's values are 32 bytes; tell the generator every value is 40.
    let p = port(4);
    let _s = sink(p, None);
    let (code, j) = loadgen(&["--server", &addr(p), "--duration", "0.5", "--value-size", "40"]);
    assert_eq!(code, 0);
    let st = &j["steps"][0];
    assert!(st["gets"].as_u64().unwrap() > 0);
    assert_eq!(st["wrong_values"], st["gets"]);
}

#[test]
fn request_bound_stops_the_run() {
    let p = port(1);
    let _s = sink(p, None);
    let (code, j) = loadgen(&["--server", &addr(p), "--conns", "2", "--depth", "4", "--duration", "30",
        "--requests", "5000"]);
    assert_eq!(code, 0);
    // Exactly the bound: a run that ignored it would send far more than 5000
    // in its 30 s, and one cut short by anything else would send fewer.
    assert_eq!(j["steps"][0]["sent"].as_u64().unwrap(), 5000);
}

#[test]
fn open_loop_holds_its_rate() {
    let p = port(2);
    let _s = sink(p, None);
    let (code, j) = loadgen(&["--server", &addr(p), "--conns", "8", "--depth", "4", "--duration", "2",
        "--rate", "2000,5000"]);
    assert_eq!(code, 0);
    for (i, rate) in [2000.0, 5000.0].iter().enumerate() {
        let st = &j["steps"][i];
        let sent = st["sent"].as_f64().unwrap() + st["unsent"].as_f64().unwrap();
        // Exactly rate x duration requests come due (sent, or still waiting
        // behind a full pipeline when the step ended).
        assert!((sent - rate * 2.0).abs() <= rate * 0.02 + 2.0, "rate {rate}: sent {sent}");
        // Everything sent was answered (whether the schedule was kept is
        // the machine's business, not a property to assert).
        assert_eq!(st["unanswered"].as_u64().unwrap(), 0, "step {i}: {st}");
        assert!(st["target_rate"].as_f64().unwrap() == *rate);
    }
}

#[test]
fn a_frozen_server_shows_in_open_loop_latency() {
    // The sink freezes for 300 ms, 1 s after the first request it reads. At 2000 req/s about
    // 600 of the ~6000 requests come due during the freeze; measured from
    // their intended send time they wait up to 300 ms, so p99 must be far
    // above 100 ms. A generator that timed from the actual send would
    // report only the handful of requests in flight.
    let p = port(3);
    let _s = sink(p, Some("1000:300"));
    let (code, j) = loadgen(&["--server", &addr(p), "--conns", "4", "--depth", "1", "--duration", "3",
        "--rate", "2000"]);
    assert_eq!(code, 0);
    let lat = &j["steps"][0]["latency_us"];
    let p99 = lat["p99"].as_f64().unwrap();
    let max = lat["max"].as_f64().unwrap();
    assert!(max >= 250_000.0, "max {max} us: the freeze was not seen");
    assert!(p99 >= 100_000.0, "p99 {p99} us: requests due during the freeze were not charged");
}

#[test]
fn rate_search_brackets_and_bisects_below_the_servers_ceiling() {
    // Every request costs the sink 250 us of wall time: it cannot answer more
    // than 4000/s on any machine, so the 8000/s step can never be within the
    // bound. Whether 200/s and 1000/s are within 100 ms depends on how busy
    // the machine is (they are, unless it is badly overloaded), so the checks
    // are about the search's bookkeeping, not a particular figure: refined
    // rates lie strictly inside the bracket the listed steps found, and the
    // reported figure is the highest step within.
    let p = port(5);
    let _s = sink_with_cost(p, None, 250);
    let (code, j) = loadgen(&["--server", &addr(p), "--conns", "4", "--depth", "1", "--duration", "1",
        "--value-size", "32", "--rate", "200,1000,8000", "--bound-p99-us", "100000", "--refine", "3"]);
    assert_eq!(code, 0);
    let steps: Vec<&Value> = j["steps"].as_array().unwrap().iter().filter(|s| s["superseded"] != true).collect();
    let rate = |s: &Value| s["target_rate"].as_f64().unwrap();
    let within = |s: &Value| s["within_bound"].as_bool().expect("every step carries within_bound");
    let (listed, refined): (Vec<&Value>, Vec<&Value>) = steps.iter().partition(|s| s["refine"] != true);
    assert_eq!(listed.iter().map(|s| rate(s)).collect::<Vec<_>>(), vec![200.0, 1000.0, 8000.0]);
    let top = listed.iter().find(|s| rate(s) == 8000.0).unwrap();
    assert!(!within(top), "8000/s within the bound of a server that answers at most 4000/s: {top}");
    let lo = listed.iter().filter(|s| within(s)).map(|s| rate(s)).fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
    let search = &j["search"];
    assert_eq!(search["bound_p99_us"].as_f64(), Some(100000.0));
    assert!(steps.iter().all(|s| s["wrong_values"] == 0));
    assert_eq!(search["refine_steps"].as_u64().unwrap() as usize, refined.len());
    match lo {
        None => assert!(refined.is_empty(), "refined without a bracket: {refined:?}"),
        Some(lo) => {
            assert!(!refined.is_empty() && refined.len() <= 3, "{} refine steps", refined.len());
            let hi0 = listed.iter().filter(|s| !within(s) && rate(s) > lo).map(|s| rate(s)).fold(f64::MAX, f64::min);
            for s in &refined {
                assert!(rate(s) > lo && rate(s) < hi0, "refined rate {} outside ({lo}, {hi0})", rate(s));
            }
        }
    }
    let best = steps.iter().filter(|s| within(s)).map(|s| rate(s)).fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
    assert_eq!(search["highest_rate_within"].as_f64(), best);
    if let Some(b) = best {
        // Within means kept up: at least 95% of the rate delivered.
        assert!(b < 4000.0 / 0.95, "reported {b}/s within the bound of a 4000/s server");
        let over = search["lowest_rate_over"].as_f64().unwrap();
        assert!(over > b);
    }
}

#[test]
fn refine_needs_a_bound_and_rates() {
    assert_eq!(loadgen(&["--refine", "2", "--rate", "1000"]).0, 2);
    assert_eq!(loadgen(&["--refine", "2", "--bound-p99-us", "1000"]).0, 2);
}

#[test]
fn refuses_non_loopback_targets_and_bad_options() {
    for target in ["10.0.0.1:11211", "192.168.0.1:11211", "1.1.1.1:53", "example.org:11211"] {
        let (code, _) = loadgen(&["--server", target, "--duration", "1"]);
        assert_eq!(code, 2, "{target} was not refused");
    }
    assert_eq!(loadgen(&["--bogus"]).0, 2);
    assert_eq!(loadgen(&["--duration", "0"]).0, 2);
    assert_eq!(loadgen(&["--set-on-miss", "--multiget", "2"]).0, 2);
}

#[test]
fn a_stalled_generator_is_not_charged_to_the_server() {
    // The generator itself is stopped (SIGSTOP) for 1.5 s, 1 s into a 5 s step,
    // while the sink answers at once. The old measure, due time to the
    // generator's read, charges that second to the server (max about 1 s);
    // the server's latency, written (or due, if the server held the
    // connection's previous request) to the reply's kernel receive timestamp,
    // must not see it. 300 ms is far above anything the sink needs and far
    // below the stop.
    let p = port(10);
    let _s = sink(p, None);
    let json = std::env::temp_dir().join(format!("cachet-loadgen-test-{}-stall.json", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachet-loadgen"))
        .args(["--server", &addr(p), "--conns", "4", "--depth", "1", "--duration", "5", "--warmup", "0", "--value-size", "32",
            "--rate", "2000", "--quiet", "--json", json.to_str().unwrap()])
        .spawn()
        .expect("run cachet-loadgen");
    let pid = child.id() as libc::pid_t;
    std::thread::sleep(Duration::from_millis(1000));
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(1500));
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert!(child.wait().unwrap().success());
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let st = &j["steps"][0];
    let due_max = st["latency_due_to_read_us"]["max"].as_f64().unwrap();
    let server_max = st["latency_us"]["max"].as_f64().unwrap();
    // Relative, not absolute: the old measure must show most of the stop,
    // and the server's must show a small part of whatever the old one saw
    // (a busy machine may delay the sink too, never by most of the stop).
    assert!(due_max >= 1_000_000.0, "due-to-read max {due_max} us: the stop was not seen at all");
    assert!(server_max < due_max / 4.0, "server latency max {server_max} us against due-to-read {due_max} us: the generator's stop was charged to the server");
    assert_eq!(st["replies_without_rx_timestamp"].as_u64(), Some(0));
    assert_eq!(st["wrong_values"].as_u64(), Some(0));
}

#[test]
fn the_servers_cpu_is_split_into_user_and_system_time() {
    // The sink answers unpipelined GETs as fast as it can for 1 s: busy, and
    // over loopback most of its time is system time (its sends run the
    // generator's TCP receive). The split comes from /proc/PID/stat ticks
    // (10 ms), the total from schedstat (ns): they must agree within a few
    // ticks, and the system part must be there.
    let p = port(11);
    let s = sink(p, None);
    let pid = s.0.id().to_string();
    let (code, j) = loadgen(&["--server", &addr(p), "--server-pid", &pid, "--conns", "8", "--depth", "1", "--duration", "1",
        "--warmup", "0", "--keys", "1000", "--value-size", "32"]);
    assert_eq!(code, 0);
    let st = &j["steps"][0];
    let total = st["server_cpu_seconds"].as_f64().expect("server_cpu_seconds");
    let user = st["server_user_seconds"].as_f64().expect("server_user_seconds");
    let sys = st["server_sys_seconds"].as_f64().expect("server_sys_seconds");
    // A floor far below an idle machine's ~0.8 s: cargo runs these tests
    // side by side on two CPUs, beside whatever else the machine does.
    assert!(total > 0.05, "the sink used {total} s of CPU in a 1 s step of 8 busy connections");
    // The sink's own work is a parse and a copy; its sends and receives are
    // the kernel's: fields read the wrong way round show up here.
    assert!(sys > user, "over loopback the sink's system time should exceed its user time: user {user} s, system {sys} s");
    assert!((user + sys - total).abs() <= 0.05 + 0.2 * total,
        "user {user} s + system {sys} s against {total} s on a CPU (schedstat)");
}

/// A CA and a server certificate for 127.0.0.1 signed by it, made with the
/// openssl CLI into a fresh directory: (dir, ca.crt, srv.crt, srv.key).
fn pki(tag: &str) -> (std::path::PathBuf, String, String, String) {
    let d = std::env::temp_dir().join(format!("cachet-loadgen-pki-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(&d).output().expect("run openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=ca"]);
    run(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=localhost"]);
    std::fs::write(d.join("srv.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    run(&["x509", "-req", "-in", "srv.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "srv.crt",
        "-days", "2", "-extfile", "srv.ext"]);
    let f = |n: &str| d.join(n).to_str().unwrap().to_string();
    let (ca, crt, key) = (f("ca.crt"), f("srv.crt"), f("srv.key"));
    (d, ca, crt, key)
}

/// A TLS server in this process that forwards each connection's plaintext
/// to the sink on `backend` and back: the sink stays the server that counts,
/// and the generator's TLS path (handshake, WANT_READ/WANT_WRITE on
/// non-blocking SSL_read/SSL_write, pipelined records) is what is tested.
/// Serves until the process ends; at most `max_conns` connections.
fn tls_terminator(listen: u16, backend: u16, crt: &str, key: &str, max_conns: usize) {
    use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod};
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).unwrap();
    b.set_certificate_chain_file(crt).unwrap();
    b.set_private_key_file(key, SslFiletype::PEM).unwrap();
    let acceptor = std::sync::Arc::new(b.build());
    let listener = std::net::TcpListener::bind(("127.0.0.1", listen)).expect("bind the TLS terminator");
    std::thread::spawn(move || {
        for client in listener.incoming().take(max_conns) {
            let Ok(client) = client else { continue };
            let acceptor = acceptor.clone();
            std::thread::spawn(move || {
                let Ok(mut tls) = acceptor.accept(client) else { return };
                let Ok(mut sink) = TcpStream::connect(("127.0.0.1", backend)) else { return };
                // One thread, two directions: short read timeouts on both
                // sides take turns, so no lock is needed around the SslStream.
                tls.get_ref().set_read_timeout(Some(Duration::from_millis(1))).unwrap();
                sink.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
                let mut buf = vec![0u8; 64 * 1024];
                let deadline = Instant::now() + Duration::from_secs(60);
                while Instant::now() < deadline {
                    if !pump(&mut tls, &mut sink, &mut buf) || !pump(&mut sink, &mut tls, &mut buf) {
                        return;
                    }
                }
            });
        }
    });
}

/// Moves what one read gets from `from` to `to`; false when either side is done.
fn pump(from: &mut impl std::io::Read, to: &mut impl std::io::Write, buf: &mut [u8]) -> bool {
    use std::io::ErrorKind::{TimedOut, WouldBlock};
    match from.read(buf) {
        Ok(0) => false,
        Ok(n) => to.write_all(&buf[..n]).is_ok(),
        Err(e) => matches!(e.kind(), WouldBlock | TimedOut),
    }
}

#[test]
fn tls_round_trips_through_a_tls_server() {
    let (backend, front) = (port(6), port(7));
    let _s = sink(backend, None);
    let (dir, ca, crt, key) = pki("ok");
    tls_terminator(front, backend, &crt, &key, 8);
    let (code, j) = loadgen(&["--server", &addr(front), "--tls", "--tls-ca", &ca, "--conns", "4", "--depth", "8",
        "--duration", "1", "--multiget", "3", "--ratio", "70:30", "--keys", "1000", "--value-size", "32"]);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(code, 0);
    assert_eq!(j["config"]["tls"], Value::Bool(true));
    let st = &j["steps"][0];
    let (gets, sets) = (st["gets"].as_u64().unwrap(), st["sets"].as_u64().unwrap());
    assert!(gets > 100 && sets > 30, "gets {gets} sets {sets}");
    assert_eq!(st["hits"].as_u64().unwrap(), gets * 3);
    assert_eq!(st["stored"].as_u64().unwrap(), sets);
    assert_eq!(st["errors"].as_u64().unwrap(), 0);
    assert_eq!(st["wrong_values"].as_u64().unwrap(), 0);
    assert_eq!(st["unanswered"].as_u64().unwrap(), 0);
}

#[test]
fn tls_refuses_an_untrusted_certificate_and_a_plaintext_server() {
    let (backend, front) = (port(8), port(9));
    let _s = sink(backend, None);
    let (dir, _ca, crt, key) = pki("server");
    let (other, other_ca, _, _) = pki("other");
    tls_terminator(front, backend, &crt, &key, 4);
    // A certificate from a CA it was not told to trust: no run.
    assert_eq!(loadgen(&["--server", &addr(front), "--tls", "--tls-ca", &other_ca, "--duration", "1"]).0, 1);
    // A plaintext server: the handshake fails (or times out), no run.
    assert_eq!(loadgen(&["--server", &addr(backend), "--tls", "--duration", "1"]).0, 1);
    assert_eq!(loadgen(&["--tls-ca", &other_ca, "--duration", "1"]).0, 2, "--tls-ca without --tls");
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(other);
}
