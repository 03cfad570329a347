"""Meta protocol (mg/ms/md/ma/mn/me) over a raw socket.

Expectations follow memcached's doc/protocol.txt and are memcached 1.6.45's
real replies (these tests pass against it: make conformance CACHETD=<memcached>).
Return flags are compared as a set: memcached echoes them in request order, but
W/X/Z come in an order that even memcached does not keep stable, and no client
depends on it.
"""
import base64

import pytest

from conftest import advance_clock


class Reply:
    def __init__(self, code, flags, value=None):
        self.code, self.flags, self.value = code, flags, value

    def __repr__(self):
        return f"Reply({self.code!r}, {self.flags!r}, {self.value!r})"


def read_reply(c):
    line = c.line().decode()
    parts = line.split()
    code = parts[0] if parts else ""
    value = None
    rest = parts[1:]
    if code == "VA":
        size = int(parts[1])
        rest = parts[2:]
        value = c.exact(size)
        assert c.exact(2) == b"\r\n"
    elif code in ("CLIENT_ERROR", "SERVER_ERROR", "ERROR", "ME"):
        return Reply(code, {}, line)
    flags = {}
    for tok in rest:
        flags[tok[0]] = tok[1:]
    return Reply(code, flags, value)


def meta(c, line, data=None):
    payload = line.encode() + b"\r\n"
    if data is not None:
        payload += data + b"\r\n"
    c.send(payload)
    return read_reply(c)


def ms(c, key, data, flags=""):
    if isinstance(data, str):
        data = data.encode()
    return meta(c, f"ms {key} {len(data)}{(' ' + flags) if flags else ''}", data)


@pytest.fixture
def c(server):
    with server.conn() as conn:
        yield conn


def gets_cas(c, key):
    return c.values(f"gets {key}")[key][2]


# ---- mn / me -----------------------------------------------------------------------
def test_mn(c):
    assert c.cmd("mn") == b"MN"


def test_me_hit_and_miss(c, key):
    assert ms(c, key, "debug").code == "HD"
    line = c.cmd(f"me {key}").decode()
    assert line.startswith(f"ME {key} "), line
    fields = dict(tok.split("=", 1) for tok in line.split()[2:])
    for name in ("exp", "la", "cas", "fetch", "cls", "size"):
        assert name in fields, f"me lacks {name}: {line}"
    assert int(fields["cas"]) == gets_cas(c, key)
    # As memcached: the slab class the item lives in, and the whole item's size
    # (header, key, value and its CRLF), so it always exceeds the value's length.
    assert int(fields["cls"]) >= 1
    assert int(fields["size"]) > len("debug") + len(key)
    big = "v" * 5000
    assert ms(c, key + "-big", big).code == "HD"
    big_fields = dict(tok.split("=", 1) for tok in c.cmd(f"me {key}-big").decode().split()[2:])
    assert int(big_fields["cls"]) > int(fields["cls"]), "a larger item lives in a larger class"
    assert int(big_fields["size"]) > len(big)
    assert c.cmd(f"me {key}-missing") == b"EN"


def test_me_base64_key(c, key):
    # me reads b only as its first flag and names the key as the item holds
    # it: text for a text key, base64 for one stored with b (memcached 1.6.45)
    b64 = base64.b64encode(key.encode()).decode()
    assert ms(c, key, "debug").code == "HD"
    assert c.cmd(f"me {b64} b x").decode().startswith(f"ME {key} ")
    assert c.cmd(f"me {b64} x b") == b"EN", "b after another flag is not read"
    binary = b"\x00\xff" + key.encode()
    bin64 = base64.b64encode(binary).decode()
    assert ms(c, bin64, "debug", "b").code == "HD"
    assert c.cmd(f"me {bin64} b x").decode().startswith(f"ME {bin64} ")
    # a key b cannot decode: me's own error text
    assert c.cmd("me abc b x") == b"CLIENT_ERROR bad command line format"


# ---- mg ------------------------------------------------------------------------------
def test_mg_miss_and_quiet(c, key):
    assert meta(c, f"mg {key} v").code == "EN"
    # quiet: a miss says nothing; mn marks the end of the pipeline
    c.send(f"mg {key} v q\r\nmn\r\n".encode())
    assert c.line() == b"MN"
    assert ms(c, key, "here").code == "HD"
    c.send(f"mg {key} v q\r\nmg {key}-nope v q\r\nmn\r\n".encode())
    r = read_reply(c)
    assert (r.code, r.value) == ("VA", b"here"), "quiet mode still returns hits"
    assert c.line() == b"MN"


def test_mg_no_flags_is_hd(c, key):
    ms(c, key, "v")
    r = meta(c, f"mg {key}")
    assert (r.code, r.flags) == ("HD", {})


