# Sourced by the scripts that build cluster parts from the Go module proxy
# and cache them by version outside the clone (hack/prometheus-stack.sh,
# hack/security-stack.sh). Concurrency: make check and make up may want the
# same result at once; one builds under a per-result flock, the others wait
# on it and then find it cached.

# cached_lock CACHE NAME: takes NAME's build lock in CACHE (fd in $lock),
# waiting, with a word, while another build holds it.
cached_lock() {
  exec {lock}>"$1/.$2.lock"
  if ! flock -n "$lock"; then
    echo "==> waiting for another build of $2"
    flock "$lock"
  fi
}

# cached_publish CACHE OUT NAME: copies the cached file or directory NAME
# into OUT, releasing the lock first.
cached_publish() {
  exec {lock}>&-
  if [ -d "$1/$3" ]; then
    rm -rf "${2:?}/$3" && cp -r "$1/$3" "$2/$3"
  elif ! cmp -s "$1/$3" "$2/$3" 2>/dev/null; then
    # Copy then rename: a running binary cannot be overwritten ("Text file busy").
    cp "$1/$3" "$2/.$3.tmp.$$" && mv "$2/.$3.tmp.$$" "$2/$3"
  fi
}

# cached_background_if_asked OUT WHAT SCRIPT ARGS...: with --background first
# in ARGS, reruns SCRIPT with the rest detached (log OUT/background.log) and
# exits; otherwise returns.
cached_background_if_asked() {
  local out=$1 what=$2 script=$3
  shift 3
  [ "${1:-}" = --background ] || return 0
  shift
  mkdir -p "$out"
  "$script" "$@" >"$out/background.log" 2>&1 </dev/null &
  echo "==> building $what in the background (pid $!, log $out/background.log)"
  exit 0
}
