# Sourced by writer-stall.sh and xt-trace.sh (not run): extstore's disk as
# bench-extstore sets it up, an ext4 image behind a loop device with direct
# IO, for scripts that start their own servers on it. Why one file: the
# image, its loop device and their teardown are the same in each, and a
# teardown that misses a step leaves a loop device behind on the machine.
#
# ext_image_up SIZE_MB NAME: makes $EXT_TMP (a fresh directory), the image
# ${EXT_IMG_DIR:-/var/tmp}/cachet-NAME-PID.img and its loop device
# ($EXT_LOOP), mounted on $EXT_MNT. ext_image_down undoes all of it and
# may run more than once; the caller's EXIT trap calls it after stopping
# its servers. Needs root.

EXT_TMP=; EXT_IMG=; EXT_MNT=; EXT_LOOP=

ext_image_up() {
  EXT_TMP=$(mktemp -d)
  EXT_IMG=${EXT_IMG_DIR:-/var/tmp}/cachet-$2-$$.img
  EXT_MNT=$EXT_TMP/mnt
  mkdir -p "$EXT_MNT"
  truncate -s "$1M" "$EXT_IMG"
  EXT_LOOP=$(losetup --find --show --direct-io=on "$EXT_IMG")
  mkfs.ext4 -q "$EXT_LOOP" && mount "$EXT_LOOP" "$EXT_MNT"
}

ext_image_down() {
  # a busy mount is detached lazily: the loop device and image still go
  if [ -n "$EXT_MNT" ] && mountpoint -q "$EXT_MNT" 2>/dev/null; then
    umount "$EXT_MNT" 2>/dev/null || umount -l "$EXT_MNT" || true
  fi
  if [ -n "$EXT_LOOP" ]; then losetup -d "$EXT_LOOP" 2>/dev/null || true; fi
  rm -rf "$EXT_TMP" "$EXT_IMG"
  EXT_TMP=; EXT_IMG=; EXT_MNT=; EXT_LOOP=
}