def test_mg_return_flags(c, key):
    assert ms(c, key, "hi", "T0 F5").code == "HD"
    cas = gets_cas(c, key)
    r = meta(c, f"mg {key} s v t f c k O123 h l")
    assert r.code == "VA" and r.value == b"hi"
    assert r.flags["s"] == "2"
    assert r.flags["t"] == "-1", "no TTL is reported as -1"
    assert r.flags["f"] == "5"
    assert int(r.flags["c"]) == cas
    assert r.flags["k"] == key
    assert r.flags["O"] == "123"
    assert r.flags["h"] == "1", "the gets above counted as a hit"
    assert int(r.flags["l"]) <= 2
    r = meta(c, f"mg {key} h")
    assert r.flags["h"] == "1"


def test_mg_hit_flag_before_first_fetch(c, key):
    ms(c, key, "x")
    assert meta(c, f"mg {key} h").flags["h"] == "0"
    assert meta(c, f"mg {key} h").flags["h"] == "1"


def test_mg_ttl_reported_and_updated_with_T(c, key):
    ms(c, key, "x", "T100")
    assert 98 <= int(meta(c, f"mg {key} t").flags["t"]) <= 100
    r = meta(c, f"mg {key} T5 t")
    assert r.code == "HD" and 3 <= int(r.flags["t"]) <= 5
    assert 3 <= int(meta(c, f"mg {key} t").flags["t"]) <= 5


@pytest.mark.test_hooks
def test_mg_T_replaces_the_ttl(start_server):
    with start_server().conn() as c:
        ms(c, "k", "x", "T100")
        ms(c, "other", "y", "T100")
        assert meta(c, "mg k T1").code == "HD"
        advance_clock(c, 2)
        assert meta(c, "mg k v").code == "EN", "T on mg replaced the TTL with 1 s"
        assert meta(c, "mg other v").code == "VA", "an item without T kept its 100 s"


def test_mg_base64_key(c):
    raw_key = b"\x00bin\xffkey \r\n"
    b64 = base64.b64encode(raw_key).decode()
    r = ms(c, b64, "bin", "b")
    assert r.code == "HD"
    r = meta(c, f"mg {b64} b k v")
    assert r.code == "VA" and r.value == b"bin"
    assert r.flags["k"] == b64 and "b" in r.flags, "a binary key comes back base64 with the b flag"
    assert meta(c, f"md {b64} b").code == "HD"
    assert meta(c, f"mg {b64} b v").code == "EN"


def test_mg_bad_base64_key(c):
    assert meta(c, "mg not*base64 b v").code == "CLIENT_ERROR"
    assert c.cmd("mn") == b"MN"


def test_mg_vivify_on_miss(c, key):
    r = meta(c, f"mg {key} N30 c t v")
    assert r.code == "VA" and r.value == b"" and "W" in r.flags, "first miss wins the right to recache"
    assert 28 <= int(r.flags["t"]) <= 30
    r2 = meta(c, f"mg {key} N30 c t v")
    assert r2.code == "VA" and "Z" in r2.flags and "W" not in r2.flags, "later readers see a win already sent"
    # the winner fills it in; readers then see the value without W/Z
    assert ms(c, key, "filled", f"T60 C{r.flags['c']}").code == "HD"
    r3 = meta(c, f"mg {key} v")
    assert r3.value == b"filled" and not ({"W", "Z"} & set(r3.flags))


def test_mg_recache_R(c, key):
    ms(c, key, "abc", "T100")
    r = meta(c, f"mg {key} R30 v")
    assert r.value == b"abc" and "W" not in r.flags, "TTL 100 is above R30"
    r = meta(c, f"mg {key} R200 v")
    assert "W" in r.flags, "TTL below R200 hands out one win"
    r = meta(c, f"mg {key} R200 v")
    assert "Z" in r.flags and "W" not in r.flags


def test_mg_recache_R_after_T_in_the_past(c, key):
    # T-1 earlier on the line puts the expiry in the past: below any R, so
    # this reader wins the recache; R0 never wins (memcached compares times)
    ms(c, key, "abc")
    r = meta(c, f"mg {key} T-1 R30 v")
    assert r.value == b"abc" and "W" in r.flags
    ms(c, key, "abc")
    r = meta(c, f"mg {key} T-1 R0 v")
    assert r.value == b"abc" and not ({"W", "Z"} & set(r.flags))


def test_mg_opaque_on_miss_with_k(c, key):
    r = meta(c, f"mg {key} O77 k v")
    assert r.code == "EN"


def test_mg_key_too_long(c):
    assert meta(c, "mg " + "k" * 251 + " v").code == "CLIENT_ERROR"
    assert meta(c, "mg " + "k" * 250 + " v").code == "EN"


def test_mg_E_sets_cas_of_vivified_item(c, key):
    r = meta(c, f"mg {key} N30 E777 c")
    assert r.code in ("HD", "VA") and r.flags["c"] == "777"
    assert gets_cas(c, key) == 777


