//! One connection's byte transport: plain TCP or TLS over it (`--tls`).
//!
//! Why a layer of its own: the event loop (runner.rs) must not care whether
//! bytes are encrypted, only whether a send or receive made progress, hit the
//! end of the stream, or must wait, and for which readiness it waits. With
//! TLS a write can need the socket to become readable (a handshake message
//! in flight) and a read can need it to become writable, so "would block" is
//! reported with the direction to wait for (OpenSSL's WANT_READ and
//! WANT_WRITE), and the runner arms epoll for exactly that.
//!
//! The TLS handshake runs blocking in `connect`, before any step starts: it is
//! set-up, not load. Every byte of the measured steps goes through
//! non-blocking SSL_read/SSL_write on the runner's one thread. OpenSSL is the
//! system library (the openssl crate links libssl), the same one cachetd and
//! memcached use, so the client side costs the same on both servers.
//!
//! Concurrency: none; a Transport belongs to one connection on one thread.

use openssl::ssl::{ErrorCode, SslConnector, SslMethod, SslStream, SslVerifyMode};
use std::io::{self, Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// How the generator reaches the server.
#[derive(Clone, Debug, Default)]
pub enum Security {
    #[default]
    Plain,
    /// TLS; with a CA file the server's certificate chain is verified (its
    /// name is not: the target is always a loopback address), without one
    /// nothing is verified (a benchmark's throwaway certificate).
    Tls { ca_file: Option<String> },
}

/// What a send or receive did.
pub enum Progress {
    Bytes(usize),
    /// The peer closed the stream (TCP FIN or TLS close_notify).
    Closed,
    /// Nothing moved; wait until the socket is readable.
    WaitRead,
    /// Nothing moved; wait until the socket is writable.
    WaitWrite,
}

pub enum Transport {
    Plain(TcpStream),
    Tls(SslStream<TcpStream>),
}

/// Builds what every connection of a run shares (the TLS context).
pub struct Connector {
    tls: Option<SslConnector>,
}

impl Connector {
    pub fn new(security: &Security) -> Result<Connector, String> {
        let ca_file = match security {
            Security::Plain => return Ok(Connector { tls: None }),
            Security::Tls { ca_file } => ca_file,
        };
        let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(|e| format!("TLS context: {e}"))?;
        match ca_file {
            Some(path) => {
                b.set_ca_file(path).map_err(|e| format!("--tls-ca {path}: {e}"))?;
                b.set_verify(SslVerifyMode::PEER);
            }
            None => b.set_verify(SslVerifyMode::NONE),
        }
        Ok(Connector { tls: Some(b.build()) })
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A connected, handshaken, still blocking transport.
    pub fn connect(&self, addr: SocketAddrV4, timeout: Duration) -> Result<Transport, String> {
        let stream = TcpStream::connect_timeout(&addr.into(), timeout).map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let Some(tls) = &self.tls else { return Ok(Transport::Plain(stream)) };
        // A server that never answers the ClientHello must not hang set-up.
        stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
        let cfg = tls
            .configure()
            .map_err(|e| e.to_string())?
            .verify_hostname(false)
            .use_server_name_indication(false);
        let s = cfg.connect("localhost", stream).map_err(|e| format!("TLS handshake: {e}"))?;
        s.get_ref().set_read_timeout(None).map_err(|e| e.to_string())?;
        Ok(Transport::Tls(s))
    }
}

impl Transport {
    fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(s) => s.get_ref(),
        }
    }

    pub fn fd(&self) -> RawFd {
        self.tcp().as_raw_fd()
    }

    pub fn set_nonblocking(&self) -> io::Result<()> {
        self.tcp().set_nonblocking(true)
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.tcp().set_read_timeout(t)
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Transport::Tls(_))
    }

    /// One non-blocking send.
    pub fn send(&mut self, buf: &[u8]) -> io::Result<Progress> {
        match self {
            Transport::Plain(s) => {
                let n = unsafe { libc::send(s.as_raw_fd(), buf.as_ptr() as *const _, buf.len(), libc::MSG_NOSIGNAL) };
                if n >= 0 {
                    return Ok(Progress::Bytes(n as usize));
                }
                plain_error(io::Error::last_os_error(), Progress::WaitWrite)
            }
            // The openssl crate's contexts allow a partial write and a retry
            // from a moved buffer (SSL_MODE_ENABLE_PARTIAL_WRITE,
            // ACCEPT_MOVING_WRITE_BUFFER), so the runner's growing write
            // buffer can be handed over again after WANT_WRITE.
            Transport::Tls(s) => tls_result(s.ssl_write(buf)),
        }
    }

    /// One non-blocking receive. A plain socket returns what one recv() got;
    /// TLS returns at most one record, and may hold more decrypted bytes, so
    /// the caller repeats until WaitRead.
    /// `rx` gets the kernel's receive timestamp (CLOCK_REALTIME ns, see
    /// runner.rs) of the data's first segment on a plain connection, where
    /// the connection asked for SO_TIMESTAMPNS; 0 over TLS, whose records
    /// OpenSSL reads itself (the runner then falls back to its read time).
    pub fn recv(&mut self, buf: &mut [u8], rx: &mut u64) -> io::Result<Progress> {
        *rx = 0;
        match self {
            Transport::Plain(s) => {
                let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut _, iov_len: buf.len() };
                let mut cbuf = [0u64; 16];
                let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_iov = &mut iov;
                msg.msg_iovlen = 1;
                msg.msg_control = cbuf.as_mut_ptr() as *mut _;
                msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
                let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, 0) };
                match n {
                    0 => Ok(Progress::Closed),
                    n if n > 0 => {
                        unsafe {
                            let mut cm = libc::CMSG_FIRSTHDR(&msg);
                            while !cm.is_null() {
                                if (*cm).cmsg_level == libc::SOL_SOCKET && (*cm).cmsg_type == libc::SCM_TIMESTAMPNS {
                                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cm) as *const libc::timespec);
                                    *rx = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
                                }
                                cm = libc::CMSG_NXTHDR(&msg, cm);
                            }
                        }
                        Ok(Progress::Bytes(n as usize))
                    }
                    _ => plain_error(io::Error::last_os_error(), Progress::WaitRead),
                }
            }
            Transport::Tls(s) => tls_result(s.ssl_read(buf)),
        }
    }
}

fn plain_error(e: io::Error, wait: Progress) -> io::Result<Progress> {
    match e.kind() {
        io::ErrorKind::WouldBlock => Ok(wait),
        // The caller retries at once, as after a short read or write.
        io::ErrorKind::Interrupted => Ok(Progress::Bytes(0)),
        _ => Err(e),
    }
}

fn tls_result(r: Result<usize, openssl::ssl::Error>) -> io::Result<Progress> {
    match r {
        Ok(n) => Ok(Progress::Bytes(n)),
        Err(e) => match e.code() {
            ErrorCode::WANT_READ => Ok(Progress::WaitRead),
            ErrorCode::WANT_WRITE => Ok(Progress::WaitWrite),
            ErrorCode::ZERO_RETURN => Ok(Progress::Closed),
            // An unclean EOF (no close_notify) is a close all the same.
            ErrorCode::SYSCALL if e.io_error().is_none() => Ok(Progress::Closed),
            _ => Err(e.into_io_error().unwrap_or_else(|e| io::Error::new(io::ErrorKind::Other, e.to_string()))),
        },
    }
}

/// Blocking reads and writes, for the short-lived stats connection.
impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf),
            Transport::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(buf),
            Transport::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(s) => s.flush(),
        }
    }
}
