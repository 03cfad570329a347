//! End-to-end checks of cachet-loadgen against cachet-sink on loopback:
//! counts add up, the open loop holds its rate, latency of a frozen server is
//! charged to every request that came due meanwhile (no coordinated
//! omission), and non-loopback targets are refused. Ports 23050-23059.

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

fn sink(port: u16, stall: Option<&str>) -> Sink {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cachet-sink"));
    cmd.args([port.to_string(), "32".into(), "60".into()]);
    if let Some(s) = stall {
        cmd.arg(s);
    }
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
    let _s = sink(23050, None);
    let (code, j) = loadgen(&["--server", "127.0.0.1:23050", "--conns", "4", "--depth", "8", "--duration", "1",
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
    let _s = sink(23054, None);
    let (code, j) = loadgen(&["--server", "127.0.0.1:23054", "--duration", "0.5", "--value-size", "40"]);
    assert_eq!(code, 0);
    let st = &j["steps"][0];
    assert!(st["gets"].as_u64().unwrap() > 0);
    assert_eq!(st["wrong_values"], st["gets"]);
}

#[test]
fn request_bound_stops_the_run() {
    let _s = sink(23051, None);
    let (code, j) = loadgen(&["--server", "127.0.0.1:23051", "--conns", "2", "--depth", "4", "--duration", "30",
        "--requests", "5000"]);
    assert_eq!(code, 0);
    // Exactly the bound: a run that ignored it would send far more than 5000
    // in its 30 s, and one cut short by anything else would send fewer.
    assert_eq!(j["steps"][0]["sent"].as_u64().unwrap(), 5000);
}

#[test]
fn open_loop_holds_its_rate() {
    let _s = sink(23052, None);
    let (code, j) = loadgen(&["--server", "127.0.0.1:23052", "--conns", "8", "--depth", "4", "--duration", "2",
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
    let _s = sink(23053, Some("1000:300"));
    let (code, j) = loadgen(&["--server", "127.0.0.1:23053", "--conns", "4", "--depth", "1", "--duration", "3",
        "--rate", "2000"]);
    assert_eq!(code, 0);
    let lat = &j["steps"][0]["latency_us"];
    let p99 = lat["p99"].as_f64().unwrap();
    let max = lat["max"].as_f64().unwrap();
    assert!(max >= 250_000.0, "max {max} us: the freeze was not seen");
    assert!(p99 >= 100_000.0, "p99 {p99} us: requests due during the freeze were not charged");
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