# ---- ms --------------------------------------------------------------------------------
def test_ms_set_with_flags_and_ttl(c, key):
    r = ms(c, key, "value", "T60 F9 c k O5")
    assert r.code == "HD"
    assert int(r.flags["c"]) == gets_cas(c, key)
    assert r.flags["k"] == key and r.flags["O"] == "5"
    assert c.values(f"get {key}") == {key: (9, b"value", None)}
    assert 58 <= int(meta(c, f"mg {key} t").flags["t"]) <= 60


def test_ms_modes(c, key):
    assert ms(c, key, "a", "MR").code == "NS", "replace of a missing key"
    assert ms(c, key, "a", "MA").code == "NS", "append to a missing key"
    assert ms(c, key, "a", "MP").code == "NS", "prepend to a missing key"
    assert ms(c, key, "mid", "ME").code == "HD", "add of a missing key"
    assert ms(c, key, "again", "ME").code == "NS", "add of an existing key"
    assert ms(c, key, "-end", "MA").code == "HD"
    assert ms(c, key, "start-", "MP").code == "HD"
    assert meta(c, f"mg {key} v").value == b"start-mid-end"
    assert ms(c, key, "replaced", "MR").code == "HD"
    assert ms(c, key, "set", "MS").code == "HD"
    assert meta(c, f"mg {key} v").value == b"set"


def test_ms_invalid_mode(c, key):
    assert ms(c, key, "z", "MZ").code == "CLIENT_ERROR"
    assert c.cmd("mn") == b"MN", "the data block of a refused ms is swallowed"
    assert meta(c, f"mg {key} v").code == "EN"


def test_ms_compare_cas(c, key):
    assert ms(c, key, "a", "C1").code == "NF"
    ms(c, key, "a")
    cas = gets_cas(c, key)
    assert ms(c, key, "b", f"C{cas + 1000}").code == "EX"
    assert ms(c, key, "b", f"C{cas}").code == "HD"
    assert ms(c, key, "c", f"C{cas}").code == "EX", "the CAS moved on with the last store"
    assert meta(c, f"mg {key} v").value == b"b"


def test_ms_invalidate_with_stale_cas(c, key):
    ms(c, key, "first")
    ms(c, key, "current")   # a CAS above 1: C0 would be no CAS at all
    cas = gets_cas(c, key)
    assert ms(c, key, "older", f"C{cas - 1} I").code == "HD", "with I a stale CAS still stores"
    r = meta(c, f"mg {key} v c")
    assert r.value == b"older" and "X" in r.flags and "W" in r.flags, "...but marks the item stale"


def test_ms_invalidate_C0_is_no_older_cas(c, key):
    """memcached 1.6.45 takes a C of 0 as no CAS at all: with I it is not
    "older" than the item's, so the store is refused (EX) and the value kept
    (an item N just made included: the differential test's seed 28)."""
    ms(c, key, "current")
    assert ms(c, key, "zero", "C0 I").code == "EX"
    r = meta(c, f"mg {key} v")
    assert r.value == b"current" and "X" not in r.flags
    assert meta(c, f"mg {key}-n N0").code == "HD"
    assert ms(c, f"{key}-n", "zero", "MR C0 I").code == "EX"
    assert meta(c, f"mg {key}-n v").value == b""


def test_ms_quiet(c, key):
    c.send(f"ms {key} 1 q\r\nx\r\nms {key} 1 ME q\r\ny\r\nmn\r\n".encode())
    assert c.line() == b"NS", "q hides HD but not NS"
    assert c.line() == b"MN"
    assert meta(c, f"mg {key} v").value == b"x"


def test_ms_bad_data_chunk(c, key):
    c.send(f"ms {key} 2\r\nhiXX\r\n".encode())
    assert c.line() == b"CLIENT_ERROR bad data chunk"
    c.send(b"mn\r\n")
    while (line := c.line()) != b"MN":
        assert line in (b"ERROR", b"CLIENT_ERROR bad command line format"), \
            f"only the leftover bytes may be answered, got {line!r}"
    assert meta(c, f"mg {key} v").code == "EN"


def test_ms_too_large_is_swallowed(c, key):
    c.send(f"ms {key} 2000000 T0\r\n".encode() + b"a" * 2000000 + b"\r\nmn\r\n")
    assert c.line() == b"SERVER_ERROR object too large for cache"
    assert c.line() == b"MN", "the value was swallowed, not parsed as commands"
    assert meta(c, f"mg {key} v").code == "EN"


def test_ms_bad_command_lines(c, key):
    assert meta(c, f"ms {key} abc").code == "CLIENT_ERROR"
    assert meta(c, "ms").code in ("ERROR", "CLIENT_ERROR")
    assert meta(c, f"ms {key}").code == "CLIENT_ERROR"
    assert c.cmd("mn") == b"MN"


def test_ms_E_sets_explicit_cas(c, key):
    assert ms(c, key, "xyz", "E12345").code == "HD"
    assert gets_cas(c, key) == 12345
    assert ms(c, key, "xy2", "C12345 E555").code == "HD"
    assert int(meta(c, f"mg {key} c").flags["c"]) == 555


