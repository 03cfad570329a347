//! What to send: keys, value sizes, the get:set mix, multi-get.
//!
//! Everything here is precomputed or branch-light because the generator has one
//! core to drive more than a million requests a second: keys live in one flat
//! table with a fixed stride (no per-request formatting or allocation), value
//! sizes come from a cumulative-weight table, and Zipf ranks come from
//! rand_distr's rejection-inversion sampler, which costs O(1) per draw instead
//! of a search over the key space.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// How keys are drawn from the key space.
#[derive(Clone, Debug, PartialEq)]
pub enum KeyDist {
    Uniform,
    Zipf(f64),
}

impl KeyDist {
    pub fn parse(s: &str) -> Result<KeyDist, String> {
        if s == "uniform" {
            return Ok(KeyDist::Uniform);
        }
        if let Some(rest) = s.strip_prefix("zipf:") {
            let exp: f64 = rest.parse().map_err(|_| format!("bad Zipf exponent in '{s}'"))?;
            if !(exp > 0.0 && exp.is_finite()) {
                return Err(format!("Zipf exponent must be > 0, got '{rest}'"));
            }
            return Ok(KeyDist::Zipf(exp));
        }
        Err(format!("key distribution must be 'uniform' or 'zipf:S', got '{s}'"))
    }
    pub fn describe(&self) -> String {
        match self {
            KeyDist::Uniform => "uniform".into(),
            KeyDist::Zipf(s) => format!("zipf:{s}"),
        }
    }
}

/// Value sizes: a fixed size, a uniform range, or weighted sizes.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueDist {
    Fixed(usize),
    Range(usize, usize),
    /// (size, cumulative weight); the last cumulative weight is the total.
    Weighted(Vec<(usize, u64)>),
}

