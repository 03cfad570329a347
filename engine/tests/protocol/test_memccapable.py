"""memccapable (Debian's libmemcached-tools) is an independent implementation of
the ASCII protocol's expectations; every one of its ASCII tests must pass but
two: `ascii delete` and `ascii delete noreply` send `delete <key> <time>` and
expect an error, from memcached releases that refused a hold time. memcached
1.6.45 ignores what follows the key and fails both the same way; cachetd
follows 1.6.45, so these two must fail, at that assertion and nowhere else.

It prints one `<name> [pass]` line per test and exits non-zero on failure; we
check all three signals (exit code, per-test lines, closing line) so a crash or
an early exit of memccapable itself can never look like a pass. It writes a
test's name to stdout but `[FAIL]` and the failed assertion to stderr, so it
runs unbuffered (stdbuf) with both streams merged to keep each verdict on its
test's line.
"""
import re
import shutil
import subprocess

import pytest

# memccapable -a from libmemcached-tools 1.1.x runs exactly these, in this order.
ASCII_TESTS = [
    "ascii version", "ascii quit", "ascii verbosity", "ascii set", "ascii set noreply",
    "ascii get", "ascii gets", "ascii mget", "ascii flush", "ascii flush noreply",
    "ascii add", "ascii add noreply", "ascii replace", "ascii replace noreply",
    "ascii cas", "ascii cas noreply", "ascii delete", "ascii delete noreply",
    "ascii incr", "ascii incr noreply", "ascii decr", "ascii decr noreply",
    "ascii append", "ascii append noreply", "ascii prepend", "ascii prepend noreply",
    "ascii stat",
]


@pytest.fixture(scope="module", params=["default", "epoll"])
def memccapable_run(request, tmp_path_factory):
    """One memccapable run per network backend (cachetd's -o no_io_uring is plain epoll)."""
    from conftest import IS_MEMCACHED, ServerFactory
    if request.param == "epoll" and IS_MEMCACHED:
        pytest.skip("memcached has no -o no_io_uring")
    binary = shutil.which("memccapable")
    if binary is None:
        pytest.fail("memccapable not installed (hack/install-deps.sh installs libmemcached-tools)")
    factory = ServerFactory(str(tmp_path_factory.mktemp("memccapable")))
    server = factory(*(["-o", "no_io_uring"] if request.param == "epoll" else []))
    try:
        proc = subprocess.run(["stdbuf", "-o0", "-e0", binary, "-h", "127.0.0.1", "-p", str(server.port),
                               "-a", "-v", "-t", "5"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
        server.check_healthy()
    finally:
        factory.stop_all()
    results = {}
    current = None
    for line in proc.stdout.splitlines():
        m = re.match(r"^(ascii [a-z ]+?)\s*(\[(pass|FAIL|skip)\])?$", line.strip(), re.IGNORECASE)
        if m and m.group(1) in ASCII_TESTS:
            current = m.group(1)
            if m.group(3):
                results[current] = m.group(3).lower()
            continue
        m = re.match(r"^\[(pass|FAIL|skip)\]$", line.strip(), re.IGNORECASE)
        if m and current:
            results[current] = m.group(1).lower()
    return proc, results


# refused by memcached < 1.6.45 only (see the module's docstring)
DELETE_HOLD_TIME = {"ascii delete", "ascii delete noreply"}


@pytest.mark.parametrize("name", ASCII_TESTS)
def test_memccapable_ascii(memccapable_run, name):
    proc, results = memccapable_run
    expected = "fail" if name in DELETE_HOLD_TIME else "pass"
    assert results.get(name) == expected, (
        f"memccapable `{name}`: {results.get(name, 'not run')}\noutput:\n{proc.stdout}")
    if expected == "fail":
        # the failure is the error expected after `delete <key> <time>`, nothing else
        section = proc.stdout.split(name, 1)[1].split("ascii ", 1)[0]
        assert "receive_error_response()" in section, section


def test_memccapable_whole_run(memccapable_run):
    proc, results = memccapable_run
    assert proc.returncode != 0 and f"{len(DELETE_HOLD_TIME)} of {len(ASCII_TESTS)} tests failed" in proc.stdout, \
        f"memccapable exit {proc.returncode}\n{proc.stdout}"
    assert len(results) == len(ASCII_TESTS), f"expected {len(ASCII_TESTS)} results, got {results}"