# ---- md --------------------------------------------------------------------------------
def test_md_hit_miss_and_quiet(c, key):
    assert meta(c, f"md {key}").code == "NF"
    ms(c, key, "x")
    assert meta(c, f"md {key} k O3").code == "HD"
    ms(c, key, "x")
    c.send(f"md {key} q\r\nmn\r\n".encode())
    assert c.line() == b"MN", "q hides HD"
    assert meta(c, f"mg {key} v").code == "EN"


def test_md_compare_cas(c, key):
    ms(c, key, "x")
    cas = gets_cas(c, key)
    assert meta(c, f"md {key} C{cas + 1}").code == "EX"
    assert meta(c, f"md {key} C{cas}").code == "HD"


def test_md_C0_compares_like_any_cas(c, key):
    # memcached 1.6.45 compares md's C whatever its value: no item has CAS 0,
    # so C0 is EX and the item stays (not "no compare", which would delete)
    ms(c, key, "x")
    assert meta(c, f"md {key} C0").code == "EX"
    assert meta(c, f"mg {key} v").value == b"x"


def test_md_invalidate(c, key):
    ms(c, key, "old", "T100")
    assert meta(c, f"md {key} I T30").code == "HD"
    r = meta(c, f"mg {key} v c t")
    assert r.code == "VA" and r.value == b"old", "an invalidated item is still served..."
    assert "X" in r.flags and "W" in r.flags, "...marked stale, and one client wins the recache"
    assert 28 <= int(r.flags["t"]) <= 30, "md I T30 sets the stale item's TTL"
    r2 = meta(c, f"mg {key} v")
    assert "X" in r2.flags and "Z" in r2.flags and "W" not in r2.flags
    assert ms(c, key, "fresh", "T100").code == "HD"
    r3 = meta(c, f"mg {key} v")
    assert r3.value == b"fresh" and not ({"X", "W", "Z"} & set(r3.flags))


def test_md_x_empties_the_value_and_keeps_the_item(c, key):
    # memcached 1.6.45: an empty item takes the old one's place, with md's F
    # flags and T expiry (none without T) and the old CAS unless E names one
    assert meta(c, f"md {key} x").code == "NF"
    c.store("set", key, "abc", flags=3)
    cas = int(meta(c, f"mg {key} c").flags["c"])
    assert meta(c, f"md {key} x").code == "HD"
    r = meta(c, f"mg {key} v f t s c")
    assert (r.code, r.value) == ("VA", b"")
    assert (r.flags["f"], r.flags["t"], r.flags["s"], int(r.flags["c"])) == ("0", "-1", "0", cas)
    c.store("set", key, "abc", flags=3)
    assert meta(c, f"md {key} x F5 T100 E777").code == "HD"
    r = meta(c, f"mg {key} v f t c")
    assert (r.value, r.flags["f"], r.flags["c"]) == (b"", "5", "777")
    assert 98 <= int(r.flags["t"]) <= 100
    # with I the empty item is stale: the next mg wins the recache
    c.store("set", key, "abc")
    assert meta(c, f"md {key} x I").code == "HD"
    r = meta(c, f"mg {key} v")
    assert r.value == b"" and "X" in r.flags and "W" in r.flags
    # C compares first; q hides HD
    assert meta(c, f"md {key} x C1").code == "EX"
    c.send(f"md {key} x q\r\nmn\r\n".encode())
    assert c.line() == b"MN"


def test_mg_ma_apply_T_and_N_in_request_order(c, key):
    # memcached 1.6.45 applies T and N in request order: a t before them
    # reports the TTL from before the request (-1 for an item N just made)
    def ttl(line):
        return int(meta(c, line).flags["t"])
    c.store("set", key, "1")
    assert ttl(f"mg {key} t T100") == -1
    assert 98 <= ttl(f"mg {key} t") <= 100
    assert 98 <= ttl(f"mg {key} t T200") <= 100
    assert 298 <= ttl(f"mg {key} T300 t") <= 300
    assert ttl(f"mg {key}-n t N100") == -1, "t before N: the item N just made has no TTL yet"
    assert 98 <= ttl(f"mg {key}-n t") <= 100
    assert ttl(f"ma {key}-a t N100") == -1
    assert 98 <= ttl(f"ma {key}-a t") <= 100
    assert ttl(f"ma {key}-a t T50 MD") != -1, "an existing counter's t says its TTL before T"
    assert 48 <= ttl(f"ma {key}-a t MD") <= 50
    # the last of T and N decides an item N makes
    assert 48 <= ttl(f"mg {key}-b N100 T50 t") <= 50
    assert 98 <= ttl(f"mg {key}-c T50 N100 t") <= 100
    assert 48 <= ttl(f"ma {key}-d N100 T50 t") <= 50
    assert 98 <= ttl(f"ma {key}-e T50 N100 t") <= 100
    # T-1 then N0: the new item keeps N0's "no expiry"
    r = meta(c, f"mg {key}-f T-1 N0 v t")
    assert (r.code, r.value, r.flags["t"]) == ("VA", b"", "-1") and "W" in r.flags
    r = meta(c, f"mg {key}-f v t")
    assert (r.code, r.flags["t"]) == ("VA", "-1") and "Z" in r.flags
    # an existing item: N does nothing, T expires it
    assert meta(c, f"mg {key}-f T-1 N0").code == "HD"
    assert meta(c, f"mg {key}-f v").code == "EN"
    # R compares the TTL it finds at its place: before T, the old one
    c.store("set", f"{key}-r", "1", exptime=1000)
    c.store("set", f"{key}-s", "1", exptime=1000)
    assert "W" not in meta(c, f"mg {key}-r R30 T10").flags
    assert "W" in meta(c, f"mg {key}-s T10 R30").flags


