//! cachet-sink: the cheapest server that still speaks enough memcached for the
//! load generator (get/gets with many keys, set), used to measure the
//! generator's own ceiling. A benchmark is only as good as its load source:
//! if the generator cannot outrun the servers it compares, the ratio it
//! prints is the generator's, not theirs. Every get hits with a fixed-size
//! value; there is no storage. One thread, one reply write per read.
//!
//! usage: cachet-sink PORT [VALUE_BYTES] [SECONDS] [AFTER_MS:STALL_MS|-] [COST_US]
//! Binds 127.0.0.1 only and exits after SECONDS (default 600). The optional
//! stall freezes the server once, AFTER_MS after the first request it reads
//! (not after its start, which a slow test harness could make pass before any
//! load arrives), for STALL_MS: the
//! load generator's tests use it to check that open-loop latency counts the
//! requests that came due while the server was frozen ("-" for no stall).
//! The optional COST_US makes every request take that long (measured on the
//! wall clock, so the sink can never answer more than 1e6/COST_US requests a
//! second on any machine): the tests use it to give the rate search a server
//! with a known ceiling.

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::time::{Duration, Instant};

struct Conn {
    fd: RawFd,
    rbuf: Vec<u8>,
    rlen: usize,
    wbuf: Vec<u8>,
    /// Bytes of a set's data block still to swallow.
    skip: usize,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).and_then(|p| p.parse().ok()).unwrap_or_else(|| {
        eprintln!("usage: cachet-sink PORT [VALUE_BYTES] [SECONDS] [AFTER_MS:STALL_MS|-] [COST_US]");
        std::process::exit(2)
    });
    let vlen: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(64);
    let secs: u64 = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(600);
    let stall: Option<(u64, u64)> = args.get(4).and_then(|v| {
        let (a, b) = v.split_once(':')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    });
    let cost = Duration::from_micros(args.get(5).and_then(|v| v.parse().ok()).unwrap_or(0));
    let mut first_request: Option<Instant> = None;
    let mut stalled = false;
    let value: Vec<u8> = (0..vlen).map(|i| b'a' + (i % 26) as u8).collect();
    let vlen_str = vlen.to_string();
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap_or_else(|e| {
        eprintln!("cachet-sink: bind 127.0.0.1:{port}: {e}");
        std::process::exit(1)
    });
    listener.set_nonblocking(true).unwrap();
    let lfd = listener.as_raw_fd();
    let epfd = unsafe { libc::epoll_create1(0) };
    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: u64::MAX };
    unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, lfd, &mut ev) };
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Some((after, ms)) = stall {
            if !stalled && first_request.is_some_and(|t| t.elapsed() >= Duration::from_millis(after)) {
                stalled = true;
                std::thread::sleep(Duration::from_millis(ms));
            }
        }
        let n = unsafe { libc::epoll_wait(epfd, events.as_mut_ptr(), 256, 10) };
        for i in 0..n.max(0) as usize {
            let id = events[i].u64;
            if id == u64::MAX {
                while let Ok((s, _)) = listener.accept() {
                    s.set_nonblocking(true).unwrap();
                    s.set_nodelay(true).unwrap();
                    let fd = s.into_raw_fd();
                    let slot = conns.iter().position(|c| c.is_none()).unwrap_or_else(|| {
                        conns.push(None);
                        conns.len() - 1
                    });
                    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: slot as u64 };
                    unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) };
                    conns[slot] = Some(Conn { fd, rbuf: vec![0; 256 * 1024], rlen: 0, wbuf: Vec::new(), skip: 0 });
                }
                continue;
            }
            let slot = id as usize;
            let keep = match conns[slot].as_mut() {
                Some(c) => serve(c, &value, vlen_str.as_bytes(), &mut first_request, cost),
                None => continue,
            };
            if !keep {
                let c = conns[slot].take().unwrap();
                unsafe { libc::close(c.fd) };
            }
        }
    }
}

/// Reads what is there, answers every complete request with one write.
fn serve(c: &mut Conn, value: &[u8], vlen: &[u8], first_request: &mut Option<Instant>, cost: Duration) -> bool {
    let n = unsafe { libc::recv(c.fd, c.rbuf[c.rlen..].as_mut_ptr() as *mut _, c.rbuf.len() - c.rlen, 0) };
    if n == 0 {
        return false;
    }
    if n > 0 && first_request.is_none() {
        *first_request = Some(Instant::now());
    }
    if n < 0 {
        return io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock;
    }
    c.rlen += n as usize;
    let mut pos = 0;
    loop {
        if c.skip > 0 {
            let take = c.skip.min(c.rlen - pos);
            c.skip -= take;
            pos += take;
            if c.skip > 0 {
                break;
            }
        }
        let Some(nl) = memchr::memchr(b'\n', &c.rbuf[pos..c.rlen]) else { break };
        let line = &c.rbuf[pos..pos + nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let mut toks = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
        if !cost.is_zero() {
            let t = Instant::now();
            while t.elapsed() < cost {
                std::hint::spin_loop();
            }
        }
        match toks.next() {
            Some(b"get") | Some(b"gets") => {
                for k in toks {
                    c.wbuf.extend_from_slice(b"VALUE ");
                    c.wbuf.extend_from_slice(k);
                    c.wbuf.extend_from_slice(b" 0 ");
                    c.wbuf.extend_from_slice(vlen);
                    c.wbuf.extend_from_slice(b"\r\n");
                    c.wbuf.extend_from_slice(value);
                    c.wbuf.extend_from_slice(b"\r\n");
                }
                c.wbuf.extend_from_slice(b"END\r\n");
            }
            Some(b"set") => {
                let bytes = toks.nth(3).and_then(|t| std::str::from_utf8(t).ok()?.parse::<usize>().ok());
                match bytes {
                    Some(b) => {
                        c.skip = b + 2;
                        c.wbuf.extend_from_slice(b"STORED\r\n");
                    }
                    None => c.wbuf.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n"),
                }
            }
            _ => c.wbuf.extend_from_slice(b"ERROR\r\n"),
        }
        pos += nl + 1;
    }
    c.rbuf.copy_within(pos..c.rlen, 0);
    c.rlen -= pos;
    if c.rlen == c.rbuf.len() {
        return false;
    }
    // Blocking-style write loop: the sink is a calibration tool, a slow
    // reader only slows itself.
    let mut off = 0;
    while off < c.wbuf.len() {
        let w = unsafe { libc::send(c.fd, c.wbuf[off..].as_ptr() as *const _, c.wbuf.len() - off, libc::MSG_NOSIGNAL) };
        if w < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                let mut p = libc::pollfd { fd: c.fd, events: libc::POLLOUT, revents: 0 };
                unsafe { libc::poll(&mut p, 1, 1000) };
                continue;
            }
            return false;
        }
        off += w as usize;
    }
    c.wbuf.clear();
    true
}