impl ValueDist {
    /// "64", "32-512", or "64:5,256:3,1024:1" (size:weight).
    pub fn parse(s: &str) -> Result<ValueDist, String> {
        let num = |t: &str| -> Result<usize, String> {
            t.trim().parse::<usize>().map_err(|_| format!("bad value size '{t}' in '{s}'"))
        };
        let d = if s.contains(':') {
            let mut acc = 0u64;
            let mut v = Vec::new();
            for part in s.split(',') {
                let (size, w) = part
                    .split_once(':')
                    .ok_or_else(|| format!("value size list entries are size:weight, got '{part}'"))?;
                let w: u64 = w.trim().parse().map_err(|_| format!("bad weight '{w}' in '{s}'"))?;
                if w == 0 {
                    return Err(format!("weight 0 in '{s}' is meaningless"));
                }
                acc += w;
                v.push((num(size)?, acc));
            }
            ValueDist::Weighted(v)
        } else if let Some((a, b)) = s.split_once('-') {
            let (a, b) = (num(a)?, num(b)?);
            if a > b {
                return Err(format!("value size range '{s}' is reversed"));
            }
            ValueDist::Range(a, b)
        } else {
            ValueDist::Fixed(num(s)?)
        };
        if d.max() > 64 << 20 {
            return Err(format!("value size in '{s}' is over 64 MiB"));
        }
        Ok(d)
    }
    pub fn max(&self) -> usize {
        match self {
            ValueDist::Fixed(n) => *n,
            ValueDist::Range(_, b) => *b,
            ValueDist::Weighted(v) => v.iter().map(|e| e.0).max().unwrap_or(0),
        }
    }
    pub fn sample(&self, rng: &mut SmallRng) -> usize {
        match self {
            ValueDist::Fixed(n) => *n,
            ValueDist::Range(a, b) => rng.gen_range(*a..=*b),
            ValueDist::Weighted(v) => {
                let total = v.last().unwrap().1;
                let r = rng.gen_range(0..total);
                v.iter().find(|e| r < e.1).unwrap().0
            }
        }
    }
    pub fn describe(&self) -> String {
        match self {
            ValueDist::Fixed(n) => n.to_string(),
            ValueDist::Range(a, b) => format!("{a}-{b}"),
            ValueDist::Weighted(v) => {
                let mut prev = 0;
                v.iter()
                    .map(|&(s, c)| {
                        let w = c - prev;
                        prev = c;
                        format!("{s}:{w}")
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            }
        }
    }
}

/// The key table: key i is bytes [i*stride, i*stride+stride).
pub struct KeyTable {
    bytes: Vec<u8>,
    stride: usize,
    count: u64,
}

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

impl KeyTable {
    /// Keys are `prefix` followed by the key's index written with a fixed
    /// width so every key has exactly `size` bytes: in decimal when it fits
    /// (readable in `stats cachedump`-style debugging), otherwise base 62
    /// (so 4-byte keys still give 14.7M distinct keys).
    pub fn new(count: u64, size: usize, prefix: &str) -> Result<KeyTable, String> {
        if count == 0 {
            return Err("key space must hold at least one key".into());
        }
        if size > 250 {
            return Err(format!("key size {size} is over memcached's 250-byte limit"));
        }
        if prefix.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err("key prefix may not contain spaces or control characters".into());
        }
        if size <= prefix.len() {
            return Err(format!("key size {size} leaves no room after prefix '{prefix}'"));
        }
        let width = size - prefix.len();
        let fits = |base: u64| -> bool {
            let mut cap: u128 = 1;
            for _ in 0..width {
                cap = cap.saturating_mul(base as u128);
            }
            cap >= count as u128
        };
        let base: u64 = if fits(10) {
            10
        } else if fits(62) {
            62
        } else {
            return Err(format!("{count} distinct keys do not fit in {size}-byte keys with prefix '{prefix}'"));
        };
        let mut bytes = vec![0u8; (count as usize) * size];
        for i in 0..count {
            let k = &mut bytes[(i as usize) * size..(i as usize + 1) * size];
            k[..prefix.len()].copy_from_slice(prefix.as_bytes());
            let mut v = i;
            for pos in (prefix.len()..size).rev() {
                k[pos] = BASE62[(v % base) as usize];
                v /= base;
            }
        }
        Ok(KeyTable { bytes, stride: size, count })
    }
    #[inline]
    pub fn key(&self, i: u64) -> &[u8] {
        let s = i as usize * self.stride;
        &self.bytes[s..s + self.stride]
    }
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// Smallest decimal key size that holds `count` keys after `prefix`.
pub fn default_key_size(count: u64, prefix: &str) -> usize {
    let digits = count.saturating_sub(1).max(1).to_string().len();
    prefix.len() + digits
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Get,
    Set,
}

/// Chooses and encodes the next request.
pub struct Workload {
    pub keys: KeyTable,
    zipf: Option<Zipf<f64>>,
    pub values: ValueDist,
    /// Probability of a GET, scaled to 2^32 so the choice is one compare.
    get_threshold: u64,
    pub get_weight: u32,
    pub set_weight: u32,
    pub multiget: usize,
    pub rng: SmallRng,
    value_bytes: Vec<u8>,
    /// Next key for sequential fills (prefill sets every key exactly once).
    pub fill_cursor: u64,
}

impl Workload {
    pub fn new(
        keys: KeyTable,
        key_dist: KeyDist,
        values: ValueDist,
        get_weight: u32,
        set_weight: u32,
        multiget: usize,
        seed: u64,
    ) -> Result<Workload, String> {
        if get_weight == 0 && set_weight == 0 {
            return Err("get:set ratio 0:0 sends nothing".into());
        }
        if multiget == 0 || multiget > 1000 {
            return Err("keys per get must be in 1..=1000".into());
        }
        let zipf = match key_dist {
            KeyDist::Uniform => None,
            KeyDist::Zipf(s) => Some(Zipf::new(keys.count(), s).map_err(|e| format!("Zipf: {e}"))?),
        };
        let total = get_weight as u64 + set_weight as u64;
        let get_threshold = ((get_weight as u128) << 32) as u64 / total.max(1);
        // Printable, and varying so a server that compresses or dedups gains nothing.
        let value_bytes: Vec<u8> = (0..values.max()).map(|i| b'a' + (i % 26) as u8).collect();
        Ok(Workload {
            keys,
            zipf,
            values,
            get_threshold,
            get_weight,
            set_weight,
            multiget,
            rng: SmallRng::seed_from_u64(seed),
            value_bytes,
            fill_cursor: 0,
        })
    }

    /// The one value length every set uses, when sizes are fixed.
    pub fn fixed_value_len(&self) -> Option<u64> {
        match self.values {
            ValueDist::Fixed(n) => Some(n as u64),
            _ => None,
        }
    }

    #[inline]
    fn pick_key(&mut self) -> u64 {
        match &self.zipf {
            None => self.rng.gen_range(0..self.keys.count()),
            // Zipf ranks are 1..=n; rank 1 is the hottest key.
            Some(z) => (z.sample(&mut self.rng) as u64 - 1).min(self.keys.count() - 1),
        }
    }

    #[inline]
    fn pick_kind(&mut self) -> OpKind {
        if self.set_weight == 0 {
            return OpKind::Get;
        }
        if self.get_weight == 0 {
            return OpKind::Set;
        }
        if (self.rng.gen::<u32>() as u64) < self.get_threshold {
            OpKind::Get
        } else {
            OpKind::Set
        }
    }

    /// Appends the next request of the mix to `out`; returns its kind, how
    /// many keys it asks for and the (first) key's index.
    #[inline]
    pub fn encode_next(&mut self, out: &mut Vec<u8>) -> (OpKind, u32, u64) {
        match self.pick_kind() {
            OpKind::Get => {
                out.extend_from_slice(b"get");
                let mut first = 0;
                for i in 0..self.multiget {
                    let k = self.pick_key();
                    if i == 0 {
                        first = k;
                    }
                    out.push(b' ');
                    out.extend_from_slice(self.keys.key(k));
                }
                out.extend_from_slice(b"\r\n");
                (OpKind::Get, self.multiget as u32, first)
            }
            OpKind::Set => {
                let k = self.pick_key();
                self.encode_set(k, out);
                (OpKind::Set, 1, k)
            }
        }
    }

    /// Appends a set of the next key in order (for prefill).
    pub fn encode_fill(&mut self, out: &mut Vec<u8>) -> (OpKind, u32, u64) {
        let k = self.fill_cursor % self.keys.count();
        self.fill_cursor += 1;
        self.encode_set(k, out);
        (OpKind::Set, 1, k)
    }

    /// Appends a set of key `k` (cache-aside fill after a miss).
    #[inline]
    pub fn encode_set(&mut self, k: u64, out: &mut Vec<u8>) {
        let len = self.values.sample(&mut self.rng);
        out.extend_from_slice(b"set ");
        out.extend_from_slice(self.keys.key(k));
        out.extend_from_slice(b" 0 0 ");
        push_decimal(out, len as u64);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.value_bytes[..len]);
        out.extend_from_slice(b"\r\n");
    }
}

/// Appends `v` in decimal without allocating.
#[inline]
pub fn push_decimal(out: &mut Vec<u8>, mut v: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_have_fixed_size_and_are_distinct() {
        let t = KeyTable::new(1000, 4, "").unwrap();
        assert_eq!(t.key(0), b"0000");
        assert_eq!(t.key(999), b"0999");
        let t = KeyTable::new(1_000_000, 4, "").unwrap(); // needs base 62
        let mut seen = std::collections::HashSet::new();
        for i in 0..t.count() {
            assert_eq!(t.key(i).len(), 4);
            assert!(seen.insert(t.key(i).to_vec()), "duplicate key at {i}");
        }
        assert!(KeyTable::new(20_000_000, 4, "").is_err());
        assert!(KeyTable::new(10, 2, "ab").is_err());
        assert!(KeyTable::new(10, 5, "a b").is_err());
    }

    #[test]
    fn value_dists_parse_and_sample_in_range() {
        let mut rng = SmallRng::seed_from_u64(1);
        assert_eq!(ValueDist::parse("64").unwrap(), ValueDist::Fixed(64));
        let r = ValueDist::parse("10-20").unwrap();
        for _ in 0..1000 {
            let s = r.sample(&mut rng);
            assert!((10..=20).contains(&s));
        }
        let w = ValueDist::parse("8:1,100:3").unwrap();
        assert_eq!(w.describe(), "8:1,100:3");
        let mut n100 = 0;
        for _ in 0..10000 {
            match w.sample(&mut rng) {
                100 => n100 += 1,
                8 => {}
                x => panic!("unexpected size {x}"),
            }
        }
        assert!((7000..8000).contains(&n100), "weight 3:1 gave {n100}/10000");
        assert!(ValueDist::parse("20-10").is_err());
        assert!(ValueDist::parse("8:0").is_err());
        assert!(ValueDist::parse("x").is_err());
    }

    #[test]
    fn zipf_is_skewed_and_ratio_is_respected() {
        let keys = KeyTable::new(10_000, 8, "k").unwrap();
        let mut w = Workload::new(keys, KeyDist::Zipf(0.99), ValueDist::Fixed(10), 80, 20, 1, 7).unwrap();
        let (mut top, mut gets, n) = (0, 0, 100_000);
        let mut buf = Vec::new();
        for _ in 0..n {
            buf.clear();
            let (kind, _, _) = w.encode_next(&mut buf);
            if kind == OpKind::Get {
                gets += 1;
                if &buf[4..12] < b"k0000100".as_slice() {
                    top += 1;
                }
            }
        }
        // Under Zipf(0.99) over 10k keys the top 1% of keys draw about half the requests.
        assert!(top * 100 / gets > 35, "top 100 keys got only {top}/{gets}");
        assert!((78_000..82_000).contains(&gets), "80:20 mix gave {gets} gets of {n}");
    }

    #[test]
    fn encodes_memcached_requests() {
        let keys = KeyTable::new(10, 3, "k").unwrap();
        let mut w = Workload::new(keys, KeyDist::Uniform, ValueDist::Fixed(3), 0, 1, 1, 1).unwrap();
        let mut buf = Vec::new();
        w.encode_fill(&mut buf);
        assert_eq!(buf, b"set k00 0 0 3\r\nabc\r\n");
        let keys = KeyTable::new(10, 3, "k").unwrap();
        let mut w = Workload::new(keys, KeyDist::Uniform, ValueDist::Fixed(3), 1, 0, 3, 1).unwrap();
        buf.clear();
        assert_eq!(w.encode_next(&mut buf).0, OpKind::Get);
        assert!(buf.starts_with(b"get k0") && buf.ends_with(b"\r\n") && buf.len() == 3 + 3 * 4 + 2);
    }
}