# ---- ma --------------------------------------------------------------------------------
def test_ma_miss_and_autovivify(c, key):
    assert meta(c, f"ma {key}").code == "NF"
    assert meta(c, f"ma {key} v").code == "NF"
    r = meta(c, f"ma {key} N100 J5 v t")
    assert (r.code, r.value) == ("VA", b"5"), "autovivify stores J, the initial value"
    assert 98 <= int(r.flags["t"]) <= 100
    assert meta(c, f"ma {key} v").value == b"6"
    r = meta(c, f"ma {key}-d N0 J5 MD v")
    assert r.value == b"5", "decrement autovivifies to J as well"


def test_ma_modes_and_delta(c, key):
    ms(c, key, "10")
    assert meta(c, f"ma {key} v").value == b"11"
    assert meta(c, f"ma {key} MI D5 v").value == b"16"
    assert meta(c, f"ma {key} M+ v").value == b"17"
    assert meta(c, f"ma {key} MD D7 v").value.rstrip() == b"10"
    assert meta(c, f"ma {key} M- D3 v").value.rstrip() == b"7"
    assert meta(c, f"ma {key} MD D100 v").value.rstrip() == b"0", "decrement floors at 0"
    r = meta(c, f"ma {key}")
    assert (r.code, r.value) == ("HD", None), "without v only HD"


def test_ma_return_flags(c, key):
    ms(c, key, "99", "T0")
    r = meta(c, f"ma {key} O99 k v t c")
    assert r.value == b"100" and r.flags["O"] == "99" and r.flags["k"] == key
    assert r.flags["t"] == "-1"
    assert int(r.flags["c"]) == gets_cas(c, key)


def test_ma_64_bit_wrap(c, key):
    ms(c, key, "18")
    assert meta(c, f"ma {key} D18446744073709551615 v").value == b"17"
    ms(c, key, "18446744073709551615")
    assert meta(c, f"ma {key} v").value == b"0"


def test_ma_errors(c, key):
    ms(c, key, "abc")
    r = meta(c, f"ma {key} v")
    assert r.code == "CLIENT_ERROR" and "non-numeric" in r.value, r
    ms(c, key + "-n", "1")
    assert meta(c, f"ma {key}-n Mx v").code == "CLIENT_ERROR"
    assert meta(c, f"ma {key}-n Dabc v").code == "CLIENT_ERROR"
    assert meta(c, f"ma {key}-n D18446744073709551616 v").code == "CLIENT_ERROR"
    assert meta(c, f"ma {key}-n v").value == b"2", "refused ma commands changed nothing"


def test_ma_quiet(c, key):
    ms(c, key, "1")
    c.send(f"ma {key} q D2\r\nmn\r\n".encode())
    assert c.line() == b"MN"
    assert meta(c, f"mg {key} v").value.rstrip() == b"3"


def test_ma_compare_cas(c, key):
    ms(c, key, "1")
    cas = gets_cas(c, key)
    assert meta(c, f"ma {key} C{cas + 1} v").code == "EX"
    assert meta(c, f"ma {key} C{cas} v").value == b"2"


# ---- mixing --------------------------------------------------------------------------
def test_meta_and_classic_share_items(c, key):
    assert c.store("set", key, "classic", flags=3) == b"STORED"
    r = meta(c, f"mg {key} v f")
    assert r.value == b"classic" and r.flags["f"] == "3"
    ms(c, key, "meta", "F4")
    assert c.values(f"get {key}") == {key: (4, b"meta", None)}


def test_pipelined_meta_batch(c, key):
    for i in range(20):
        ms(c, f"{key}-{i}", str(i))
    batch = "".join(f"mg {key}-{i} k v q\r\n" for i in range(40)) + "mn\r\n"
    c.send(batch.encode())
    got = {}
    while True:
        r = read_reply(c)
        if r.code == "MN":
            break
        assert r.code == "VA"
        got[r.flags["k"]] = r.value
    assert got == {f"{key}-{i}": str(i).encode() for i in range(20)}


# ---- precise cases the differential test found -------------------------------------------
def test_ma_quiet_hides_success_even_with_v(c, key):
    ms(c, key, "1")
    c.send(f"ma {key} v q\r\nmn\r\n".encode())
    assert c.line() == b"MN", "q on ma is noreply: a success, value included, says nothing"
    assert meta(c, f"mg {key} v").value == b"2"


