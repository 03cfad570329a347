//! Parsing memcached ASCII replies as they stream in.
//!
//! Replies are matched to requests strictly in order (the protocol guarantees
//! it per connection), so the parser only needs to know how many keys the
//! oldest outstanding request asked for. Value bodies are skipped by length,
//! never buffered, so a reply of any size costs the same small read buffer.

use memchr::memchr;

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// get: END after zero or more VALUE blocks; set: STORED.
    Ok,
    /// set: NOT_STORED / EXISTS / NOT_FOUND.
    NotStored,
    /// SERVER_ERROR / CLIENT_ERROR / ERROR.
    Error,
}

/// One reply fully received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: Status,
    /// VALUE blocks seen (get only).
    pub values: u32,
    /// VALUE blocks the caller's check rejected (another key, wrong length).
    pub wrong: u32,
}

/// Incremental reply parser for one connection.
#[derive(Default)]
pub struct Parser {
    /// Bytes of the current value body (plus its CRLF) still to skip.
    skip: usize,
    /// VALUE blocks seen so far in the current get reply.
    values: u32,
    wrong: u32,
}

impl Parser {
    /// Consumes whole reply lines from `buf`; calls `done` for each finished
    /// reply. `check(i, key, bytes)` judges each VALUE header, `i` being the
    /// number of replies this call finished before it (so the caller can
    /// find the request it answers). Returns the number of bytes consumed,
    /// or an error for a reply that is not memcached protocol (the caller
    /// drops the connection).
    pub fn feed(
        &mut self,
        buf: &[u8],
        mut check: impl FnMut(usize, &[u8], u64) -> bool,
        mut done: impl FnMut(Reply),
    ) -> Result<usize, String> {
        let mut pos = 0;
        let mut finished = 0usize;
        loop {
            if self.skip > 0 {
                let take = self.skip.min(buf.len() - pos);
                self.skip -= take;
                pos += take;
                if self.skip > 0 {
                    return Ok(pos);
                }
            }
            let nl = match memchr(b'\n', &buf[pos..]) {
                Some(i) => pos + i,
                None => {
                    if buf.len() - pos > 4096 {
                        return Err("reply line longer than 4096 bytes".into());
                    }
                    return Ok(pos);
                }
            };
            let line = &buf[pos..nl];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            pos = nl + 1;
            let status = match line.first() {
                Some(b'V') if line.starts_with(b"VALUE ") => {
                    // VALUE <key> <flags> <bytes> [<cas>]
                    let mut it = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
                    let key = it.nth(1).unwrap_or(b"");
                    let bytes = it.nth(1).and_then(parse_decimal).ok_or_else(|| {
                        format!("malformed VALUE line: {:?}", String::from_utf8_lossy(line))
                    })?;
                    self.skip = bytes as usize + 2;
                    self.values += 1;
                    if !check(finished, key, bytes) {
                        self.wrong += 1;
                    }
                    continue;
                }
                Some(b'E') if line == b"END" => Status::Ok,
                Some(b'S') if line == b"STORED" => Status::Ok,
                _ if line == b"NOT_STORED" || line == b"EXISTS" || line == b"NOT_FOUND" => Status::NotStored,
                _ if line == b"ERROR" || line.starts_with(b"SERVER_ERROR") || line.starts_with(b"CLIENT_ERROR") => {
                    // An error ends the request; values already counted are dropped.
                    self.values = 0;
                    Status::Error
                }
                _ => {
                    return Err(format!(
                        "unexpected reply line: {:?}",
                        String::from_utf8_lossy(&line[..line.len().min(80)])
                    ))
                }
            };
            done(Reply { status, values: self.values, wrong: self.wrong });
            finished += 1;
            self.values = 0;
            self.wrong = 0;
        }
    }
}

fn parse_decimal(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 19 {
        return None;
    }
    let mut v = 0u64;
    for &b in t {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (b - b'0') as u64;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(p: &mut Parser, chunks: &[&[u8]]) -> Vec<Reply> {
        let mut out = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        for c in chunks {
            pending.extend_from_slice(c);
            let n = p.feed(&pending, |_, k, _| k != b"bad", |r| out.push(r)).unwrap();
            pending.drain(..n);
        }
        assert!(pending.is_empty(), "left over: {:?}", pending);
        out
    }

    #[test]
    fn parses_hits_misses_and_stores_across_split_reads() {
        let stream: &[u8] =
            b"VALUE k1 0 5\r\nhello\r\nVALUE k2 7 3 99\r\nEND\r\nEND\r\nEND\r\nSTORED\r\nNOT_STORED\r\nSERVER_ERROR out of memory storing object\r\n";
        let want = vec![
            Reply { status: Status::Ok, values: 2, wrong: 0 },
            Reply { status: Status::Ok, values: 0, wrong: 0 },
            Reply { status: Status::Ok, values: 0, wrong: 0 },
            Reply { status: Status::NotStored, values: 0, wrong: 0 },
            Reply { status: Status::Error, values: 0, wrong: 0 },
        ];
        // Whole, and split at every byte boundary.
        assert_eq!(run(&mut Parser::default(), &[stream]), want);
        for cut in 1..stream.len() {
            let got = run(&mut Parser::default(), &[&stream[..cut], &stream[cut..]]);
            assert_eq!(got, want, "split at {cut}");
        }
    }

    #[test]
    fn value_body_containing_end_is_skipped_by_length() {
        let got = run(&mut Parser::default(), &[b"VALUE k 0 7\r\nEND\r\nxx\r\nEND\r\n"]);
        assert_eq!(got, vec![Reply { status: Status::Ok, values: 1, wrong: 0 }]);
    }

    #[test]
    fn check_sees_each_value_with_the_index_of_its_reply() {
        let mut seen = Vec::new();
        let mut out = Vec::new();
        let stream = b"VALUE a 0 1\r\nx\r\nEND\r\nSTORED\r\nVALUE bad 0 1\r\ny\r\nVALUE c 0 2\r\nzz\r\nEND\r\n";
        Parser::default()
            .feed(stream, |i, k, n| { seen.push((i, k.to_vec(), n)); k != b"bad" }, |r| out.push(r))
            .unwrap();
        assert_eq!(seen, vec![(0, b"a".to_vec(), 1), (2, b"bad".to_vec(), 1), (2, b"c".to_vec(), 2)]);
        assert_eq!(out[2], Reply { status: Status::Ok, values: 2, wrong: 1 });
        assert_eq!(out[0].wrong, 0);
    }

    #[test]
    fn rejects_garbage() {
        assert!(Parser::default().feed(b"HELLO\r\n", |_, _, _| true, |_| {}).is_err());
        assert!(Parser::default().feed(b"VALUE k 0 x\r\n", |_, _, _| true, |_| {}).is_err());
    }
}