def test_ma_quiet_hides_the_autovivify_too(c, key):
    """memcached 1.6.18 answered the ma that created a counter even with q;
    1.6.45 (the reference) hides that success like any other."""
    c.send(f"ma {key} N0 J5 q\r\nma {key}-v N0 J7 v q\r\nmn\r\n".encode())
    assert c.line() == b"MN", "q hides a success, also the one that created the counter"
    assert meta(c, f"mg {key} v").value == b"5"
    assert meta(c, f"mg {key}-v v").value == b"7"


def test_ms_s_is_the_stored_size(c, key):
    """s on ms is the size of what is stored now (the whole value after an
    append or prepend); a refused store answers with the length it was sent
    (memcached 1.6.45; cachetd said s<sent length> and nothing on NS/EX/NF)."""
    assert ms(c, key, "abc", "s").flags["s"] == "3"
    assert ms(c, key, "de", "s MA").flags["s"] == "5"
    assert ms(c, key, "f", "MP s").flags["s"] == "6"
    r = ms(c, key, "ghij", "s ME")
    assert (r.code, r.flags.get("s")) == ("NS", "4")
    r = ms(c, key, "gh", "s C1")
    assert (r.code, r.flags.get("s")) == ("EX", "2")
    r = ms(c, key + "-none", "xyz", "s MA")
    assert (r.code, r.flags.get("s")) == ("NS", "3")
    assert meta(c, f"mg {key} v").value == b"fabcde"


def test_mg_C_drops_the_value_when_the_cas_matches(c, key):
    """protocol.txt (1.6.45): mg C(token) sends HD instead of the value when
    the item's CAS matches; cachetd refused C as an invalid flag."""
    cas = int(ms(c, key, "val", "c").flags["c"])
    r = meta(c, f"mg {key} v C{cas} s")
    assert (r.code, r.value, r.flags.get("s")) == ("HD", None, "3")
    r = meta(c, f"mg {key} v C{cas + 1}")
    assert (r.code, r.value) == ("VA", b"val")
    assert meta(c, f"mg {key} v Cabc").value == "CLIENT_ERROR bad token in command line format"


def test_ms_mode_is_checked_before_cas(c, key):
    ms(c, key, "x")
    assert ms(c, key, "y", "ME C1").code == "NS", "add of an existing key is NS whatever the CAS"
    assert ms(c, key + "-none", "z", "MA C1").code == "NS", "append to a missing key is NS, not NF"
    assert ms(c, key + "-none", "z", "MP C7").code == "NS"
    assert ms(c, key, "y", "MA C1 I").code == "EX", "I (store as stale) is for set mode only"
    r = meta(c, f"mg {key} v")
    assert r.value == b"x" and "X" not in r.flags


def test_failed_add_is_not_a_fetch(c, key):
    ms(c, key, "a")
    assert c.store("add", key, "b") == b"NOT_STORED"
    assert meta(c, f"mg {key} h").flags["h"] == "0"


# ---- replies that changed in memcached 1.6.45 -----------------------------------------------
def test_modes_are_upper_case_only(c, key):
    c.send(f"ms {key} 1 Ma\r\nx\r\nmn\r\n".encode())
    assert c.line() == b"CLIENT_ERROR invalid mode for ms M token"
    assert c.line() == b"MN", "the data block of the refused ms is skipped"
    assert meta(c, f"ma {key} Mi").value == "CLIENT_ERROR invalid mode for ma M token"
    assert meta(c, f"ma {key} Md").value == "CLIENT_ERROR invalid mode for ma M token"
    assert meta(c, f"mg {key} v").code == "EN"
    # the mode is the byte after M: what follows it is ignored
    assert ms(c, key, "y", "MSx").code == "HD"


def test_ms_S_flag_is_invalid(c, key):
    c.send(f"ms {key} 1 S100\r\nx\r\nmn\r\n".encode())
    assert c.line() == b"CLIENT_ERROR invalid flag"
    assert c.line() == b"MN"
    assert meta(c, f"mg {key} v").code == "EN"


def test_ms_flags_over_32_bits(c, key):
    c.send(f"ms {key} 1 F4294967296\r\nx\r\nmn\r\n".encode())
    assert c.line() == b"CLIENT_ERROR bad command line format"
    assert c.line() == b"MN"


def test_meta_ttl_is_32_bits(c, key):
    c.send(f"ms {key} 1 T2147483648\r\nx\r\nmn\r\n".encode())
    assert c.line() == b"CLIENT_ERROR bad token in command line format"
    assert c.line() == b"MN"
    assert meta(c, f"mg {key} T2147483648").value == "CLIENT_ERROR bad token in command line format"


def test_opaque_is_at_most_31_bytes(c, key):
    ok, long = "o" * 31, "o" * 32
    r = meta(c, f"mg {key} O{ok} k")
    assert (r.code, r.flags["O"]) == ("EN", ok)
    for line in (f"mg {key} O{long} v", f"md {key} O{long}", f"ma {key} O{long}"):
        assert meta(c, line).value == "CLIENT_ERROR opaque token too long", line
    c.send(f"ms {key} 1 O{long}\r\nx\r\nmn\r\n".encode())
    assert c.line() == b"CLIENT_ERROR opaque token too long"
    assert c.line() == b"MN"


def test_base64_key_token_is_at_most_250_bytes(c):
    token = "YWFh" * 63  # 252 characters, 189 bytes once decoded
    assert meta(c, f"mg {token} b v").value == "CLIENT_ERROR bad command line format"
    assert meta(c, f"md {token} b").value == "CLIENT_ERROR bad command line format"
    assert meta(c, f"ma {token} b").value == "CLIENT_ERROR invalid or duplicate flag"
    c.send(f"ms {token} 1 b\r\nx\r\nmn\r\n".encode())
    assert c.line() == b"CLIENT_ERROR bad command line format"
    assert c.line() == b"MN"
    assert meta(c, f"mg {'YWFh' * 62} b v").code == "EN", "248 characters are fine"


def test_base64_key_echo(c, key):
    raw = key.encode()
    b64 = base64.b64encode(raw).decode()
    # stored with a text key: mg echoes it decoded, md/ma as sent
    assert c.store("set", key, "1") == b"STORED"
    r = meta(c, f"mg {b64} b k v")
    assert r.flags["k"] == key and "b" not in r.flags
    r = meta(c, f"ma {b64} b k")
    assert r.code == "HD" and r.flags["k"] == b64 and "b" in r.flags
    # stored with a base64 key: mg echoes base64, even for a text request
    assert ms(c, b64, "2", "b").code == "HD"
    r = meta(c, f"mg {b64} b k v")
    assert r.flags["k"] == b64 and "b" in r.flags
    r = meta(c, f"mg {key} k v")
    assert r.flags["k"] == b64 and "b" in r.flags
    r = meta(c, f"md {b64} b k")
    assert r.code == "HD" and r.flags["k"] == b64 and "b" in r.flags
    # a miss echoes the key as sent
    r = meta(c, f"mg {b64} b k")
    assert r.code == "EN" and r.flags["k"] == b64 and "b" in r.flags


def test_md_E_sets_the_cas_of_an_invalidated_item(c, key):
    ms(c, key, "v")
    assert meta(c, f"md {key} I E777").code == "HD"
    r = meta(c, f"mg {key} c v")
    assert r.flags["c"] == "777" and "X" in r.flags
    # without I the item is deleted: E has nothing to apply to
    assert meta(c, f"md {key} C777 E12").code == "HD"
    assert meta(c, f"mg {key} v").code == "EN"


def test_ma_E_sets_the_cas(c, key):
    ms(c, key, "5")
    r = meta(c, f"ma {key} E999 c v")
    assert (r.value, r.flags["c"]) == (b"6", "999")
    assert gets_cas(c, key) == 999
    r = meta(c, f"ma {key}-new N0 E55 c v")
    assert (r.value, r.flags["c"]) == (b"0", "55"), "a counter ma creates takes E too"


def test_meta_flags_any_command_ignores(c, key):
    # memcached reads one set of flags for every meta command: one a command
    # has no use for is accepted and ignored
    ms(c, key, "v")
    assert meta(c, f"mg {key} I M F1 J1 x").code == "HD"
    assert meta(c, f"mg {key} v5 k1").value == b"v", "a plain flag ignores what follows its letter"
    assert meta(c, f"md {key}-none v t f").code == "NF"
    assert meta(c, f"mg {key} Z").value == "CLIENT_ERROR invalid flag"
    assert meta(c, f"md {key} C1 C2").value == "CLIENT_ERROR duplicate flag"
    assert meta(c, f"md {key} Cabc").value == "CLIENT_ERROR bad token in command line format"


def test_meta_line_is_at_most_20_tokens(c, key):
    flags = "v k c f s t h l u O1 T0 N0 R0 E1 q x I P".split()
    r = meta(c, f"mg {key} " + " ".join(flags))
    assert r.code == "VA", "20 tokens are fine"
    assert meta(c, f"mg {key} " + " ".join(flags + ["L"])).value == "CLIENT_ERROR options flags are too long"


def test_ma_on_an_empty_value_is_non_numeric_before_the_cas(c, key):
    """memcached 1.6.45 refuses an empty value as non-numeric before it
    compares C; cachetd answered EX for a wrong C. A value that is not empty
    still compares the CAS first (EX)."""
    for empty in (f"mg {key} N0 c", f"ms {key} 0 c"):
        cas = int(meta(c, empty, b"" if empty.startswith("ms") else None).flags["c"])
        r = meta(c, f"ma {key} C{cas + 1}")
        assert r.value == "CLIENT_ERROR cannot increment or decrement non-numeric value", empty
    cas = int(ms(c, key, "x", "c").flags["c"])
    assert meta(c, f"ma {key} C{cas + 1}").code == "EX"


def test_ms_append_with_N_creates_a_missing_item_whatever_C_says(c, key):
    """memcached 1.6.45 compares C only against an item that is there: ms in
    append or prepend mode with N creates the missing item even with C
    (cachetd answered NS). With an item there, C still decides."""
    r = ms(c, key, "abc", "MA N0 C12345 c")
    assert r.code == "HD"
    assert meta(c, f"mg {key} v").value == b"abc"
    cas = int(r.flags["c"])
    assert ms(c, key, "d", f"MA N0 C{cas + 1}").code == "EX"
    assert ms(c, key + "-p", "xy", "MP N0 C7").code == "HD"


def test_P_and_L_are_accepted_and_ignored_by_every_meta_command(c, key):
    """protocol.txt: all meta commands accept P and L (hints for a proxy) and
    ignore them; cachetd refused them as invalid flags."""
    assert ms(c, key, "5", "P/route Lx T0").code == "HD"
    assert meta(c, f"mg {key} v Lpath/ P1").value == b"5"
    r = meta(c, f"ma {key} v Pp Lq")
    assert (r.code, r.value) == ("VA", b"6")
    assert meta(c, f"md {key} L1 q P2\r\nmn").code == "MN"
    assert meta(c, f"mg {key} v").code == "EN"


def test_a_bare_M_names_no_mode(c, key):
    """`ms k 1 M` stored and `ma k M` incremented; memcached 1.6.45 refuses a
    mode flag without its mode byte like an unknown mode."""
    c.send(f"ms {key} 1 M\r\nx\r\nmn\r\n".encode())
    assert c.line() == b"CLIENT_ERROR invalid mode for ms M token"
    assert c.line() == b"MN"
    assert meta(c, f"ma {key} N0 J1 M").value == "CLIENT_ERROR invalid mode for ma M token"


def _ms_error(c, line, data):
    """The error a refused ms line answers; its data block must be skipped."""
    c.send(f"{line}\r\n{data}\r\nmn\r\n".encode())
    reply = c.line()
    assert c.line() == b"MN", "the data block of the refused ms is skipped"
    return reply


@pytest.mark.parametrize("bad", ["Ex", "T99999999999999999999"])
def test_a_bad_F_does_not_hide_an_earlier_bad_token(c, key, bad):
    """memcached 1.6.45 fails a line with a bad F but lets the error of a bad
    token left of it stand; cachetd answered F's "bad command line format"."""
    assert _ms_error(c, f"ms {key} 1 {bad} F", "1") == b"CLIENT_ERROR bad token in command line format"
    assert _ms_error(c, f"ms {key} 1 F {bad}", "1") == b"CLIENT_ERROR bad token in command line format"
    assert _ms_error(c, f"ms {key} 1 F", "1") == b"CLIENT_ERROR bad command line format"
    assert meta(c, f"mg {key} v").code == "EN"


# three base64 characters: no whole 4-character group, so no decoder makes a
# key of it (memcached skips characters outside the alphabet, cachetd refuses
# them, so a key with such characters would not do for both)
UNDECODABLE = "foo"


def test_a_key_that_does_not_decode_beats_a_bad_F(c):
    """`ms foo 3 b F`: memcached 1.6.45 decodes the key where b stands and F
    names no error of its own; cachetd answered "bad command line format"."""
    assert _ms_error(c, f"ms {UNDECODABLE} 3 b F", "111") == b"CLIENT_ERROR error decoding key"
    assert _ms_error(c, f"ms {UNDECODABLE} 3 F b", "111") == b"CLIENT_ERROR error decoding key"


def test_a_key_that_does_not_decode_is_reported_before_a_long_opaque(c):
    """memcached 1.6.45 checks the opaque's length only once the flags have
    passed; cachetd answered "opaque token too long" for `mg bar b O<32>`."""
    long_opaque = "O" + "x" * 32
    assert meta(c, f"mg {UNDECODABLE} b {long_opaque}").value == "CLIENT_ERROR error decoding key"
    assert meta(c, f"mg {UNDECODABLE} {long_opaque} b").value == "CLIENT_ERROR error decoding key"


@pytest.mark.parametrize("bad", ["R4294967296", "N18446744073709551615", "Tabc", "Ex"])
@pytest.mark.parametrize("command", ["mg", "md", "ms"])
def test_base64_key_error_in_flag_order(c, command, bad):
    """Of two errors in the flags the one further right is reported, as in
    memcached 1.6.45; the key's decoding error stands where b stands (cachetd
    decoded the key after all flags, so a bad token always won)."""
    def reply(flags):
        if command == "ms":
            return _ms_error(c, f"ms {UNDECODABLE} 1 {flags}", "1").decode()
        return meta(c, f"{command} {UNDECODABLE} {flags}").value
    assert reply(f"{bad} b") == "CLIENT_ERROR error decoding key"
    assert reply(f"b {bad}") == "CLIENT_ERROR bad token in command line format"
